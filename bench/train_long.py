"""Training speed and memory over a long run on real data, in each precision.

Three steps of fixed shapes (bench/train_throughput.py) cannot show what a user's run
meets: thousands of batch shapes over thousands of steps. This trains the quickstart's
training (quickstart.training_overrides: the `small` preset, 2048 tokens per batch,
warm-up 300, dropout 0.1) on the prepared Bible en→de data for --minutes in each
precision, one `nmt train` process each, one after the other, while the parent samples
the child's resident memory and minor page faults every second from /proc. Per precision
it prints one JSON line per minute of training (target tokens/s in that minute, from the
run's metrics.jsonl), one per minute of the process (its peak RSS in that minute) and one
summary line: steps, tokens/s of the first and last minute and their ratio, peak RSS,
minor faults. (Its runs recorded up to 2026-11-26 trained with dropout 0.3, the
quickstart's then: the same dropout kernels run at either rate.)

    python bench/train_long.py --data DIR [--minutes 10] [--precisions fp32,bf16]
                               [--work DIR] [--neighbour-nice 19]
                               [--reference-every 60]
                               [--preset base --set batch_tokens=4000]

--neighbour-nice N runs one busy-loop process at that niceness beside each training run,
as a shared machine's background job would (OMP_WAIT_POLICY and other variables of
this process reach `nmt train`).

--reference-every S tells a slowdown of the training from a slowdown of the machine: every
S seconds the parent stops the training process (SIGSTOP), times a fixed reference (one
fp32 and one bf16 2048x256x1024 product, in turn, for 3 s on the same threads), and lets
it go on (SIGCONT). Each stretch of training between two references gets its own rate,
paused time left out, and that rate over the mean of the two references around it; the
summary's "normalised_last_over_first" is what the machine's own drift cannot explain, and
"normalised_last_third_over_first_third" the same over the first and last thirds of the
stretches, which single stretches' ±12% swings cannot move much.
(The per-minute lines then count the pauses as training time.)

--data is a prepared data directory (`nmt prepare --corpus bible --src en --tgt de --out
DIR`, or the quickstart's quickstart/data/bible-en-de). Nothing else should run on the CPU.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

def quickstart_settings(minutes: float, preset: str | None = None,
                        overrides: tuple[str, ...] = ()) -> list[str]:
    """`nmt train` arguments of the quickstart's training (quickstart.training_overrides:
    its batch, warm-up and recipe) for `minutes`, without its validation and checkpoints,
    logging every 10 steps for a fine-grained rate; `preset` instead of the quickstart's
    and `overrides` (NAME=VALUE) after its settings."""
    from transformer_nmt.quickstart import QuickstartOptions, training_overrides

    settings = training_overrides(QuickstartOptions(minutes=minutes)) + [
        ("valid_every", "0"), ("valid_bleu", "false"), ("save_every_minutes", "0"),
        ("log_every", "10"),
        ("max_steps", "1000000")]
    settings += [tuple(override.split("=", 1)) for override in overrides]
    return ["--preset", preset or QuickstartOptions.preset,
            *(arg for name, value in settings for arg in ("--set", f"{name}={value}"))]


def cpu_flags() -> list[str]:
    """The CPU flags that decide which precisions are native."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")
    try:
        with open("/proc/cpuinfo", encoding="ascii") as info:
            flags = next(line for line in info if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return [flag for flag in wanted if flag in flags]


def read_proc(pid: int) -> tuple[int, int]:
    """(resident MB, minor page faults so far) of process `pid`, or (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            # Fields after the command name (which may hold spaces): minflt is the 10th field.
            minflt = int(stat.read().rsplit(")", 1)[1].split()[7])
    except (OSError, StopIteration, IndexError, ValueError):
        return 0, 0
    return rss_kb // 1024, minflt


def per_minute(records: list[dict], minutes: float) -> list[float]:
    """Target tokens per second in each whole minute of training wall time."""
    train = [(r["wall"], r["tokens_seen"]) for r in records if r["event"] == "train"]
    rates = []
    for minute in range(int(minutes)):
        start, end = minute * 60, (minute + 1) * 60
        inside = [(wall, seen) for wall, seen in train if start <= wall <= end]
        if len(inside) >= 2:
            (w0, s0), (w1, s1) = inside[0], inside[-1]
            rates.append((s1 - s0) / max(w1 - w0, 1e-9))
    return rates


def reference_rate(seconds: float = 3.0) -> float:
    """Iterations per second of a fixed loop: one fp32 and one bf16 2048x256x1024 product
    (the quickstart's feed-forward shape), on this process's threads."""
    import torch

    a, b = torch.randn(2048, 256), torch.randn(256, 1024)
    a16, b16 = a.bfloat16(), b.bfloat16()
    for _ in range(3):  # warm: kernels compiled and cached before the clock starts
        a @ b, a16 @ b16
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b, a16 @ b16
        count += 1
    return count / (time.perf_counter() - started)


def stretch_rates(records: list[dict], stretches: list[tuple[float, float, float]]) -> list[dict]:
    """Training rate in each stretch (start, end, reference rate around it) between two
    references: target tokens over the time between the first and the last record inside."""
    rows = []
    train = [(r["time"], r["tokens_seen"]) for r in records if r["event"] == "train"]
    for number, (start, end, reference) in enumerate(stretches, 1):
        inside = [(t, seen) for t, seen in train if start <= t <= end]
        if len(inside) < 2:
            continue
        (t0, s0), (t1, s1) = inside[0], inside[-1]
        rate = (s1 - s0) / max(t1 - t0, 1e-9)
        rows.append({"stretch": number, "tgt_tok_s": round(rate), "reference_it_s": round(reference, 1),
                     "normalised": round(rate / reference, 2)})
    return rows


def thirds_ratio(values: list[float]) -> float | None:
    """The mean of the last third of `values` over the mean of the first: single minutes
    swing by about 12% with the machine's own speed, thirds much less."""
    third = len(values) // 3
    if third == 0:
        return None
    first, last = values[:third], values[-third:]
    return round((sum(last) / third) / (sum(first) / third), 3)


def busy_loop(niceness: int) -> None:
    os.nice(niceness)
    while True:
        pass


def run_one(data: Path, out: Path, precision: str, minutes: float, training: list[str],
            neighbour_nice: int | None = None, reference_every: float = 0) -> dict:
    neighbour = None
    if neighbour_nice is not None:
        neighbour = multiprocessing.Process(target=busy_loop, args=(neighbour_nice,),
                                            daemon=True)
        neighbour.start()
    try:
        return (_train(data, out, precision, minutes, reference_every, training)
                | {"neighbour_nice": neighbour_nice})
    finally:
        if neighbour is not None:
            neighbour.terminate()


def _train(data: Path, out: Path, precision: str, minutes: float, reference_every: float,
           training: list[str]) -> dict:
    command = [sys.executable, "-m", "transformer_nmt.cli", "train", "--data", str(data),
               "--out", str(out), *training, "--set", f"precision={precision}"]
    # stderr goes to a file: a pipe nobody reads until the end fills with the progress
    # bar's updates and then blocks the training process.
    errors = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
    # (time the stretch began, the reference timed just before it): the first is timed
    # before the child starts, the others while it is stopped.
    references = [(time.time(), reference_rate())] if reference_every else []
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, text=True)
    peak_rss, faults, started = 0, 0, time.monotonic()
    rss_per_minute: dict[int, int] = {}
    stretches: list[tuple[float, float, float]] = []
    while child.poll() is None:
        rss, minflt = read_proc(child.pid)
        peak_rss, faults = max(peak_rss, rss), max(faults, minflt)
        minute = int((time.monotonic() - started) // 60)
        rss_per_minute[minute] = max(rss_per_minute.get(minute, 0), rss)
        time.sleep(1.0)
        if references and time.time() - references[-1][0] >= reference_every:
            paused_at = time.time()
            child.send_signal(signal.SIGSTOP)
            time.sleep(0.2)  # let its threads leave the cores
            rate = reference_rate()
            stretches.append((references[-1][0], paused_at, (references[-1][1] + rate) / 2))
            child.send_signal(signal.SIGCONT)
            references.append((time.time(), rate))
    if child.returncode != 0:
        errors.seek(0)
        raise SystemExit(f"nmt train ({precision}) failed: {errors.read()[-2000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = per_minute(records, minutes)
    for minute, rate in enumerate(rates):
        print(json.dumps({"precision": precision, "minute": minute + 1,
                          "tgt_tok_s": round(rate)}), flush=True)
    for minute, rss in sorted(rss_per_minute.items()):
        print(json.dumps({"precision": precision, "process_minute": minute + 1,
                          "peak_rss_mb": rss}), flush=True)
    steps = max(r["step"] for r in records if r["event"] == "train")
    normalised = {}
    if references:
        stretches.append((references[-1][0], time.time(), (references[-1][1] + reference_rate()) / 2))
        rows = stretch_rates(records, stretches)
        for row in rows:
            print(json.dumps({"precision": precision, **row}), flush=True)
        if len(rows) >= 3:  # the last stretch is cut short by the end of the run: leave it out
            first, last = rows[0], rows[-2]
            full = rows[:-1]
            normalised = {"normalised_last_third_over_first_third":
                          thirds_ratio([row["normalised"] for row in full]),
                          "stretch_last_third_over_first_third":
                          thirds_ratio([row["tgt_tok_s"] for row in full]),"stretch_last_over_first": round(last["tgt_tok_s"] / first["tgt_tok_s"], 3),
                          "reference_last_over_first": round(last["reference_it_s"]
                                                             / first["reference_it_s"], 3),
                          "normalised_last_over_first": round(last["normalised"]
                                                              / first["normalised"], 3)}
    return normalised | {"precision": precision, "minutes": minutes, "steps": steps,
            "first_minute_tgt_tok_s": round(rates[0]) if rates else None,
            "last_minute_tgt_tok_s": round(rates[-1]) if rates else None,
            "last_over_first": round(rates[-1] / rates[0], 3) if len(rates) >= 2 else None,
            "last_third_over_first_third": thirds_ratio(rates),
            "peak_rss_mb": peak_rss, "minor_faults": faults,
            "cpu_flags": cpu_flags(), "machine": platform.processor() or platform.machine()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a prepared data directory")
    parser.add_argument("--minutes", type=float, default=10.0, help="training time per precision")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated precisions")
    parser.add_argument("--work", type=Path, default=None,
                        help="where the runs go (default: a temporary directory)")
    parser.add_argument("--neighbour-nice", type=int, default=None,
                        help="run a busy loop at this niceness beside each training run")
    parser.add_argument("--reference-every", type=float, default=0, metavar="SECONDS",
                        help="pause the training this often to time a fixed reference (0: never)")
    parser.add_argument("--preset", default=None,
                        help="train this preset (default: the quickstart's, small)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="NAME=VALUE",
                        help="a training setting after the quickstart's (repeatable), "
                             "e.g. --set batch_tokens=4000")
    args = parser.parse_args()
    training = quickstart_settings(args.minutes, args.preset, tuple(args.overrides))
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work or Path(temporary)
        for precision in args.precisions.split(","):
            out = work / f"run-{precision}"
            print(json.dumps(run_one(args.data, out, precision, args.minutes, training,
                                     args.neighbour_nice, args.reference_every)
                             | {"omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                                "preset": args.preset, "overrides": args.overrides}),
                  flush=True)


if __name__ == "__main__":
    main()
