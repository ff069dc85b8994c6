// The encoder-decoder attention of a translated sentence as the server sends it: per
// layer and head between pieces ("layers") and between words ("word_layers", with the
// word groups "source_words" and "target_words"), and the layer and head the page shows.

import { el, els } from "./dom.js";
import { state } from "./state.js";

/** Words of a text without attention (so without pieces): split at white space. */
function wordsFromText(text) {
  return text.split(/\s+/).filter(Boolean).map((word) => ({ text: word, pieces: [] }));
}

/** A sentence of the server's answer, with what the page keeps of it while shown. */
export function prepareSentence(sentence, index) {
  const attention = sentence.attention && sentence.attention.layers && sentence.attention.layers.length ?
    sentence.attention : null;
  return {
    index,
    data: sentence,
    attention,
    sourceWords: attention ? attention.source_words : wordsFromText(sentence.source || ""),
    targetWords: attention ? attention.target_words : wordsFromText(sentence.text || ""),
    sourceEls: [], // per source word: the elements showing it
    targetEls: [],
    wordMatrices: new Map(), // selection key -> word-level attention of that selection
  };
}

/** The (rows x columns) map of one layer and head of `layers` (per layer, per head), or
 *  the average over every layer or head where `selection` says "avg". */
export function selectedMap(layers, selection) {
  const chosenLayers = selection.layer === "avg" ? layers.map((_, i) => i) : [selection.layer];
  const chosenHeads = selection.head === "avg" ? layers[0].map((_, i) => i) : [selection.head];
  const first = layers[0][0];
  const rows = first.length;
  const cols = rows ? first[0].length : 0;
  const sum = Array.from({ length: rows }, () => new Float64Array(cols));
  for (const l of chosenLayers) {
    for (const h of chosenHeads) {
      const map = layers[l][h];
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) sum[r][c] += map[r][c];
    }
  }
  const count = chosenLayers.length * chosenHeads.length;
  for (const row of sum) for (let c = 0; c < cols; c++) row[c] /= count;
  return sum;
}

/** Attention between the sentence's words (target words x source words) as selected. */
export function wordMatrix(sentence) {
  const key = `${state.selection.layer}/${state.selection.head}`;
  if (!sentence.wordMatrices.has(key)) {
    sentence.wordMatrices.set(key, selectedMap(sentence.attention.word_layers, state.selection));
  }
  return sentence.wordMatrices.get(key);
}

/** The layer and head chosen in the selects into state.selection. */
export function readSelection() {
  const pick = (select) => (select.value === "avg" ? "avg" : Number(select.value));
  state.selection = { layer: pick(els.layerSelect), head: pick(els.headSelect) };
}

/** Show the layer and head selects, filled for the model's layers and heads, where a
 *  sentence has attention; hide them where none has. */
export function renderAttentionControls(sentences) {
  const withAttention = sentences.find((s) => s.attention);
  els.attentionControls.hidden = !withAttention;
  els.attentionHint.hidden = !withAttention;
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

/** "layer 2, head 3", or which averages the selection takes. */
export function selectionName(selection, attention) {
  const layers = attention.layers.length;
  const heads = attention.layers[0].length;
  const layer = selection.layer === "avg" ? `all ${layers} layers` : `layer ${selection.layer + 1}`;
  const head = selection.head === "avg" ? `all ${heads} heads` : `head ${selection.head + 1}`;
  return selection.layer === "avg" || selection.head === "avg" ? `average over ${layer}, ${head}` :
    `${layer}, ${head}`;
}
