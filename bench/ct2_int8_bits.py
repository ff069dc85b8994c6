"""CTranslate2's int8 with weights in 8 bits and in 7 (decode/runtime/ct2_int8.py), through
oneDNN's products and through MKL's, against float32, as `nmt translate` decodes a model
with each: test BLEU, the share of lines decoded as float32 decodes them, the mean
relative distance of the test references' log P from float32's, full batches'
sentences/s and a lone sentence's latency.

Cases: `int8-8bit-onednn` (CTranslate2's int8 on a CPU not made by Intel), `int8-7bit`
(ours where 8-bit products saturate), `int8-8bit-mkl` (CTranslate2 told to use MKL,
CT2_USE_MKL=1), `fp32`. CTranslate2 chooses its product library once, as it loads, so
every case runs in a process of its own: it loads the model as `nmt translate` does
(CTranslate2, beam 4, the model's shortlist where it has one, the default workers and
batches), translates the split whole (timed) and --lone lines one at a time (each
timed), and prints one JSON line. The cases alternate for --rounds rounds, so that a slow
moment of the machine falls on all of them; the last line holds each case's medians, its
BLEU and its ratios against `int8-8bit-onednn`.

    python bench/ct2_int8_bits.py --model MODEL.pt --data DATA_DIR [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = {  # name: (precision, 7-bit weights, CT2_USE_MKL)
    "int8-8bit-onednn": ("int8", False, "0"), "int8-7bit": ("int8", True, "0"),
    "int8-8bit-mkl": ("int8", False, "1"), "fp32": ("fp32", False, "0")}
BASE = "int8-8bit-onednn"


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def reference_log_probs(translator, lines: list[str], references: list[str]) -> list[float]:
    """log P of each reference given its line, by `translator`'s CTranslate2 model."""
    from transformer_nmt.data.text import normalize

    sources = translator.source_ids(lines)
    targets = translator.vocab.target.encode_batch([normalize(line) for line in references])
    scored = translator.ctranslate2.translator(1).score_batch(
        [[str(token) for token in ids] for ids in sources],
        [[str(token) for token in ids] for ids in targets], max_input_length=0)
    return [sum(result.log_probs) for result in scored]


def run_case(args: argparse.Namespace) -> None:
    """One case in this process; CT2_USE_MKL was set by the parent before any import."""
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.data.manifest import text_path
    from transformer_nmt.decode.runtime import choice
    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
    from transformer_nmt.evaluate import read_text, score, split_languages

    precision, seven_bit, _ = CASES[args.case]
    choice.products_saturate_here = lambda: seven_bit
    src, tgt = split_languages(args.data, None, None)
    lines = read_text(text_path(args.data, args.split, src))
    references = read_text(text_path(args.data, args.split, tgt))
    translator = Translator.from_file(args.model, TranslatorOptions(
        DecodeConfig(beam=4), engine="ctranslate2", precision=precision))
    list(translator.translate(lines[:16]))
    started = time.perf_counter()
    found = list(translator.translate(lines))
    seconds = time.perf_counter() - started
    lone = []
    for line in lines[: args.lone]:
        started = time.perf_counter()
        list(translator.translate([line]))
        lone.append(time.perf_counter() - started)
    figure(case=args.case, sentences_per_s=round(len(lines) / seconds, 2),
           lone_p50_ms=round(1000 * statistics.median(lone), 2),
           bleu=round(score(found, references, tgt)["bleu"], 2), translations=found,
           log_probs=reference_log_probs(translator, lines, references))


def summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Each case's medians over rounds, BLEU, agreement with fp32 and ratios to BASE."""
    float32 = runs["fp32"][0]
    found = {}
    for case, results in runs.items():
        first = results[0]
        distances = [abs(ours - theirs) / abs(theirs) for ours, theirs
                     in zip(first["log_probs"], float32["log_probs"])]
        found[case] = {
            "sentences_per_s": statistics.median(r["sentences_per_s"] for r in results),
            "lone_p50_ms": statistics.median(r["lone_p50_ms"] for r in results),
            "bleu": first["bleu"],
            "same_lines_as_fp32": round(sum(a == b for a, b in zip(
                first["translations"], float32["translations"])) / len(distances), 3),
            "log_p_distance_from_fp32": round(statistics.mean(distances), 4)}
    base = found[BASE]
    for values in found.values():
        values["speed_vs_base"] = round(values["sentences_per_s"] / base["sentences_per_s"], 3)
        values["lone_time_vs_base"] = round(values["lone_p50_ms"] / base["lone_p50_ms"], 3)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lone", type=int, default=40, help="lines timed one at a time")
    parser.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run_case(args)
        return
    runs: dict[str, list[dict]] = {case: [] for case in CASES}
    for round_number in range(args.rounds):
        order = list(CASES) if round_number % 2 == 0 else list(reversed(CASES))
        for case in order:
            env = {**os.environ, "CT2_USE_MKL": CASES[case][2]}
            out = subprocess.run(
                [sys.executable, __file__, "--model", str(args.model), "--data", str(args.data),
                 "--split", args.split, "--lone", str(args.lone), "--case", case], env=env,
                check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            runs[case].append(result)
            figure(round=round_number, **{key: value for key, value in result.items()
                                           if key not in ("translations", "log_probs")})
    figure(summary=summary(runs), rounds=args.rounds)


if __name__ == "__main__":
    main()
