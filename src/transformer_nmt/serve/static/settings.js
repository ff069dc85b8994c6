// The search options (beam, alpha, n-best, attention), the API key and the character
// count: their defaults and limits come from GET /v1/models.

import { els } from "./dom.js";
import { languageName } from "./format.js";
import { state } from "./state.js";

const KEY_STORAGE = "transformer-nmt.api-key";
const ATTENTION_TITLE = els.attentionField.title;
let attentionWanted = els.wantAttention.checked; // the user's choice, kept while a pair disables it

/** The server's defaults and limits, from its description, into the fields. */
export function applyServerSettings(server) {
  const defaults = server.defaults || {};
  const limits = server.limits || {};
  if (defaults.beam) els.beam.value = defaults.beam;
  if (defaults.alpha != null) els.alpha.value = defaults.alpha;
  if (defaults.nbest) els.nbest.value = defaults.nbest;
  if (limits.max_beam) els.beam.max = limits.max_beam;
  if (limits.min_alpha != null) els.alpha.min = limits.min_alpha;
  if (limits.max_alpha != null) els.alpha.max = limits.max_alpha;
  syncNbestLimit();
  updateCharCount();
  if (server.api_key_required) showKeyField(false);
}

export function rememberAttention() {
  attentionWanted = els.wantAttention.checked;
}

/** The attention box for `pair`: the user's choice for a pair one model translates;
 *  disabled, saying why, for a pair through a pivot, which the server refuses attention
 *  (neither model's attention runs from the source to the translation). */
export function syncAttention(pair) {
  const pivot = pair && pair.pivot ? languageName(pair.pivot) : null;
  els.wantAttention.disabled = Boolean(pivot);
  els.wantAttention.checked = pivot ? false : attentionWanted;
  els.attentionNote.hidden = !pivot;
  els.attentionNote.textContent = pivot ? `not via ${pivot}` : "";
  els.attentionField.title = pivot ? `No attention for a pair translated by two models ` +
    `through ${pivot}: neither model's attention runs from the source to the translation` :
    ATTENTION_TITLE;
}

/** N-best may not exceed the beam (nor the server's limit). */
export function syncNbestLimit() {
  const limits = (state.server && state.server.limits) || {};
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

function readAlpha() {
  const input = els.alpha;
  const value = Number(input.value);
  const min = input.min === "" ? -Infinity : Number(input.min);
  const max = input.max === "" ? Infinity : Number(input.max);
  if (input.value.trim() === "" || !Number.isFinite(value) || value < min || value > max) {
    const range = max === Infinity ? `of ${min} or more` : `from ${min} to ${max}`;
    throw new Error(`alpha must be a number ${range}, not "${input.value}"`);
  }
  return value;
}

/** The options of a translation request; an Error naming a field out of its range. */
export function readOptions() {
  return {
    beam: readInteger(els.beam, "beam"),
    alpha: readAlpha(),
    nbest: readInteger(els.nbest, "n-best"),
    attention: els.wantAttention.checked,
  };
}

export function updateCharCount() {
  const n = els.source.value.length;
  const max = state.server && state.server.limits && state.server.limits.max_characters;
  els.charCount.textContent = max ? `${n.toLocaleString("en")} / ${max.toLocaleString("en")}` :
    `${n.toLocaleString("en")} characters`;
  els.charCount.classList.toggle("over-limit", Boolean(max && n > max));
}

/** The API key field, filled with the key this browser remembers. */
export function showKeyField(focus) {
  els.keyField.hidden = false;
  if (!els.apiKey.value) els.apiKey.value = localStorage.getItem(KEY_STORAGE) || "";
  if (focus) els.apiKey.focus();
}

export function rememberKey() {
  localStorage.setItem(KEY_STORAGE, els.apiKey.value.trim());
}

export function apiKey() {
  return els.apiKey.value.trim();
}
