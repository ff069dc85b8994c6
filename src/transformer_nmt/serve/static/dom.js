// The page's elements, and a small helper that builds new ones.

const $ = (id) => document.getElementById(id);

/** The elements of index.html the scripts use, by role. */
export const els = {
  form: $("translate-form"), source: $("source"), backdrop: $("source-backdrop"),
  output: $("output"), status: $("status"), button: $("translate-button"),
  beam: $("beam"), alpha: $("alpha"), nbest: $("nbest"), wantAttention: $("want-attention"),
  keyField: $("key-field"), apiKey: $("api-key"), copy: $("copy-button"),
  modelInfo: $("model-info"), sourceName: $("source-name"), targetName: $("target-name"),
  sourceLabel: $("source-label"), targetLabel: $("target-label"), charCount: $("char-count"),
  details: $("details"), sentences: $("sentences"), attentionControls: $("attention-controls"),
  attentionHint: $("attention-hint"), layerSelect: $("layer-select"), headSelect: $("head-select"),
  pairPicker: $("pair-picker"), pairSelect: $("pair-select"), swap: $("swap-button"),
  viaName: $("via-name"), attentionField: $("attention-field"), attentionNote: $("attention-note"),
  pivotText: $("pivot-text"),
};

/** A new `tag` element: "class" and "text" set its class and text, other attributes are
 *  set as they are; `children` (nodes or strings) are appended. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}
