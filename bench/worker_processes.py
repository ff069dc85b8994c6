"""`nmt translate` with its workers as threads of one process or as worker processes
(`--worker-processes`), back to back, on one input file.

Each round runs both, alternating which goes first, as `nmt translate --workers 2` would
be run by a user: a fresh command that loads the model, translates the file and exits.
Prints per run the seconds of the whole command (what a user waits), the seconds of
translation that `nmt translate` reports (worker processes' start included, the
parent's loading of the model not), and the peak resident memory of the command and
its worker processes (each one's peak, summed; read from /proc once a second); then per
mode the
median, and the ratio of the medians (threads' seconds over processes'). The outputs of
the two modes are compared line by line (in fp32 they are the same: each batch is
decoded on one thread either way).

    python bench/worker_processes.py --model MODEL.pt --input FILE [--precision bf16]
        [--lines 2000] [--repeats 3] [-- EXTRA nmt translate ARGUMENTS]

A random model of the base shape never stops on its own: give it `--max-len-a 1
--max-len-b 0` as extra arguments so that every output is as long as its source.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _tree_peak_mb(root: int) -> float:
    """The peak resident memory of process `root` and all its descendants so far, each
    process's own peak (VmHWM) summed, in MB."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
        todo += _children(pid)
    return total / 1024


def run(args: argparse.Namespace, source: Path, output: Path, processes: bool) -> dict:
    """One `nmt translate` command: its seconds, its reported seconds, its peak memory."""
    command = [sys.executable, "-m", "transformer_nmt.cli", "translate", "--model",
               str(args.model), "--input", str(source), "--output", str(output),
               "--workers", "2", "--precision", args.precision,
               "--worker-processes" if processes else "--no-worker-processes", *args.extra]
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    peak = [0.0]

    def sample() -> None:
        while process.poll() is None:
            peak[0] = max(peak[0], _tree_peak_mb(process.pid))
            time.sleep(1.0)  # seldom: a scan of /proc takes CPU from the timed run

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, stderr = process.communicate()
    seconds = time.perf_counter() - start
    sampler.join()
    if process.returncode:
        sys.exit(stderr)
    match = re.search(r"translated (\d+) lines .* in ([\d.]+) s", stderr)
    return dict(lines=int(match[1]), translate_seconds=float(match[2]),
                command_seconds=round(seconds, 2), peak_rss_mb=round(peak[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--lines", type=int, default=0,
                        help="the input's first N lines (default: all)")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="more nmt translate arguments, after --")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        lines = args.input.read_text(encoding="utf-8").splitlines()
        source = work / "source.txt"
        source.write_text("\n".join(lines[: args.lines or None]) + "\n", encoding="utf-8")
        results: dict[str, list[dict]] = {"threads": [], "processes": []}
        for repeat in range(args.repeats):
            order = ("threads", "processes") if repeat % 2 == 0 else ("processes", "threads")
            for mode in order:
                result = run(args, source, work / f"{mode}.txt", mode == "processes")
                results[mode].append(result)
                figure(figure="worker_processes_run", mode=mode, repeat=repeat,
                       model=args.model.name, precision=args.precision, **result)
        medians = {}
        for mode, runs in results.items():
            medians[mode] = {key: statistics.median(run[key] for run in runs)
                             for key in ("translate_seconds", "command_seconds", "peak_rss_mb")}
            figure(figure="worker_processes", mode=mode, model=args.model.name,
                   precision=args.precision, lines=runs[0]["lines"],
                   sentences_per_s=round(runs[0]["lines"] / medians[mode]["translate_seconds"], 2),
                   **medians[mode])
        same = sum(a == b for a, b in zip(
            (work / "threads.txt").read_text(encoding="utf-8").splitlines(),
            (work / "processes.txt").read_text(encoding="utf-8").splitlines()))
        figure(figure="worker_processes_ratio", model=args.model.name, precision=args.precision,
               translate=round(medians["threads"]["translate_seconds"]
                               / medians["processes"]["translate_seconds"], 3),
               command=round(medians["threads"]["command_seconds"]
                             / medians["processes"]["command_seconds"], 3),
               identical_lines=same, lines=len(lines[: args.lines or None]))


if __name__ == "__main__":
    main()
