"""What serving several models costs: start-up, memory per model in memory, and the
latency of a request whose model must be loaded first (--max-models-loaded) against one
whose model is loaded.

The model file is copied N times, each copy recording another language pair (en→x1,
en→x2, ...; the same weights, so every pair decodes the same work). Two real `nmt serve`
processes run one after the other: every model loaded (the default), and at most one
loaded. For each it prints one JSON line: seconds to /ready, resident memory once ready,
then the median latency of a warm request (the same sentence 20 times to a loaded pair)
and of a cold one (a request to each pair in turn, so that with one model loaded every
request loads its model and unloads the previous one), and the resident memory at the end.

    python bench/serve_models.py --model quickstart/model.pt [--copies 4]

Nothing else should run on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SENTENCE = "And God said, Let there be light: and there was light."


def labelled_copies(model: Path, directory: Path, copies: int) -> list[str]:
    """`copies` copies of `model` in `directory`, en→x1, en→x2, ...; their targets."""
    from transformer_nmt.model_file import read_model_file, save_model_file

    payload = read_model_file(model)
    targets = [f"x{number}" for number in range(1, copies + 1)]
    for target in targets:
        payload["src_lang"], payload["tgt_lang"] = "en", target
        save_model_file(payload, directory / f"en-{target}.pt")
    return targets


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) // 1024


def translate_ms(url: str, target: str) -> float:
    body = json.dumps({"q": SENTENCE, "source": "en", "target": target}).encode()
    request = urllib.request.Request(url + "/translate", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        json.load(response)
    return (time.perf_counter() - started) * 1000


def measure(directory: Path, targets: list[str], max_loaded: int | None) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "transformer_nmt.cli", "serve", "--models", str(directory),
               "--port", str(port), "--log-level", "warning", "--workers", "1"]
    if max_loaded is not None:
        command += ["--max-models-loaded", str(max_loaded)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(process.stderr.read().decode()[-2000:])
            try:
                with urllib.request.urlopen(url + "/ready", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        ready_s = time.perf_counter() - started
        ready_rss = rss_mb(process.pid)
        translate_ms(url, targets[0])  # the first request's own warm-up
        warm = [translate_ms(url, targets[0]) for _ in range(20)]
        cold = [translate_ms(url, target) for _ in range(3) for target in targets[1:] + targets[:1]]
        return {"models": len(targets), "max_models_loaded": max_loaded,
                "seconds_to_ready": round(ready_s, 2), "rss_mb_ready": ready_rss,
                "warm_median_ms": round(statistics.median(warm), 1),
                "rotating_median_ms": round(statistics.median(cold), 1),
                "rss_mb_end": rss_mb(process.pid)}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a model file")
    parser.add_argument("--copies", type=int, default=4, help="pairs the server serves")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        targets = labelled_copies(args.model, directory, args.copies)
        for max_loaded in (None, 1):
            print(json.dumps(measure(directory, targets, max_loaded)
                             | {"cpu_count": os.cpu_count()}), flush=True)


if __name__ == "__main__":
    main()
