// Heatmaps of a sentence's attention between pieces: the selected layer and head (or
// their average) large, and every layer and head small.

import { el, els } from "./dom.js";
import { selectedMap, selectionName } from "./attention.js";
import { state } from "./state.js";

const WORD_START = "\u2581"; // sentencepiece's word-boundary mark
// matplotlib's "Blues", the colour map of `nmt attention`'s pictures, from 0 to 1.
const BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5",
  "#08519c", "#08306b"].map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));

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

/** A closed section for the sentence's heatmaps, drawn when it is first opened. */
export function heatmapSection(sentence) {
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

/** Choose layer `l` and head `h` in the selects (the average when they are chosen
 *  already), as if the reader had: their change handler redraws. */
function pick(l, h) {
  const again = state.selection.layer === l && state.selection.head === h;
  els.layerSelect.value = again ? "avg" : String(l);
  els.headSelect.value = again ? "avg" : String(h);
  els.headSelect.dispatchEvent(new Event("change"));
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
      drawHeatmap(selectedMap(attention.layers, state.selection), rows, cols, big, true)));

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
      cell.addEventListener("click", () => pick(l, h));
      grid.append(cell);
    });
  });
  section.replaceChildren(section.querySelector("summary"), main,
    el("p", { class: "heat-caption", text: "Every layer and head (click one to use it for the highlights above):" }),
    el("div", { class: "heat-scroll" }, grid));
}

/** Draw the open heatmaps again, for a new selection. */
export function redrawOpenHeatmaps() {
  if (!state.result) return;
  for (const section of els.sentences.querySelectorAll("details.heatmaps[open]")) {
    const index = Number(section.closest(".sentence").id.split("-")[1]);
    drawHeatmaps(state.result.sentences[index], section);
  }
}
