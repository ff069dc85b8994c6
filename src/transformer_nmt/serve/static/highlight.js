// Hovering (or focusing) a word of the translation: the word and its sentence's card are
// marked, and the source words it attends to light up, stronger for more attention.

import { wordMatrix } from "./attention.js";
import { state } from "./state.js";

export function clearHighlight() {
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
export function highlight(s, w) {
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

/** The target word's element an event happened on, while a translation is shown. */
export function targetWordOf(event) {
  const node = event.target.closest && event.target.closest(".tw");
  return node && state.result ? node : null;
}
