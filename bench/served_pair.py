"""Two `nmt serve` configurations of one model, one client, each sentence sent to both
back to back: the latency each adds, free of the machine's drift between two runs.

Starts two servers on loopback with the same model and `--flags-a` / `--flags-b` (idle
servers' threads sleep, so the one waiting takes no CPU from the one answering), warms
both up, then sends each of --sentences lines of --source alone to A and then to B (the
order swapped every other line). Prints one JSON line per configuration: p50, mean and
p90 milliseconds per request, and the ratio of B's p50 to A's; then the number of lines
whose translations differ (both decode in fp32 or both in bf16: they should not).

    python bench/served_pair.py --model MODEL.pt --source test.en \
        --flags-a="--engine torch" --flags-b="--engine ctranslate2 --precision fp32"
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def start(model: Path, port: int, flags: list[str]) -> subprocess.Popen:
    """`nmt serve` of `model` on `port`, returned once it answers /health."""
    server = subprocess.Popen([sys.executable, "-m", "transformer_nmt.cli", "serve", "--model",
                               str(model), "--port", str(port), *flags],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return server
        except OSError:
            if server.poll() is not None:
                raise SystemExit(f"the server with {flags} ended with {server.returncode}")
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"the server with {flags} did not start")


def translate(port: int, line: str) -> tuple[float, str]:
    """(milliseconds, translation) of `line` sent alone to the server on `port`."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/translate", data=json.dumps({"text": line}).encode(),
        headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        body = json.loads(response.read())
    return (time.perf_counter() - started) * 1000, body["translations"][0]["text"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--flags-a", default="")
    parser.add_argument("--flags-b", default="")
    parser.add_argument("--port", type=int, default=18231)
    args = parser.parse_args()
    lines = [line for line in args.source.read_text(encoding="utf-8").splitlines() if line]
    lines = lines[: args.sentences + 5]
    configurations = {"a": shlex.split(args.flags_a), "b": shlex.split(args.flags_b)}
    servers = {name: start(args.model, args.port + i, flags)
               for i, (name, flags) in enumerate(configurations.items())}
    ports = {name: args.port + i for i, name in enumerate(configurations)}
    try:
        for line in lines[:5]:
            for name in ports:
                translate(ports[name], line)
        times: dict[str, list[float]] = {name: [] for name in ports}
        texts: dict[str, list[str]] = {name: [] for name in ports}
        for i, line in enumerate(lines[5:]):
            for name in (("a", "b") if i % 2 == 0 else ("b", "a")):
                milliseconds, text = translate(ports[name], line)
                times[name].append(milliseconds)
                texts[name].append(text)
    finally:
        for server in servers.values():
            server.terminate()
            server.wait()
    p50 = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(json.dumps(dict(
            figure="served_pair", configuration=name, flags=configurations[name],
            sentences=len(values), p50_ms=round(p50[name], 1),
            mean_ms=round(statistics.mean(values), 1),
            p90_ms=round(sorted(values)[int(0.9 * len(values))], 1),
            p50_vs_a=round(p50[name] / p50["a"], 3))), flush=True)
    print(json.dumps(dict(figure="served_pair_differ",
                          lines=sum(a != b for a, b in zip(texts["a"], texts["b"])))))


if __name__ == "__main__":
    main()
