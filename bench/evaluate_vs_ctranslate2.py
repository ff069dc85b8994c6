"""A trained model's test BLEU and speed, decoded by us (`nmt translate`, scored by `nmt
evaluate --hyp`) and by its CTranslate2 export (`nmt export --to ctranslate2`), in one run
on one machine.

Protocol, the same for both: the model file's split (default the quickstart's
bible-en-de test split), beam 4, one precision (--precision, float32 by default), the
longest output floor(source subwords + 50) per sentence as `nmt evaluate`'s defaults, two
batches of 16 sentences decoded at once on one thread each (ours: `nmt translate
--workers 2`; CTranslate2: inter_threads 2, intra_threads 1, sentences sorted by length as
ours are), PAD and BOS never generated. Both sets of translations are scored by the same command,
`nmt evaluate --hyp ... --ref ...` (sacreBLEU, chrF, tokenized BLEU). Speed is lines and
subword tokens per second of translation, model loading excluded on both sides (ours:
the line `nmt translate` prints; CTranslate2: around its translate calls). On a machine
shared with other jobs, --repeats pairs (ours, then CTranslate2, back to back) are run
for each alpha and the median of the pairs' speed ratios is printed with all of them.

The length penalties differ in form: ours is GNMT's ((5 + |Y|) / 6)^alpha, CTranslate2's
|Y|^alpha. Each --alphas value runs both systems with that alpha (0 makes the two
searches rank the same way; the share of identical lines is printed for each).

    python bench/evaluate_vs_ctranslate2.py --model MODEL.pt --data DATA_DIR [--split test]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ctranslate2
import sentencepiece

BATCH = 16
WORKERS = 2


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


COMPUTE_TYPES = {"fp32": "float32", "int8": "int8_float32"}
"""CTranslate2's compute type for each of `nmt evaluate`'s precisions that it has on a CPU
(its CPU build refuses bfloat16 even on AMX). Ours decodes in `auto` unless told (bf16 on
a CPU that measured it faster), so the precision is always given."""


def nmt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer_nmt.cli", *args],
                          capture_output=True, text=True, check=True)


def ours(args: argparse.Namespace, alpha: float, work: Path) -> tuple[Path, dict, dict]:
    """`nmt translate` of the split's source side, scored by `nmt evaluate --hyp`:
    (hypotheses, scores, speed)."""
    manifest = json.loads((args.data / "manifest.json").read_text())
    src_lang, tgt_lang = manifest["src_lang"], manifest["tgt_lang"]
    hyp, scores = work / f"ours-{alpha}.hyp", work / f"ours-{alpha}.json"
    done = nmt("translate", "--model", str(args.model), "--input",
               str(args.data / f"{args.split}.{src_lang}"), "--output", str(hyp),
               "--beam", "4", "--alpha", str(alpha), "--workers", str(WORKERS),
               "--engine", args.engine, "--precision", args.ours_precision or args.precision,
               *(["--no-guard"] if args.no_guard else []),
               "--batch-size", str(BATCH))
    match = re.search(r"translated (\d+) lines \((\d+) subword tokens\).* in ([\d.]+) s",
                      done.stderr)
    lines, tokens, seconds = int(match[1]), int(match[2]), float(match[3])
    nmt("evaluate", "--hyp", str(hyp), "--ref", str(args.data / f"{args.split}.{tgt_lang}"),
        "--tgt-lang", tgt_lang, "--json", str(scores))
    return hyp, json.loads(scores.read_text()), dict(lines=lines, tokens=tokens, seconds=seconds)


def ctranslate2_side(args: argparse.Namespace, model_dir: Path, alpha: float,
                     work: Path) -> tuple[Path, dict, dict]:
    """The export decoding the split: (hypotheses, scores, speed)."""
    from transformer_nmt.data.text import normalize

    manifest = json.loads((args.data / "manifest.json").read_text())
    src_lang, tgt_lang = manifest["src_lang"], manifest["tgt_lang"]
    processor = sentencepiece.SentencePieceProcessor(model_file=str(args.data / "spm.model"))
    lines = (args.data / f"{args.split}.{src_lang}").read_text(encoding="utf-8").splitlines()
    pieces = [processor.encode(normalize(line), out_type=str) for line in lines]
    translator = ctranslate2.Translator(str(model_dir), device="cpu",
                                        compute_type=COMPUTE_TYPES[args.precision],
                                        inter_threads=WORKERS, intra_threads=1)
    never = [[processor.id_to_piece(processor.pad_id())],
             [processor.id_to_piece(processor.bos_id())]]
    order = sorted((i for i, p in enumerate(pieces) if p), key=lambda i: -len(pieces[i]))
    batches = [order[i: i + BATCH] for i in range(0, len(order), BATCH)]
    start = time.perf_counter()
    pending = [translator.translate_batch(
        [pieces[i] for i in batch], beam_size=4, length_penalty=alpha,
        max_decoding_length=len(pieces[batch[0]]) + 50, suppress_sequences=never,
        asynchronous=True) for batch in batches]
    output = [""] * len(lines)
    tokens = 0
    for batch, results in zip(batches, pending):
        for index, result in zip(batch, results):
            best = result.result().hypotheses[0]
            tokens += len(best)
            output[index] = processor.decode(best)
    seconds = time.perf_counter() - start
    hyp, scores = work / f"ctranslate2-{alpha}.hyp", work / f"ctranslate2-{alpha}.json"
    hyp.write_text("".join(line + "\n" for line in output), encoding="utf-8")
    nmt("evaluate", "--hyp", str(hyp), "--ref", str(args.data / f"{args.split}.{tgt_lang}"),
        "--tgt-lang", tgt_lang, "--json", str(scores))
    return hyp, json.loads(scores.read_text()), dict(lines=len(lines), tokens=tokens,
                                                     seconds=seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--alphas", default="0.6,0", help="comma-separated length penalties")
    parser.add_argument("--precision", choices=sorted(COMPUTE_TYPES), default="fp32",
                        help="both sides' precision (ours: nmt evaluate --precision; "
                        "CTranslate2: the same compute type)")
    parser.add_argument("--ours-precision", choices=("auto", "fp32", "bf16", "int8"),
                        help="ours in another precision than --precision (e.g. our best, "
                        "bf16, against CTranslate2's, int8)")
    parser.add_argument("--engine", choices=("auto", "ctranslate2", "torch"), default="auto",
                        help="ours on this runtime (nmt evaluate --engine)")
    parser.add_argument("--no-guard", action="store_true",
                        help="ours without the guard's second searches, which CTranslate2 "
                        "does not have")
    parser.add_argument("--repeats", type=int, default=3,
                        help="back-to-back pairs of runs per alpha (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        start = time.perf_counter()
        nmt("export", "--model", str(args.model), "--to", "ctranslate2", str(work / "ct2"))
        figure(figure="export_seconds", value=round(time.perf_counter() - start, 2))
        for alpha in (float(a) for a in args.alphas.split(",")):
            ratios = []
            for repeat in range(args.repeats):
                results = {"ours": ours(args, alpha, work),
                           "ctranslate2": ctranslate2_side(args, work / "ct2", alpha, work)}
                for system, (_, scores, speed) in results.items():
                    figure(figure="evaluate", system=system, split=args.split, beam=4,
                           alpha=alpha, repeat=repeat, bleu=round(scores["bleu"], 2),
                           chrf=round(scores["chrf"], 2),
                           tokenized_bleu=round(scores["tokenized_bleu"], 2),
                           sentences_per_s=round(speed["lines"] / speed["seconds"], 2),
                           tokens_per_s=round(speed["tokens"] / speed["seconds"], 1),
                           seconds=round(speed["seconds"], 2))
                (ours_hyp, ours_scores, ours_speed), (their_hyp, their_scores, their_speed) = \
                    results.values()
                ratios.append((ours_speed["lines"] / ours_speed["seconds"])
                              / (their_speed["lines"] / their_speed["seconds"]))
            ours_lines = ours_hyp.read_text(encoding="utf-8").splitlines()
            their_lines = their_hyp.read_text(encoding="utf-8").splitlines()
            same = sum(a == b for a, b in zip(ours_lines, their_lines))
            figure(figure="identical_lines", alpha=alpha, value=round(same / len(ours_lines), 4))
            figure(figure="bleu_difference", alpha=alpha, of="ours - ctranslate2",
                   value=round(ours_scores["bleu"] - their_scores["bleu"], 2))
            figure(figure="ratio", alpha=alpha, of="ours/ctranslate2 sentences_per_s",
                   value=round(statistics.median(ratios), 3),
                   pairs=[round(ratio, 3) for ratio in ratios])

if __name__ == "__main__":
    main()
