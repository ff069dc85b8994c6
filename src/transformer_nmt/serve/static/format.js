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

/** How a confidence (0-1, the estimated probability that a reader would accept the
 *  sentence) is coloured: "high", "mid" or "low"; null without one. */
export function confidenceBand(confidence) {
  if (typeof confidence !== "number") return null;
  return confidence >= 0.7 ? "high" : confidence >= 0.4 ? "mid" : "low";
}

/** What a sentence's confidence means, in words, with the reasons when it is low. */
export function confidenceTitle(data) {
  const percent = `${Math.round(data.confidence * 100)}%`;
  const reasons = (data.confidence_reasons || []).join("; ");
  return `confidence ${percent}: the estimated probability that a bilingual reader would ` +
    `accept this sentence${reasons ? ` (low: ${reasons})` : ""}`;
}

/** A large count in k, M or B. */
export function formatCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
  return String(n);
}
