// The served model in the page's header and labels: languages, name, size, BLEU.

import { el, els } from "./dom.js";
import { formatCount, languageName } from "./format.js";

export function describeModel(model) {
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
}

export function modelUnreadable() {
  els.modelInfo.textContent = "The model description could not be read.";
}
