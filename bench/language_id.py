"""Language identification for `source=auto` and /detect: py3langid against lingua.

Real one-sentence inputs in the languages the project's corpora serve (Multi30k's
validation captions in English, German and French; WMT14's newstest2014 news sentences in
English and German), whole and cut to their first three words (what a browser extension
sends for a selected phrase). For each library, in its own process so that its memory
is its own, one JSON line: accuracy among every language the library knows ("open") and
among the served ones only (what the server asks: detection restricted to the languages
it translates from), seconds to load, peak RSS after loading and after detecting
everything (lingua loads a language's model when a text first needs it), and the median
and 99th percentile of one call's time.

    python bench/language_id.py [--sentences 300] [--data DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from process_memory import peak_rss_mb

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
SERVED = ("en", "de", "fr")
LIBRARIES = ("py3langid", "lingua", "lingua-served")
"""lingua-served: lingua built with the served languages only, whose memory is smaller but
whose confidences say nothing of a text in another language."""


def samples(data: Path, count: int) -> dict[str, list[tuple[str, str]]]:
    """{set name: [(language, sentence)]}: `count` sentences per language and corpus."""
    multi30k = data / "multi30k" / "data" / "task1" / "raw"
    found: dict[str, list[tuple[str, str]]] = {"multi30k": [], "newstest2014": []}
    for language in SERVED:
        with gzip.open(multi30k / f"val.{language}.gz", "rt", encoding="utf-8") as lines:
            found["multi30k"] += [(language, line.strip()) for line in lines
                                  if line.strip()][:count]
    for language in ("en", "de"):
        text = (data / "wmt14" / f"newstest2014.{language}").read_text(encoding="utf-8")
        found["newstest2014"] += [(language, line.strip()) for line in text.splitlines()
                                  if line.strip()][:count]
    for name in list(found):
        found[f"{name} 3 words"] = [(language, " ".join(sentence.split()[:3]))
                                    for language, sentence in found[name]]
    return found


def py3langid_ranker() -> Callable[[str], dict[str, float]]:
    """{language: probability} of a text over every language py3langid knows."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return lambda text: dict(identifier.rank(text))


def lingua_ranker(languages: tuple[str, ...] = ()) -> Callable[[str], dict[str, float]]:
    """{language: confidence} of a text over `languages`, or all of lingua's 75 (high
    accuracy mode)."""
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    builder = (LanguageDetectorBuilder.from_iso_codes_639_1(
        *(getattr(IsoCode639_1, code.upper()) for code in languages)) if languages
        else LanguageDetectorBuilder.from_all_languages())
    detector = builder.build()

    def rank(text: str) -> dict[str, float]:
        return {value.language.iso_code_639_1.name.lower(): value.value
                for value in detector.compute_language_confidence_values(text)}

    return rank


def measure(library: str, data: Path, count: int) -> dict:
    """The JSON line of one library, measured in this process."""
    rss_before = peak_rss_mb()
    started = time.perf_counter()
    rank = {"py3langid": py3langid_ranker, "lingua": lingua_ranker,
            "lingua-served": lambda: lingua_ranker(SERVED)}[library]()
    rank("warm up")
    line: dict = {"library": library, "load_s": round(time.perf_counter() - started, 3),
                  "rss_before_mb": rss_before, "rss_loaded_mb": peak_rss_mb()}
    times = []
    for name, pairs in samples(data, count).items():
        open_right = served_right = 0
        for language, sentence in pairs:
            began = time.perf_counter()
            scores = rank(sentence)
            times.append(time.perf_counter() - began)
            open_right += max(scores, key=scores.get) == language
            served_right += max(SERVED, key=lambda code: scores.get(code, 0.0)) == language
        line[f"accuracy_open {name}"] = round(open_right / len(pairs), 4)
        line[f"accuracy_served {name}"] = round(served_right / len(pairs), 4)
    times.sort()
    line.update(rss_after_mb=peak_rss_mb(), calls=len(times),
                call_median_ms=round(statistics.median(times) * 1000, 3),
                call_p99_ms=round(times[int(0.99 * (len(times) - 1))] * 1000, 3))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300,
                        help="sentences per language and corpus")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="directory holding multi30k/ and wmt14/")
    parser.add_argument("--library", choices=LIBRARIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.library:
        print(json.dumps(measure(args.library, args.data, args.sentences)), flush=True)
        return
    for library in LIBRARIES:
        subprocess.run([sys.executable, __file__, "--library", library, "--sentences",
                        str(args.sentences), "--data", str(args.data)], check=True)


if __name__ == "__main__":
    main()
