// The translation page of `nmt serve`: talks to GET /v1/model and POST /v1/translate,
// shows the translation, the n-best lists and the encoder-decoder attention.
// No framework and nothing from outside the server: the page must work offline.
"use strict";

(() => {
  const KEY_STORAGE = "transformer-nmt.api-key";
  const WORD_START = "\u2581"; // sentencepiece's word-boundary mark
  const SPECIAL = new Set(["</s>", "<s>", "<pad>"]);
  // matplotlib's "Blues", the colour map of `nmt attention`'s pictures, from 0 to 1.
  const BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5",
    "#08519c", "#08306b"].map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));

  const $ = (id) => document.getElementById(id);
  const els = {
    form: $("translate-form"), source: $("source"), backdrop: $("source-backdrop"),
    output: $("output"), status: $("status"), button: $("translate-button"),
    beam: $("beam"), alpha: $("alpha"), nbest: $("nbest"), wantAttention: $("want-attention"),
    keyField: $("key-field"), apiKey: $("api-key"), copy: $("copy-button"),
    modelInfo: $("model-info"), sourceName: $("source-name"), targetName: $("target-name"),
    sourceLabel: $("source-label"), targetLabel: $("target-label"), charCount: $("char-count"),
    details: $("details"), sentences: $("sentences"), attentionControls: $("attention-controls"),
    layerSelect: $("layer-select"), headSelect: $("head-select"),
  };

  const state = {
    model: null,
    busy: false,
    result: null, // {sourceText, doc, sentences: [prepared sentence]}
    lit: [], // elements lit by the current hover, to clear them
    current: null, // the sentence card marked current
    selection: { layer: "avg", head: "avg" },
  };

  // ---------------------------------------------------------------- helpers

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    }
    node.append(...children);
    return node;
  }

  function languageName(code) {
    if (!code) return null;
    try {
      const name = new Intl.DisplayNames(["en"], { type: "language" }).of(code);
      return name || code;
    } catch {
      return code;
    }
  }

  function formatScore(score) {
    return typeof score === "number" ? score.toFixed(3).replace("-", "\u2212") : "";
  }

  function formatCount(n) {
    if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
    if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
    return String(n);
  }

  /** The JSON body of a response, or an {error} saying it was not JSON. */
  async function readJson(response) {
    const raw = await response.text();
    try {
      return JSON.parse(raw);
    } catch {
      const line = raw.trim().split("\n")[0].slice(0, 200);
      return { error: line || `the server answered ${response.status} ${response.statusText} with no body` };
    }
  }

  /** The server's one-line error from a body ({"error"}, or FastAPI's {"detail"}). */
  function errorMessage(body, response) {
    if (body && typeof body.error === "string") return body.error;
    if (body && body.detail !== undefined) {
      const detail = Array.isArray(body.detail) ? body.detail[0] : body.detail;
      if (typeof detail === "string") return detail;
      if (detail && detail.msg) return `${(detail.loc || []).join(".")}: ${detail.msg}`;
    }
    return `${response.status} ${response.statusText}`;
  }

  // ---------------------------------------------------------------- status line

  function showStatus(text) {
    els.status.className = "status";
    els.status.setAttribute("role", "status");
    els.status.textContent = text;
  }

  function showError(message, code) {
    els.status.className = "status error";
    els.status.setAttribute("role", "alert");
    els.status.replaceChildren(el("strong", { text: code ? `Error ${code}: ` : "Error: " }), message);
  }

  // ---------------------------------------------------------------- model description

  async function loadModel() {
    let body;
    try {
      const response = await fetch("/v1/model", { headers: { Accept: "application/json" } });
      body = await readJson(response);
      if (!response.ok) throw new Error(errorMessage(body, response));
    } catch (err) {
      els.modelInfo.textContent = "The model description could not be read.";
      showError(`could not read /v1/model: ${err.message}`);
      return;
    }
    state.model = body;
    describeModel(body);
  }

  function describeModel(model) {
    const source = languageName(model.source_language);
    const target = languageName(model.target_language);
    els.sourceName.textContent = source || "Source";
    els.targetName.textContent = target || "Target";
    els.sourceLabel.textContent = source ? `${source} text` : "Source text";
    els.targetLabel.textContent = target ? `${target} translation` : "Translation";
    document.title = source && target ? `${source} → ${target} · transformer-nmt` : document.title;

    const facts = [];
    const add = (label, value) => facts.push([label, value]);
    if (model.name) add("", model.name);
    if (model.preset) add("preset", model.preset);
    if (model.parameters) add("parameters", formatCount(model.parameters));
    if (model.vocabulary_size) add("vocabulary", model.vocabulary_size.toLocaleString("en"));
    if (model.training_steps != null) add("steps", model.training_steps.toLocaleString("en"));
    if (model.bleu != null) add("BLEU", model.bleu.toFixed(2));
    if (model.precision) add("precision", model.precision);
    els.modelInfo.replaceChildren();
    facts.forEach(([label, value], i) => {
      if (i) els.modelInfo.append(" ", el("span", { class: "sep", "aria-hidden": "true", text: "·" }), " ");
      els.modelInfo.append(el("span", { class: "fact" }, label ? `${label} ` : "", el("strong", { text: value })));
    });

    const defaults = model.defaults || {};
    const limits = model.limits || {};
    if (defaults.beam) els.beam.value = defaults.beam;
    if (defaults.alpha != null) els.alpha.value = defaults.alpha;
    if (defaults.nbest) els.nbest.value = defaults.nbest;
    if (limits.max_beam) els.beam.max = limits.max_beam;
    syncNbestLimit();
    updateCharCount();
    if (model.api_key_required) showKeyField(false);
  }

  function showKeyField(focus) {
    els.keyField.hidden = false;
    if (!els.apiKey.value) els.apiKey.value = localStorage.getItem(KEY_STORAGE) || "";
    if (focus) els.apiKey.focus();
  }

  // ---------------------------------------------------------------- options

  /** N-best may not exceed the beam (nor the server's limit). */
  function syncNbestLimit() {
    const limits = (state.model && state.model.limits) || {};
    const beam = parseInt(els.beam.value, 10) || 1;
    const max = Math.max(1, Math.min(beam, limits.max_nbest || beam));
    els.nbest.max = max;
    if ((parseInt(els.nbest.value, 10) || 1) > max) els.nbest.value = max;
  }

  function readInteger(input, name) {
    const value = Number(input.value);
    const min = Number(input.min);
    const max = Number(input.max);
    if (input.value.trim() === "" || !Number.isInteger(value) || value < min || value > max) {
      throw new Error(`${name} must be a whole number from ${min} to ${max}, not "${input.value}"`);
    }
    return value;
  }

  function readOptions() {
    const alpha = Number(els.alpha.value);
    if (els.alpha.value.trim() === "" || !Number.isFinite(alpha) || alpha < 0) {
      throw new Error(`alpha must be a number of 0 or more, not "${els.alpha.value}"`);
    }
    return {
      beam: readInteger(els.beam, "beam"),
      alpha,
      nbest: readInteger(els.nbest, "n-best"),
      attention: els.wantAttention.checked,
    };
  }

  function updateCharCount() {
    const n = els.source.value.length;
    const max = state.model && state.model.limits && state.model.limits.max_characters;
    els.charCount.textContent = max ? `${n.toLocaleString("en")} / ${max.toLocaleString("en")}` :
      `${n.toLocaleString("en")} characters`;
    els.charCount.classList.toggle("over-limit", Boolean(max && n > max));
  }

  // ---------------------------------------------------------------- translating

  function setBusy(busy) {
    state.busy = busy;
    els.button.disabled = busy;
    els.button.classList.toggle("busy", busy);
    els.button.querySelector(".label").textContent = busy ? "Translating…" : "Translate";
    els.output.setAttribute("aria-busy", String(busy));
  }

  async function translate() {
    if (state.busy) return;
    const text = els.source.value;
    if (!text.trim()) {
      clearResult();
      showStatus("Type or paste some text first.");
      els.source.focus();
      return;
    }
    let options;
    try {
      options = readOptions();
    } catch (err) {
      showError(err.message);
      return;
    }
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    const key = els.apiKey.value.trim();
    if (key) headers["X-API-Key"] = key;

    setBusy(true);
    showStatus("Translating…");
    const started = performance.now();
    try {
      const response = await fetch("/v1/translate", {
        method: "POST", headers, body: JSON.stringify({ text, ...options }),
      });
      const body = await readJson(response);
      if (!response.ok) {
        if (response.status === 401 || response.status === 403) showKeyField(true);
        showError(errorMessage(body, response), response.status);
        return;
      }
      const doc = body.translations && body.translations[0];
      if (!doc) throw new Error("the server's answer has no translation");
      showResult(text, doc);
      const roundTrip = performance.now() - started;
      const count = doc.sentences.length;
      const parts = [`${count} sentence${count === 1 ? "" : "s"}`, `${Math.round(roundTrip)} ms`];
      if (typeof body.elapsed_ms === "number") parts.push(`${body.elapsed_ms.toFixed(1)} ms on the server`);
      parts.push(`beam ${options.beam}, alpha ${options.alpha}`);
      showStatus(parts.join(" · "));
    } catch (err) {
      showError(`could not translate: ${err.message}`);
    } finally {
      setBusy(false);
    }
  }

  function clearResult() {
    state.result = null;
    state.lit = [];
    els.output.replaceChildren(el("p", { class: "placeholder",
      text: "The translation appears here. Hover a word to see which source words it attends to." }));
    els.backdrop.replaceChildren();
    els.details.hidden = true;
    els.copy.disabled = true;
  }

  // ---------------------------------------------------------------- words and attention

  /** Words from sentencepiece pieces: a piece starting with "▁" starts a new word.
   *  Each word keeps the indices of its pieces (rows or columns of the attention). */
  function wordsFromPieces(tokens) {
    const words = [];
    tokens.forEach((token, index) => {
      if (SPECIAL.has(token)) return;
      const text = token.split(WORD_START).join("");
      if (token.startsWith(WORD_START) || !words.length) words.push({ text, pieces: [index] });
      else {
        const last = words[words.length - 1];
        last.text += text;
        last.pieces.push(index);
      }
    });
    return words.filter((word) => word.text.length);
  }

  function wordsFromText(text) {
    return text.split(/\s+/).filter(Boolean).map((word) => ({ text: word, pieces: [] }));
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

  function prepareSentence(sentence, index) {
    const attention = sentence.attention && sentence.attention.layers && sentence.attention.layers.length ?
      sentence.attention : null;
    return {
      index,
      data: sentence,
      attention,
      sourceWords: attention ? wordsFromPieces(attention.source_tokens) : wordsFromText(sentence.source || ""),
      targetWords: attention ? wordsFromPieces(attention.target_tokens) : wordsFromText(sentence.text || ""),
      sourceEls: [], // per source word: the elements showing it
      targetEls: [],
      matrices: new Map(), // selection key -> word-level attention
    };
  }

  /** Piece-level attention (target x source) of one layer/head, or their average. */
  function pieceMatrix(attention, selection) {
    const layers = selection.layer === "avg" ? attention.layers.map((_, i) => i) : [selection.layer];
    const heads = selection.head === "avg" ? attention.layers[0].map((_, i) => i) : [selection.head];
    const rows = attention.target_tokens.length;
    const cols = attention.source_tokens.length;
    const sum = Array.from({ length: rows }, () => new Float64Array(cols));
    for (const l of layers) {
      for (const h of heads) {
        const map = attention.layers[l][h]; // (target, source)
        for (let t = 0; t < rows; t++) for (let s = 0; s < cols; s++) sum[t][s] += map[t][s];
      }
    }
    const count = layers.length * heads.length;
    for (const row of sum) for (let s = 0; s < cols; s++) row[s] /= count;
    return sum;
  }

  /** Word-level attention (target words x source words): a target word's piece rows are
   *  averaged, a source word's piece columns summed (the attention mass on the word). */
  function wordMatrix(sentence) {
    const key = `${state.selection.layer}/${state.selection.head}`;
    if (!sentence.matrices.has(key)) {
      const pieces = pieceMatrix(sentence.attention, state.selection);
      sentence.matrices.set(key, sentence.targetWords.map((tw) => sentence.sourceWords.map((sw) => {
        let total = 0;
        for (const t of tw.pieces) for (const s of sw.pieces) total += pieces[t][s];
        return total / tw.pieces.length;
      })));
    }
    return sentence.matrices.get(key);
  }

  // ---------------------------------------------------------------- rendering

  function wordSpan(kind, sentence, index, text) {
    const span = el("span", { class: `word ${kind}`, "data-s": sentence.index, "data-w": index, text });
    const list = kind === "tw" ? sentence.targetEls : sentence.sourceEls;
    (list[index] = list[index] || []).push(span);
    return span;
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

  function showResult(sourceText, doc) {
    const sentences = doc.sentences.map(prepareSentence);
    state.result = { sourceText, doc, sentences };
    state.lit = [];
    renderDocument(els.output, doc.text, sentences, "tw");
    if (els.source.value === sourceText) renderDocument(els.backdrop, sourceText, sentences, "sw");
    syncBackdropScroll();
    els.copy.disabled = !doc.text;
    renderAttentionControls(sentences);
    renderSentences(sentences);
    els.details.hidden = sentences.length === 0;
  }

  function renderAttentionControls(sentences) {
    const withAttention = sentences.find((s) => s.attention);
    els.attentionControls.hidden = !withAttention;
    document.getElementById("attention-hint").hidden = !withAttention;
    if (!withAttention) return;
    const layers = withAttention.attention.layers.length;
    const heads = withAttention.attention.layers[0].length;
    const fill = (select, count, noun, chosen) => {
      const options = [el("option", { value: "avg", text: `Average of ${count} ${noun.toLowerCase()}s` })];
      for (let i = 0; i < count; i++) options.push(el("option", { value: i, text: `${noun} ${i + 1}` }));
      select.replaceChildren(...options);
      select.value = chosen === "avg" || chosen >= count ? "avg" : String(chosen);
    };
    fill(els.layerSelect, layers, "Layer", state.selection.layer);
    fill(els.headSelect, heads, "Head", state.selection.head);
    readSelection();
  }

  function readSelection() {
    const pick = (select) => (select.value === "avg" ? "avg" : Number(select.value));
    state.selection = { layer: pick(els.layerSelect), head: pick(els.headSelect) };
  }

  function selectionName(selection, attention) {
    const layers = attention.layers.length;
    const heads = attention.layers[0].length;
    const layer = selection.layer === "avg" ? `all ${layers} layers` : `layer ${selection.layer + 1}`;
    const head = selection.head === "avg" ? `all ${heads} heads` : `head ${selection.head + 1}`;
    return selection.layer === "avg" || selection.head === "avg" ? `average over ${layer}, ${head}` :
      `${layer}, ${head}`;
  }

  function renderSentences(sentences) {
    const model = state.model || {};
    const sourceTag = model.source_language || "src";
    const targetTag = model.target_language || "tgt";
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
          el("span", { class: "score", title: "log-probability / length penalty (higher is better)",
            text: formatScore(sentence.data.score) })),
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

  // ---------------------------------------------------------------- heatmaps

  function blues(value) {
    const x = Math.min(1, Math.max(0, value)) * (BLUES.length - 1);
    const i = Math.min(BLUES.length - 2, Math.floor(x));
    const f = x - i;
    const [a, b] = [BLUES[i], BLUES[i + 1]];
    return `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",")})`;
  }

  const tokenLabel = (token) => token.split(WORD_START).join("_");

  /** A heatmap of `matrix` (rows x cols) on a canvas, token labels on the axes when
   *  `labelled` (columns at the bottom, turned, as in `nmt attention`'s pictures; its
   *  compact every-head figure has none either). */
  function drawHeatmap(matrix, rowLabels, colLabels, cell, labelled) {
    const canvas = el("canvas", { class: "heatmap" });
    const ctx = canvas.getContext("2d");
    const font = `${Math.min(12, Math.max(9, cell - 2))}px system-ui, sans-serif`;
    ctx.font = font;
    const widest = (labels) => Math.max(0, ...labels.map((l) => ctx.measureText(l).width));
    const left = labelled ? Math.ceil(widest(rowLabels)) + 6 : 0;
    const bottom = labelled ? Math.ceil(widest(colLabels)) + 6 : 0;
    const width = left + colLabels.length * cell;
    const height = rowLabels.length * cell + bottom;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.ceil(width * ratio);
    canvas.height = Math.ceil(height * ratio);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    ctx.scale(ratio, ratio);
    matrix.forEach((row, r) => row.forEach((value, c) => {
      ctx.fillStyle = blues(value);
      ctx.fillRect(left + c * cell, r * cell, cell, cell);
    }));
    if (labelled) {
      ctx.font = font;
      ctx.fillStyle = "#3b4656";
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      rowLabels.forEach((label, r) => ctx.fillText(label, left - 4, r * cell + cell / 2));
      colLabels.forEach((label, c) => {
        ctx.save();
        ctx.translate(left + c * cell + cell / 2, rowLabels.length * cell + 4);
        ctx.rotate(-Math.PI / 2);
        ctx.fillText(label, 0, 0);
        ctx.restore();
      });
    }
    canvas.addEventListener("mousemove", (event) => {
      const box = canvas.getBoundingClientRect();
      const c = Math.floor((event.clientX - box.left - left) / cell);
      const r = Math.floor((event.clientY - box.top) / cell);
      const inside = r >= 0 && r < rowLabels.length && c >= 0 && c < colLabels.length;
      canvas.title = inside ? `${rowLabels[r]} → ${colLabels[c]}: ${(matrix[r][c] * 100).toFixed(1)}%` : "";
    });
    return canvas;
  }

  function heatmapSection(sentence) {
    const attention = sentence.attention;
    const layers = attention.layers.length;
    const heads = attention.layers[0].length;
    const section = el("details", { class: "heatmaps" });
    section.append(el("summary", {
      text: `Attention heatmaps: ${layers} layer${layers === 1 ? "" : "s"} × ${heads} head${heads === 1 ? "" : "s"}`,
    }));
    section.addEventListener("toggle", () => {
      if (section.open) drawHeatmaps(sentence, section);
    });
    return section;
  }

  function drawHeatmaps(sentence, section) {
    const attention = sentence.attention;
    const rows = attention.target_tokens.map(tokenLabel);
    const cols = attention.source_tokens.map(tokenLabel);
    const longest = Math.max(rows.length, cols.length);
    const big = Math.max(12, Math.min(26, Math.floor(520 / longest)));
    const small = Math.max(4, Math.min(14, Math.floor(150 / longest)));

    const main = el("figure", { class: "heat-main" },
      el("figcaption", { class: "heat-caption",
        text: `Encoder–decoder attention, ${selectionName(state.selection, attention)}: ` +
          "rows are target tokens, columns source tokens" }),
      el("div", { class: "heat-scroll" },
        drawHeatmap(pieceMatrix(attention, state.selection), rows, cols, big, true)));

    const grid = el("div", { class: "heat-grid", role: "group", "aria-label": "Every layer and head" });
    grid.style.gridTemplateColumns = `auto repeat(${attention.layers[0].length}, auto)`;
    attention.layers.forEach((heads, l) => {
      grid.append(el("span", { class: "heat-row-label", text: `Layer ${l + 1}` }));
      heads.forEach((map, h) => {
        const chosen = state.selection.layer === l && state.selection.head === h;
        const cell = el("button", { type: "button", class: `heat-cell${chosen ? " selected" : ""}`,
          "aria-pressed": String(chosen), title: `Show layer ${l + 1}, head ${h + 1} (click again for the average)` },
        el("span", { class: "heat-caption", text: `head ${h + 1}` }),
        drawHeatmap(map, rows, cols, small, small >= 9));
        cell.addEventListener("click", () => {
          const again = state.selection.layer === l && state.selection.head === h;
          els.layerSelect.value = again ? "avg" : String(l);
          els.headSelect.value = again ? "avg" : String(h);
          selectionChanged();
        });
        grid.append(cell);
      });
    });
    section.replaceChildren(section.querySelector("summary"), main,
      el("p", { class: "heat-caption", text: "Every layer and head (click one to use it for the highlights above):" }),
      el("div", { class: "heat-scroll" }, grid));
  }

  function selectionChanged() {
    readSelection();
    if (!state.result) return;
    for (const section of els.sentences.querySelectorAll("details.heatmaps[open]")) {
      const index = Number(section.closest(".sentence").id.split("-")[1]);
      drawHeatmaps(state.result.sentences[index], section);
    }
  }

  // ---------------------------------------------------------------- highlighting

  function clearHighlight() {
    for (const node of state.lit) {
      node.classList.remove("lit", "strong", "hot");
      node.style.removeProperty("--w");
      node.removeAttribute("title");
    }
    state.lit = [];
    if (state.current) state.current.classList.remove("current");
    state.current = null;
  }

  /** Target word `w` of sentence `s` and the source words it attends to. */
  function highlight(s, w) {
    clearHighlight();
    const sentence = state.result && state.result.sentences[s];
    if (!sentence) return;
    for (const node of sentence.targetEls[w] || []) {
      node.classList.add("hot");
      state.lit.push(node);
    }
    state.current = document.getElementById(`sentence-${s}`);
    if (state.current) state.current.classList.add("current");
    if (!sentence.attention) return;
    const row = wordMatrix(sentence)[w];
    if (!row) return;
    const peak = Math.max(...row);
    row.forEach((weight, j) => {
      const strength = peak > 0 ? weight / peak : 0;
      if (strength < 0.2) return;
      for (const node of sentence.sourceEls[j] || []) {
        node.style.setProperty("--w", strength.toFixed(3));
        node.classList.add("lit");
        if (strength > 0.6) node.classList.add("strong");
        node.title = `${(weight * 100).toFixed(1)}% of the attention`;
        state.lit.push(node);
      }
    });
  }

  function targetWordOf(event) {
    const node = event.target.closest && event.target.closest(".tw");
    return node && state.result ? node : null;
  }

  // ---------------------------------------------------------------- wiring

  function syncBackdropScroll() {
    els.backdrop.scrollTop = els.source.scrollTop;
    els.backdrop.scrollLeft = els.source.scrollLeft;
  }

  /** The editor grows with its text, so that it and the translation scroll as one page. */
  function fitEditor() {
    els.source.style.height = "auto";
    els.source.style.height = `${els.source.scrollHeight + 2}px`;
  }

  function sourceEdited() {
    updateCharCount();
    fitEditor();
    // The highlights in the editor belong to the text that was translated.
    if (state.result && els.source.value !== state.result.sourceText) {
      els.backdrop.replaceChildren();
      for (const sentence of state.result.sentences) {
        sentence.sourceEls = sentence.sourceEls.map((nodes) => nodes.filter((node) => node.isConnected));
      }
    }
  }

  function wire() {
    els.form.addEventListener("submit", (event) => {
      event.preventDefault();
      translate();
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        translate();
      }
    });
    els.source.addEventListener("input", sourceEdited);
    els.source.addEventListener("scroll", syncBackdropScroll);
    window.addEventListener("resize", fitEditor);
    els.beam.addEventListener("input", syncNbestLimit);
    els.apiKey.addEventListener("change", () => localStorage.setItem(KEY_STORAGE, els.apiKey.value.trim()));
    els.layerSelect.addEventListener("change", selectionChanged);
    els.headSelect.addEventListener("change", selectionChanged);
    els.copy.addEventListener("click", async () => {
      if (!state.result) return;
      try {
        await navigator.clipboard.writeText(state.result.doc.text);
        els.copy.textContent = "Copied";
      } catch {
        els.copy.textContent = "Copy failed";
      }
      setTimeout(() => { els.copy.textContent = "Copy"; }, 1500);
    });

    const enter = (event) => {
      const node = targetWordOf(event);
      if (node) highlight(Number(node.dataset.s), Number(node.dataset.w));
    };
    const leave = (event) => {
      const node = targetWordOf(event);
      if (node && !(event.relatedTarget && node.contains(event.relatedTarget))) clearHighlight();
    };
    document.addEventListener("mouseover", enter);
    document.addEventListener("mouseout", leave);
    document.addEventListener("focusin", enter);
    document.addEventListener("focusout", leave);
    // A click on a word of the translation brings its sentence's card into view.
    els.output.addEventListener("click", (event) => {
      const node = targetWordOf(event);
      const card = node && document.getElementById(`sentence-${node.dataset.s}`);
      if (card) card.scrollIntoView({ behavior: "smooth", block: "nearest" });
    });
  }

  wire();
  updateCharCount();
  fitEditor();
  loadModel();
})();
