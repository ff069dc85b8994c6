// How numbers and language codes read on the page.

/** The English name of a language code ("de" -> "German"); the code itself if unknown. */
export function languageName(code) {
  if (!code) return null;
  try {
    const name = new Intl.DisplayNames(["en"], { type: "language" }).of(code);
    return name || code;
  } catch {
    return code;
  }
}

/** A translation's score with three decimals and a true minus sign. */
export function formatScore(score) {
  return typeof score === "number" ? score.toFixed(3).replace("-", "\u2212") : "";
}

/** A large count in k, M or B. */
export function formatCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
  return String(n);
}
