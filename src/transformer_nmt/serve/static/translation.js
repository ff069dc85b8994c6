// A translation on the page: the translated document in the output pane, the source's
// words under the editor, and a card per sentence with its words, n-best list and
// heatmaps. Every word is a span that knows its sentence and index, for highlighting.
// Through a pivot, the sentences are the pivot language's, and the text in it is shown
// under the translation.

import { el, els } from "./dom.js";
import { confidenceBand, confidenceTitle, formatScore, languageName } from "./format.js";
import { prepareSentence, renderAttentionControls } from "./attention.js";
import { heatmapSection } from "./heatmap.js";
import { state } from "./state.js";

function wordSpan(kind, sentence, index, text) {
  const span = el("span", { class: `word ${kind}`, "data-s": sentence.index, "data-w": index, text });
  const list = kind === "tw" ? sentence.targetEls : sentence.sourceEls;
  (list[index] = list[index] || []).push(span);
  return span;
}

/** Where each word lies in `text`, in order: [start, end] or null where it cannot be found
 *  close to the previous one (sentencepiece may normalize characters). */
function locateWords(words, text, from = 0) {
  let cursor = from;
  return words.map((word) => {
    if (!word.text) return null;
    const at = text.indexOf(word.text, cursor);
    if (at < 0 || text.slice(cursor, at).trim().length > 2) return null;
    cursor = at + word.text.length;
    return [at, cursor];
  });
}

/** `text` (a whole document) into `container`, each sentence's words as spans; what lies
 *  between sentences (spaces, line and paragraph breaks) is kept exactly. */
function renderDocument(container, text, sentences, side) {
  const parts = [];
  let cursor = 0;
  for (const sentence of sentences) {
    const own = side === "tw" ? sentence.data.text : sentence.data.source;
    const at = own ? text.indexOf(own, cursor) : -1;
    if (at < 0) continue;
    parts.push(text.slice(cursor, at));
    const words = side === "tw" ? sentence.targetWords : sentence.sourceWords;
    const spans = locateWords(words, own);
    let inner = 0;
    const node = el("span", { class: "sentence-text" });
    const band = side === "tw" && confidenceBand(sentence.data.confidence);
    if (band === "low") {
      node.classList.add("low-confidence");
      node.title = confidenceTitle(sentence.data);
    }
    spans.forEach((span, i) => {
      if (!span) return;
      node.append(own.slice(inner, span[0]), wordSpan(side, sentence, i, own.slice(span[0], span[1])));
      inner = span[1];
    });
    node.append(own.slice(inner));
    parts.push(node);
    cursor = at + own.length;
  }
  parts.push(text.slice(cursor));
  container.replaceChildren(...parts);
}

/** A sentence's confidence as a small coloured gauge, or nothing without one. */
function confidenceGauge(data) {
  const band = confidenceBand(data.confidence);
  if (!band) return "";
  const percent = Math.round(data.confidence * 100);
  return el("span", { class: `confidence ${band}`, title: confidenceTitle(data),
    role: "meter", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(percent),
    "aria-label": "confidence" },
  el("span", { class: "gauge", style: `--level: ${percent}%` }), `${percent}%`);
}

/** Why a sentence's confidence is low, or why it was withheld, as a line of its card. */
function confidenceNote(data) {
  if (data.withheld) return el("p", { class: "confidence-note withheld", text: `Withheld: ${data.reason}` });
  const reasons = data.confidence_reasons || [];
  return reasons.length ? el("p", { class: "confidence-note", text: `Low confidence: ${reasons.join("; ")}` }) : "";
}

/** The text in the pivot language a translation went through, quietly under it; the
 *  first model's confidence in its title, since a poor first hop spoils the second. */
function renderPivot(pivot) {
  els.pivotText.hidden = !pivot;
  if (!pivot) {
    els.pivotText.replaceChildren();
    return;
  }
  const name = languageName(pivot.language);
  const confidence = typeof pivot.confidence === "number" ?
    `; the first model's confidence in it: ${Math.round(pivot.confidence * 100)}%` : "";
  els.pivotText.title = `The text in ${name}, which the second model translated${confidence}`;
  els.pivotText.replaceChildren(el("span", { class: "via-label", text: `via ${name}: ` }),
    el("span", { lang: pivot.language, text: pivot.text }),
    pivot.withheld ? el("em", { text: " (a sentence was withheld)" }) : "");
}

/** The sentence cards; `pair` names their languages (a pivot's sentences are in it). */
function renderSentences(sentences, pair) {
  const sourceTag = (pair && (pair.pivot || pair.source)) || "src";
  const targetTag = (pair && pair.target) || "tgt";
  els.sentences.replaceChildren(...sentences.map((sentence) => {
    const card = el("li", { class: "sentence", id: `sentence-${sentence.index}` });
    const words = (kind, list) => {
      const box = el("div", { class: "words", lang: kind === "sw" ? sourceTag : targetTag });
      list.forEach((word, i) => {
        if (i) box.append(" ");
        const span = wordSpan(kind, sentence, i, word.text);
        if (kind === "tw" && sentence.attention) span.tabIndex = 0;
        box.append(span);
      });
      return box;
    };
    card.append(
      el("div", { class: "token-row" }, el("span", { class: "lang-tag", text: sourceTag }),
        words("sw", sentence.sourceWords), el("span")),
      el("div", { class: "token-row" }, el("span", { class: "lang-tag", text: targetTag }),
        words("tw", sentence.targetWords),
        el("span", { class: "scores" }, confidenceGauge(sentence.data),
          el("span", { class: "score", title: "log-probability / length penalty (higher is better)",
            text: formatScore(sentence.data.score) }))),
      confidenceNote(sentence.data),
    );
    const nbest = sentence.data.nbest || [];
    if (nbest.length > 1) {
      card.append(el("ol", { class: "nbest", "aria-label": `${nbest.length} best translations` },
        ...nbest.map((hyp, i) => el("li", { class: i === 0 ? "best" : "" },
          el("span", { class: "rank", text: `${i + 1}.` }),
          el("span", { class: "text", text: hyp.text }),
          el("span", { class: "score", text: formatScore(hyp.score) })))));
    }
    if (sentence.attention) card.append(heatmapSection(sentence));
    return card;
  }));
}

/** The editor's backdrop scrolled with the editor, so that its words lie under the text. */
export function syncBackdropScroll() {
  els.backdrop.scrollTop = els.source.scrollTop;
  els.backdrop.scrollLeft = els.source.scrollLeft;
}

/** The server's translation `doc` of `sourceText` (one element of its "translations")
 *  along `pair` (null on a one-model server whose model records no languages). */
export function showResult(sourceText, doc, pair) {
  const sentences = doc.sentences.map(prepareSentence);
  state.result = { sourceText, doc, pair, sentences };
  state.lit = [];
  renderDocument(els.output, doc.text, sentences, "tw");
  // Through a pivot the sentences' sources are the pivot's words, not the editor's.
  if (els.source.value === sourceText && !doc.pivot) {
    renderDocument(els.backdrop, sourceText, sentences, "sw");
  } else {
    els.backdrop.replaceChildren();
  }
  syncBackdropScroll();
  renderPivot(doc.pivot);
  els.copy.disabled = !doc.text;
  renderAttentionControls(sentences);
  renderSentences(sentences, pair);
  els.details.hidden = sentences.length === 0;
}

export function clearResult() {
  state.result = null;
  state.lit = [];
  els.output.replaceChildren(el("p", { class: "placeholder",
    text: "The translation appears here. Hover a word to see which source words it attends to." }));
  els.backdrop.replaceChildren();
  renderPivot(null);
  els.details.hidden = true;
  els.copy.disabled = true;
}
