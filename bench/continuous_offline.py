"""A file through the continuous-batching engine against the lockstep batches, in one run.

`nmt translate` sorts a buffer by length into batches; each batch decodes until its
longest output ends, its rows emptying as shorter ones finish. With
`TranslatorOptions(continuous=True)` each worker's sentences go through one engine
instead, joining as others end (transformer_nmt.decode.continuous). This translates the
same lines both ways, alternating, --repeats times, and prints one JSON line per run
(sentences/s, the ratio to the batches' run just before) and whether the outputs were
identical.

    python bench/continuous_offline.py --model quickstart/model.pt --source test.en
        [--lines 500] [--beam 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.translator import Translator, TranslatorOptions
from transformer_nmt.model_file import load_for_inference


def cpu_flags() -> list[str]:
    with open("/proc/cpuinfo", encoding="ascii") as info:
        flags = next(line for line in info if line.startswith("flags")).split()
    return [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags]


def timed(translator: Translator, lines: list[str]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    outputs = list(translator.translate(lines))
    return time.perf_counter() - started, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True, help="one sentence per line")
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lines = args.source.read_text(encoding="utf-8").splitlines()[: args.lines]
    options = TranslatorOptions(DecodeConfig(beam=args.beam))
    batches = Translator(load_for_inference(args.model), options)
    continuous = Translator(load_for_inference(args.model), replace(options, continuous=True))
    print(json.dumps({"machine": platform.processor() or platform.machine(),
                      "cpu_flags": cpu_flags(), "lines": len(lines), "beam": args.beam,
                      "workers": batches.options.workers,
                      "batch_size": batches.options.batch_size}), flush=True)
    for repeat in range(args.repeats):
        batch_seconds, batch_outputs = timed(batches, lines)
        engine_seconds, engine_outputs = timed(continuous, lines)
        print(json.dumps({
            "repeat": repeat + 1,
            "batches_sentences_per_s": round(len(lines) / batch_seconds, 2),
            "continuous_sentences_per_s": round(len(lines) / engine_seconds, 2),
            "continuous_over_batches": round(batch_seconds / engine_seconds, 3),
            "identical_outputs": engine_outputs == batch_outputs}), flush=True)


if __name__ == "__main__":
    main()
