// The translation page of `nmt serve`: talks to GET /v1/models and POST /v1/translate,
// translates along the language pair chosen in the header, shows the translation, the
// n-best lists and the encoder-decoder attention. This module starts the page and wires
// its events; each of the others holds one concern.
// No framework, no build step and nothing from outside the server: the page must work
// offline.

import { ApiError, fetchModels, requestTranslation } from "./api.js";
import { readSelection } from "./attention.js";
import { els } from "./dom.js";
import { redrawOpenHeatmaps } from "./heatmap.js";
import { clearHighlight, highlight, targetWordOf } from "./highlight.js";
import { describePair, modelUnreadable } from "./model-info.js";
import { fillPairPicker, modelsOf, pickedPair, reverseOf, showPair,
  syncPairControls } from "./pairs.js";
import { apiKey, applyServerSettings, readOptions, rememberAttention, rememberKey, showKeyField,
  syncAttention, syncNbestLimit, updateCharCount } from "./settings.js";
import { state } from "./state.js";
import { showError, showStatus } from "./status.js";
import { clearResult, showResult, syncBackdropScroll } from "./translation.js";

async function loadServer() {
  let server;
  try {
    server = await fetchModels();
  } catch (err) {
    modelUnreadable();
    showError(`could not read /v1/models: ${err.message}`);
    return;
  }
  state.server = server;
  applyServerSettings(server);
  usePair(fillPairPicker(server.pairs), false);
}

/** `pair` chosen: the labels, the header, the options and the swap button follow it;
 *  `remember` keeps it for the next visit. */
function usePair(pair, remember) {
  state.pair = pair;
  showPair(pair, remember);
  describePair(pair, modelsOf(pair, state.server.models));
  syncAttention(pair);
}

/** A translation on show belongs to the pair it was asked for: the new pair's is asked
 *  for at once, as translation sites do. */
function changePair(pair) {
  const translated = state.result !== null;
  usePair(pair, true);
  clearResult();
  if (translated && els.source.value.trim()) translate();
  else showStatus("");
}

/** The reverse pair, with the translation moved into the editor to be translated back. */
function swapPair() {
  const reverse = reverseOf(state.pair, state.server.pairs);
  if (!reverse || state.busy) return;
  if (state.result && state.result.doc.text.trim()) {
    els.source.value = state.result.doc.text;
    sourceEdited();
    changePair(reverse);
    return;
  }
  // An empty translation (every sentence withheld) would wipe out the user's text: it
  // stays, untranslated, since it is in the other language.
  usePair(reverse, true);
  clearResult();
  showStatus("");
}

/** The models' cards read again where the pair's had not been loaded: the first
 *  translation loaded them (their precision is known now), and may have unloaded others. */
async function refreshModels() {
  if (modelsOf(state.pair, state.server.models).every((model) => model.loaded !== false)) return;
  try {
    state.server = { ...state.server, models: (await fetchModels()).models };
  } catch {
    return; // the header keeps what it said; the translation is what matters
  }
  describePair(state.pair, modelsOf(state.pair, state.server.models));
}

function setBusy(busy) {
  state.busy = busy;
  syncPairControls();
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
  const pair = state.pair;
  setBusy(true);
  showStatus("Translating…");
  const started = performance.now();
  try {
    const body = await requestTranslation(text, pair, options, apiKey());
    const doc = body.translations && body.translations[0];
    if (!doc) throw new Error("the server's answer has no translation");
    showResult(text, doc, pair);
    const roundTrip = performance.now() - started;
    const count = doc.sentences.length;
    const parts = [`${count} sentence${count === 1 ? "" : "s"}`, `${Math.round(roundTrip)} ms`];
    if (typeof body.elapsed_ms === "number") parts.push(`${body.elapsed_ms.toFixed(1)} ms on the server`);
    parts.push(`beam ${options.beam}, alpha ${options.alpha}`);
    showStatus(parts.join(" · "));
    refreshModels();
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
  els.wantAttention.addEventListener("change", rememberAttention);
  els.pairSelect.addEventListener("change", () => changePair(pickedPair(state.server.pairs)));
  els.swap.addEventListener("click", swapPair);
  els.apiKey.addEventListener("change", rememberKey);
  els.layerSelect.addEventListener("change", selectionChanged);
  els.headSelect.addEventListener("change", selectionChanged);
  els.copy.addEventListener("click", copyTranslation);
  wireHighlighting();
}

wire();
updateCharCount();
fitEditor();
loadServer();
