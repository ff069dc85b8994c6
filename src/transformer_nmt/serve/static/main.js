// The translation page of `nmt serve`: talks to GET /v1/model and POST /v1/translate,
// shows the translation, the n-best lists and the encoder-decoder attention. This module
// starts the page and wires its events; each of the others holds one concern.
// No framework, no build step and nothing from outside the server: the page must work
// offline.

import { ApiError, fetchModel, requestTranslation } from "./api.js";
import { readSelection } from "./attention.js";
import { els } from "./dom.js";
import { redrawOpenHeatmaps } from "./heatmap.js";
import { clearHighlight, highlight, targetWordOf } from "./highlight.js";
import { describeModel, modelUnreadable } from "./model-info.js";
import { apiKey, applyServerSettings, readOptions, rememberKey, showKeyField, syncNbestLimit,
  updateCharCount } from "./settings.js";
import { state } from "./state.js";
import { showError, showStatus } from "./status.js";
import { clearResult, showResult, syncBackdropScroll } from "./translation.js";

async function loadModel() {
  let model;
  try {
    model = await fetchModel();
  } catch (err) {
    modelUnreadable();
    showError(`could not read /v1/model: ${err.message}`);
    return;
  }
  state.model = model;
  describeModel(model);
  applyServerSettings(model);
}

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
  setBusy(true);
  showStatus("Translating…");
  const started = performance.now();
  try {
    const body = await requestTranslation(text, options, apiKey());
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
    if (err instanceof ApiError) {
      if (err.status === 401 || err.status === 403) showKeyField(true);
      showError(err.message, err.status);
    } else {
      showError(`could not translate: ${err.message}`);
    }
  } finally {
    setBusy(false);
  }
}

function selectionChanged() {
  readSelection();
  redrawOpenHeatmaps();
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

async function copyTranslation() {
  if (!state.result) return;
  try {
    await navigator.clipboard.writeText(state.result.doc.text);
    els.copy.textContent = "Copied";
  } catch {
    els.copy.textContent = "Copy failed";
  }
  setTimeout(() => { els.copy.textContent = "Copy"; }, 1500);
}

function wireHighlighting() {
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
  els.apiKey.addEventListener("change", rememberKey);
  els.layerSelect.addEventListener("change", selectionChanged);
  els.headSelect.addEventListener("change", selectionChanged);
  els.copy.addEventListener("click", copyTranslation);
  wireHighlighting();
}

wire();
updateCharCount();
fitEditor();
loadModel();
