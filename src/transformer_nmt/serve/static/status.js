// The status line under the toolbar: progress, timings and errors.

import { el, els } from "./dom.js";

export function showStatus(text) {
  els.status.className = "status";
  els.status.setAttribute("role", "status");
  els.status.textContent = text;
}

/** An error, with its HTTP status `code` when the server gave one. */
export function showError(message, code) {
  els.status.className = "status error";
  els.status.setAttribute("role", "alert");
  els.status.replaceChildren(el("strong", { text: code ? `Error ${code}: ` : "Error: " }), message);
}
