"""CTranslate2 int8 with the model's lexical shortlist against without it: the same lines
of a data directory's split, cut into the same batches (one Translator each, the same
options but --no-shortlist), translated in alternating order round after round.

Prints one JSON line per run (sentences/s, subword tokens/s, sacreBLEU, chrF, model
loading and the conversion excluded), then one line of medians per side and one comparing
them: the speed ratio (with / without), the BLEU difference and the share of identical
lines. The model must have a shortlist (`nmt shortlist --model MODEL --data DIR` first, or pass --build).

    python bench/shortlist.py --model quickstart/model.pt --data quickstart/data/bible-en-de \\
        [--split test] [--rounds 3] [--beam 4] [--threads N] [--lines N] [--build]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.runtime.vmap import make_shortlist, shortlist_path
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.evaluate import read_text, score, split_languages, split_paths


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def translator(args: argparse.Namespace, shortlist: bool) -> Translator:
    """CTranslate2 int8, the shortlist on or off, everything else alike (batches too)."""
    options = TranslatorOptions(DecodeConfig(beam=args.beam), engine="ctranslate2",
                                precision="int8", device="cpu", threads=args.threads,
                                batch_size=args.batch_size, confidence=False,
                                shortlist=shortlist)
    made = Translator.from_file(args.model, options)
    assert made.ctranslate2 is not None and made.ctranslate2.use_vmap == shortlist
    return made


def run(made: Translator, lines: list[str], references: list[str], tgt_lang: str
        ) -> tuple[dict, list[str]]:
    """One timed translation of `lines`: its speed and scores, and the translations."""
    start = time.perf_counter()
    best = [nbest[0] for nbest in made.translate_nbest(lines)]
    seconds = time.perf_counter() - start
    hypotheses = [translation.text for translation in best]
    tokens = sum(len(translation.tokens) for translation in best)
    scores = score(hypotheses, references, tgt_lang)
    return dict(sentences_per_s=round(len(lines) / seconds, 2),
                tokens_per_s=round(tokens / seconds, 1), seconds=round(seconds, 3),
                bleu=round(scores["bleu"], 2), chrf=round(scores["chrf"], 2)), hypotheses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds over both sides, every other one in reverse order")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--lines", type=int, default=None, help="the split's first N lines")
    parser.add_argument("--build", action="store_true",
                        help="build the shortlist on DATA's train split first")
    args = parser.parse_args()
    if args.build:
        path, stats = make_shortlist(args.model, args.data)
        figure(figure="built", path=str(path), pairs=stats.pairs, added=stats.added)
    if not shortlist_path(args.model).is_file():
        raise SystemExit(f"{shortlist_path(args.model)}: no shortlist; run `nmt shortlist "
                         f"--model {args.model} --data {args.data}` or pass --build")
    src_lang, tgt_lang = split_languages(args.data, None, None)
    source, reference = split_paths(args.data, args.split, src_lang, tgt_lang)
    lines, references = read_text(source)[:args.lines], read_text(reference)[:args.lines]
    sides = {True: translator(args, True), False: translator(args, False)}
    for made in sides.values():  # warm: threads started, buffers of every size allocated
        list(made.translate(lines[:200]))
    runs: dict[bool, list[dict]] = {True: [], False: []}
    outputs: dict[bool, list[str]] = {}
    for round_ in range(args.rounds):
        for shortlist in ((True, False) if round_ % 2 == 0 else (False, True)):
            result, outputs[shortlist] = run(sides[shortlist], lines, references, tgt_lang)
            runs[shortlist].append(result)
            figure(figure="run", shortlist=shortlist, round=round_, split=args.split,
                   lines=len(lines), **result)
    medians = {}
    for shortlist, results in runs.items():
        medians[shortlist] = round(statistics.median(r["sentences_per_s"] for r in results), 2)
        figure(figure="median", shortlist=shortlist, sentences_per_s=medians[shortlist],
               bleu=results[0]["bleu"], chrf=results[0]["chrf"])
    same = sum(a == b for a, b in zip(outputs[True], outputs[False])) / max(len(lines), 1)
    figure(figure="ratio", speed_with_over_without=round(medians[True] / medians[False], 3),
           bleu_difference=round(runs[True][0]["bleu"] - runs[False][0]["bleu"], 2),
           identical_lines=round(same, 4), engine="ctranslate2", precision="int8",
           beam=args.beam, threads=sides[True].options.threads)


if __name__ == "__main__":
    main()
