// The language pair the page translates: the picker in the header, filled with the pairs
// of GET /v1/models; the pair chosen, remembered across reloads; the models that translate
// it; and its reverse, which the swap button switches to.

import { el, els } from "./dom.js";
import { languageName } from "./format.js";
import { state } from "./state.js";

const PAIR_STORAGE = "transformer-nmt.pair";

/** "de:fr", a pair's value in the picker and in storage (":" is in no language tag, "-"
 *  is: "pt-BR"). */
function pairKey(pair) {
  return `${pair.source}:${pair.target}`;
}

/** "German → French", with "(via English)" for a pair two models translate. */
export function pairName(pair) {
  const name = `${languageName(pair.source)} → ${languageName(pair.target)}`;
  return pair.pivot ? `${name} (via ${languageName(pair.pivot)})` : name;
}

/** The cards of the models that translate `pair`, in order: its own, or the two through
 *  its pivot; the only model's where there is no pair (its file records no languages). */
export function modelsOf(pair, models) {
  if (!pair) return models.slice(0, 1);
  // A multilingual model translates into each of its target_languages (one per token).
  const modelOf = (source, target) =>
    models.find((model) => model.source_language === source &&
      (model.target_languages || [model.target_language]).includes(target));
  const hops = pair.pivot ? [modelOf(pair.source, pair.pivot), modelOf(pair.pivot, pair.target)] :
    [modelOf(pair.source, pair.target)];
  return hops.filter(Boolean);
}

/** The pair from `pair`'s target back to its source, where the server translates it. */
export function reverseOf(pair, pairs) {
  if (!pair) return null;
  return pairs.find((other) => other.source === pair.target && other.target === pair.source) || null;
}

/** The server's `pairs` into the picker, which is shown only where there is a choice (a
 *  one-model server looks as it always did). The pair to start with: the one this browser
 *  remembers if the server still offers it, else the first; null where the server lists
 *  none (its one model records no languages). */
export function fillPairPicker(pairs) {
  els.pairSelect.replaceChildren(...pairs.map((pair) =>
    el("option", { value: pairKey(pair), text: pairName(pair) })));
  els.pairPicker.hidden = pairs.length < 2;
  const remembered = localStorage.getItem(PAIR_STORAGE);
  return pairs.find((pair) => pairKey(pair) === remembered) || pairs[0] || null;
}

/** The pair the picker shows now. */
export function pickedPair(pairs) {
  return pairs.find((pair) => pairKey(pair) === els.pairSelect.value) || null;
}

/** `pair` shown in the picker; `remember` keeps it for the next visit (a user's choice,
 *  not the default of a visit whose remembered pair the server no longer offers). */
export function showPair(pair, remember) {
  if (!pair) return;
  els.pairSelect.value = pairKey(pair);
  if (remember) localStorage.setItem(PAIR_STORAGE, pairKey(pair));
  syncPairControls();
}

/** The picker and swap button usable unless a translation is in flight (its answer
 *  belongs to the pair it was asked for); the swap button only where the server has the
 *  reverse pair, its title saying why not. */
export function syncPairControls() {
  const pairs = (state.server && state.server.pairs) || [];
  const reverse = reverseOf(state.pair, pairs);
  els.pairSelect.disabled = state.busy;
  els.swap.disabled = state.busy || !reverse;
  if (reverse) {
    els.swap.title = `Swap languages: ${pairName(reverse)}`;
  } else if (state.pair) {
    els.swap.title = `Cannot swap: this server does not translate ` +
      `${languageName(state.pair.target)} → ${languageName(state.pair.source)}`;
  }
}
