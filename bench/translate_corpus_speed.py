"""`nmt translate-corpus` against `nmt translate` on the same file, as a user runs them.

Each case is the command itself in a subprocess, timed from start to exit (the model's
loading, the workers' start and the join included), one after another on an otherwise
idle machine:

- `nmt translate` (the reference);
- `nmt translate-corpus`, local backend, default shards, and with --shard-lines 1000;
- `nmt translate-corpus --backend ray` on this one machine (when Ray is installed);
- the local backend killed (SIGKILL to its process group) once half its shards are done,
  then run again to the end: the two runs' time together, the shards the second one
  translated, and whether the output is the uninterrupted run's, byte for byte.

JSON lines: each case's seconds and sentences per second, its speed against the first
case run (`nmt translate` by default), and whether its output equals that case's. Outputs are compared in the precision
given (default fp32: in bf16 a sentence's translation may change with its batch mates,
and the two commands batch differently).

    python bench/translate_corpus_speed.py --model M.pt --input SOURCE.txt --work DIR
        [--lines 20000] [--precision fp32] [--beam 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

NMT = [sys.executable, "-m", "transformer_nmt.cli"]


def run(command: list[str]) -> float:
    """Seconds `command` took; it must succeed."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def shards_done(out: Path) -> int:
    """Shard records written so far under out/.shards."""
    return len(list((out / ".shards").glob("*.json"))) if (out / ".shards").is_dir() else 0


def killed_at_half_then_resumed(command: list[str], out: Path, shards: int) -> dict:
    """Run `command`, SIGKILL its process group once half of `shards` are done, rerun it
    to the end; the seconds of both runs and the shards the rerun translated."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    while shards_done(out) < shards // 2 and process.poll() is None:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    first = time.perf_counter() - start
    before = shards_done(out)
    second = run(command)
    return {"seconds_killed_run": round(first, 1), "seconds_rerun": round(second, 1),
            "shards_done_at_kill": before, "shards_in_rerun": shards - before,
            "seconds": first + second}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", type=Path, required=True, help="source sentences")
    parser.add_argument("--work", type=Path, required=True, help="a scratch directory")
    parser.add_argument("--lines", type=int, default=20000,
                        help="sentences translated: the input's first, repeated if short")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--cases", default="translate,local,local-1000,ray,killed")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    lines = args.input.read_text(encoding="utf-8").splitlines()
    lines = (lines * (args.lines // len(lines) + 1))[:args.lines]
    source = args.work / "source.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = ["--model", args.model, "--precision", args.precision, "--beam", str(args.beam)]
    corpus = [*NMT, "translate-corpus", *common, "--input", str(source)]
    cases = {
        "translate": [*NMT, "translate", *common, "--input", str(source),
                      "--output", str(args.work / "translate.txt")],
        "local": [*corpus, "--out", str(args.work / "local")],
        "local-1000": [*corpus, "--out", str(args.work / "local-1000"), "--shard-lines", "1000"],
        "ray": [*corpus, "--out", str(args.work / "ray"), "--backend", "ray"],
        "killed": [*corpus, "--out", str(args.work / "killed"), "--shard-lines", "1000"],
    }
    reference = None
    expected = None
    for name in args.cases.split(","):
        if name == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                print(json.dumps({"bench": "translate_corpus_speed", "case": name,
                                  "skipped": "ray is not installed (the ray extra)"}))
                continue
        result: dict = {}
        if name == "killed":
            result = killed_at_half_then_resumed(cases[name], args.work / name,
                                                 -(-len(lines) // 1000))
            seconds = result.pop("seconds")
        else:
            seconds = run(cases[name])
        output = (args.work / "translate.txt" if name == "translate"
                  else args.work / name / "source.txt")
        text = output.read_bytes()
        if reference is None:
            reference, expected = seconds, text
        print(json.dumps({
            "bench": "translate_corpus_speed", "case": name, "sentences": len(lines),
            "precision": args.precision, "beam": args.beam, "seconds": round(seconds, 1),
            "sentences_per_s": round(len(lines) / seconds, 1),
            "against": args.cases.split(",")[0],
            "speed_ratio": round(reference / seconds, 3), "same_output": text == expected,
            **result}), flush=True)


if __name__ == "__main__":
    main()
