"""One sentence at a time: a trained model's lone-sentence latency, decoded by us and by
its CTranslate2 export, in one run on one machine (issue 51).

This is how most people meet a translator (a web page, a browser extension, a server
with a few users): each sentence decoded alone, beam 4, nothing batched with it. Every
case runs in its own process (CTranslate2 and PyTorch bring their own OpenMP), loads
the model, translates a few sentences to warm up, then times each of --sentences test
sentences alone: wall time per sentence (median, mean, 90th percentile) and the CPU time
the process spent per sentence. The cases alternate for --rounds rounds, so that a slow
moment of the machine falls on all of them; the medians over rounds are printed last,
with each case's median latency against CTranslate2's faster compute type.

Ours: `Translator` with batch_size 1, one worker, line by line (what `nmt translate
--batch-size 1` does with a lone line, its confidence unasked as text output leaves it),
for each ENGINE/PRECISION of --ours (the default engine and precision, and the PyTorch
search's default).
CTranslate2: `nmt export --to ctranslate2`, one translator with intra_threads = --threads,
in each --compute-types value. Both: beam 4, length penalty --alpha (ours GNMT's form,
CTranslate2's |Y|^alpha), at most source length + 50 tokens.

    python bench/lone_sentence.py --model MODEL.pt --data DATA_DIR [--sentences 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def source_lines(args: argparse.Namespace) -> list[str]:
    """The first --sentences lines of the data directory's --split, source side."""
    manifest = json.loads((args.data / "manifest.json").read_text())
    path = args.data / f"{args.split}.{manifest['src_lang']}"
    return path.read_text(encoding="utf-8").splitlines()[: args.sentences + WARM_UP]


WARM_UP = 3
"""Sentences translated before the timing, not timed (kernels chosen, buffers grown)."""


def timed(translate_one, lines: list[str]) -> dict:
    """Each line translated alone: latency figures (ms) and CPU ms per sentence."""
    for line in lines[:WARM_UP]:
        translate_one(line)
    seconds, tokens = [], 0
    cpu = time.process_time()
    for line in lines[WARM_UP:]:
        start = time.perf_counter()
        tokens += translate_one(line)
        seconds.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    ordered = sorted(seconds)
    return dict(sentences=len(seconds), p50_ms=round(statistics.median(seconds) * 1000, 1),
                mean_ms=round(statistics.mean(seconds) * 1000, 1),
                p90_ms=round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
                cpu_ms=round(cpu / len(seconds) * 1000, 1), output_tokens=tokens)


def ours(args: argparse.Namespace, engine: str, precision: str) -> dict:
    import torch

    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

    torch.set_num_threads(args.threads)
    decode = DecodeConfig(beam=4, alpha=args.alpha)
    translator = Translator.from_file(args.model, TranslatorOptions(
        decode=decode, engine=engine, precision=precision, batch_size=1, workers=1,
        buffer_size=1, confidence=False))

    def translate_one(line: str) -> int:
        (best,) = translator.translate_batch([line])
        return len(best[0].tokens)

    return timed(translate_one, source_lines(args))


def ctranslate2_side(args: argparse.Namespace, compute_type: str) -> dict:
    import ctranslate2
    import sentencepiece

    from transformer_nmt.data.text import normalize

    processor = sentencepiece.SentencePieceProcessor(model_file=str(args.data / "spm.model"))
    translator = ctranslate2.Translator(str(args.ct2_dir), device="cpu",
                                        compute_type=compute_type, inter_threads=1,
                                        intra_threads=args.threads)
    never = [[processor.id_to_piece(processor.pad_id())],
             [processor.id_to_piece(processor.bos_id())]]

    def translate_one(line: str) -> int:
        pieces = processor.encode(normalize(line), out_type=str)
        (result,) = translator.translate_batch(
            [pieces], beam_size=4, length_penalty=args.alpha,
            max_decoding_length=len(pieces) + 50, suppress_sequences=never)
        best = result.hypotheses[0]
        processor.decode(best)
        return len(best)

    return timed(translate_one, source_lines(args))


def run_case(args: argparse.Namespace, case: str, ct2_dir: Path) -> dict:
    """One case in a child process: its figures."""
    command = [sys.executable, __file__, "--case", case, "--ct2-dir", str(ct2_dir),
               "--model", str(args.model), "--data", str(args.data), "--split", args.split,
               "--sentences", str(args.sentences), "--threads", str(args.threads),
               "--alpha", str(args.alpha)]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode != 0:
        raise SystemExit(f"case {case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True,
                        help="the model's data directory (its spm.model and split)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ours", default="auto/auto,torch/auto",
                        help="ours, comma-separated ENGINE/PRECISION pairs")
    parser.add_argument("--compute-types", default="float32,int8",
                        help="CTranslate2's, comma-separated")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # SYSTEM:PRECISION, in a child
    parser.add_argument("--ct2-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        system, precision = args.case.split(":")
        result = (ours(args, *precision.split("/")) if system == "ours"
                  else ctranslate2_side(args, precision))
        print(json.dumps(result), flush=True)
        return
    cases = ([f"ours:{pair}" for pair in args.ours.split(",") if pair]
             + [f"ctranslate2:{c}" for c in args.compute_types.split(",") if c])
    with tempfile.TemporaryDirectory() as workdir:
        ct2_dir = Path(workdir) / "ct2"
        subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "export", "--model",
                        str(args.model), "--to", "ctranslate2", str(ct2_dir)],
                       check=True, capture_output=True)
        results: dict[str, list[dict]] = {case: [] for case in cases}
        for round_ in range(args.rounds):
            for case in cases:
                result = run_case(args, case, ct2_dir)
                results[case].append(result)
                figure(figure="lone_sentence", case=case, round=round_, threads=args.threads,
                       **result)
    medians = {case: statistics.median(r["p50_ms"] for r in runs)
               for case, runs in results.items()}
    reference = min((m for case, m in medians.items() if case.startswith("ctranslate2")),
                    default=None)
    for case, runs in results.items():
        figure(figure="median", case=case, p50_ms=medians[case],
               cpu_ms=statistics.median(r["cpu_ms"] for r in runs),
               output_tokens=runs[0]["output_tokens"],
               time_vs_ctranslate2_best=(round(medians[case] / reference, 2)
                                         if reference else None))


if __name__ == "__main__":
    main()
