// The chosen pair in the page's header and labels: languages, and the name, size and BLEU
// of the model that translates it (of both models, for a pair through a pivot).

import { el, els } from "./dom.js";
import { formatCount, languageName } from "./format.js";

const TITLE = "transformer-nmt";

/** What the header says of one model: [label, value] facts, or plain words. */
function modelFacts(model) {
  const facts = [];
  const add = (label, value) => facts.push([label, value]);
  if (model.name) add("", model.name);
  if (model.preset) add("preset", model.preset);
  if (model.parameters) add("parameters", formatCount(model.parameters));
  if (model.vocabulary_size) add("vocabulary", model.vocabulary_size.toLocaleString("en"));
  if (model.training_steps != null) add("steps", model.training_steps.toLocaleString("en"));
  if (model.bleu != null) add("BLEU", model.bleu.toFixed(2));
  if (model.precision) add("precision", model.precision);
  // A model loads on demand: its first translation takes longer.
  else if (model.loaded === false) facts.push("loaded when first used");
  return facts;
}

/** The labels, the document's title and the header for `pair` (null: a one-model server
 *  whose model records no languages), translated by `models` (one, or two through the
 *  pivot). */
export function describePair(pair, models) {
  const source = pair && languageName(pair.source);
  const target = pair && languageName(pair.target);
  els.sourceName.textContent = source || "Source";
  els.targetName.textContent = target || "Target";
  els.viaName.hidden = !(pair && pair.pivot);
  els.viaName.textContent = pair && pair.pivot ? `via ${languageName(pair.pivot)}` : "";
  els.sourceLabel.textContent = source ? `${source} text` : "Source text";
  els.targetLabel.textContent = target ? `${target} translation` : "Translation";
  document.title = source && target ? `${source} → ${target} · ${TITLE}` : `Translate · ${TITLE}`;

  els.modelInfo.replaceChildren();
  models.forEach((model, hop) => {
    if (hop) els.modelInfo.append(" ", el("span", { class: "hop", text: "then" }), " ");
    modelFacts(model).forEach((fact, i) => {
      if (i) els.modelInfo.append(" ", el("span", { class: "sep", "aria-hidden": "true", text: "·" }), " ");
      els.modelInfo.append(typeof fact === "string" ? el("span", { class: "fact", text: fact }) :
        el("span", { class: "fact" }, fact[0] ? `${fact[0]} ` : "", el("strong", { text: fact[1] })));
    });
  });
}

export function modelUnreadable() {
  els.modelInfo.textContent = "The model description could not be read.";
}
