"""`nmt serve` against LibreTranslate serving the same model, one sentence per request.

LibreTranslate (Flask under waitress, Argos Translate, CTranslate2 underneath) is
installed in a virtual environment of its own under --work, pinned to LIBRETRANSLATE.
The model file (or --theirs, another model of the same pair: a distilled student's
teacher, say) is exported with `nmt export --to argos` (--quantization, float32 by
default) and installed as that environment's only Argos package. Then each server in turn
(LibreTranslate first, then `nmt serve` with the model file and its own defaults, plus
any --server-flag) is started on loopback and sent the first --sentences lines of
--source, each as its own LibreTranslate request (POST /translate, which both servers
speak, so one client code measures both), from each count of --clients concurrent
clients in turn (each level bounded by --max-seconds).

Prints one JSON line per server and level (sentences/s, p50/p95/p99 latency, errors,
the server's CPU seconds per answered sentence, its RSS), and one line per level with
ours against LibreTranslate's: throughput, p50 latency and CPU per sentence.

Settings that differ, as each tool ships: LibreTranslate decodes with Argos's beam 4
and length penalty 0.2 and CTranslate2's default threads; ours with the model's
decoding settings (beam 4, alpha 0.6) and the guard. MiniSBD, LibreTranslate's sentence
splitter, needs a model that it downloads and that cannot be fetched without a network:
here its splitter keeps the text whole, which every request here is (one sentence), so
LibreTranslate pays nothing for splitting and we pay our own splitter.

    python bench/libretranslate_load.py --model quickstart/model.pt --work /tmp/lt \\
        --source quickstart/data/bible-en-de/test.en [--sentences 200] [--clients 1,8,32]

A distilled student served greedily against LibreTranslate serving its teacher:

    python bench/libretranslate_load.py --model distill/student.pt \\
        --theirs quickstart/model.pt --server-flag=--beam --server-flag=1 ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import figure, percentile, server_cpu_seconds, server_rss_mb  # noqa: E402

LIBRETRANSLATE = "libretranslate==1.9.6"
"""The release measured; its dependencies as pip resolves them."""

LAUNCH = """
import sys
import argostranslate.package
import argostranslate.sbd

argostranslate.package.install_from_path(sys.argv[1])
# MiniSBD downloads its model on first use; every request here is one sentence.
argostranslate.sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]
import libretranslate.init
# With fewer than two packages installed, the start fetches the package index, retrying
# for minutes without a network: the one package it serves is installed above.
libretranslate.init.check_and_install_models = lambda *args, **kwargs: None
from libretranslate.main import main
sys.argv = ["libretranslate", *sys.argv[2:]]
main()
"""
"""The script that installs the package and starts LibreTranslate in its environment."""


def install(work: Path) -> Path:
    """LibreTranslate in a virtual environment of its own under `work`; its python."""
    python = work / "venv" / "bin" / "python"
    if not (work / "venv" / "bin" / "libretranslate").exists():
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", LIBRETRANSLATE],
                       check=True)
    return python


def export_package(model: Path, work: Path, quantization: str) -> Path:
    """The model as an Argos package under `work`, made again on every run."""
    out = work / f"model-{quantization}.argosmodel"
    subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "export", "--model",
                    str(model), "--to", "argos", "--quantization", quantization, "--force",
                    str(out)], check=True)
    return out


def libretranslate_server(python: Path, package: Path, work: Path, port: int
                          ) -> subprocess.Popen:
    """LibreTranslate on loopback at `port`, its Argos data (the package) under `work`."""
    data = work / "argos-data"
    env = {**os.environ, "XDG_DATA_HOME": str(data), "XDG_CACHE_HOME": str(data / "cache"),
           "XDG_CONFIG_HOME": str(data / "config")}
    return subprocess.Popen(
        [str(python), "-c", LAUNCH, str(package), "--host", "127.0.0.1", "--port", str(port),
         "--disable-web-ui", "--char-limit", "-1"],
        env=env, stdout=subprocess.DEVNULL, stderr=log(work, "libretranslate"))


def our_server(model: Path, work: Path, port: int, flags: list[str], env: list[str]
               ) -> subprocess.Popen:
    """`nmt serve` on loopback at `port` with the model file and its defaults, and the
    NAME=VALUE variables of `env` in its environment only."""
    return subprocess.Popen(
        [sys.executable, "-m", "transformer_nmt.cli", "serve", "--model", str(model),
         "--port", str(port), "--log-level", "warning", *flags],
        env={**os.environ, **dict(item.split("=", 1) for item in env)},
        stderr=log(work, "nmt-serve"))


def log(work: Path, name: str):
    """A server's stderr, written to work/NAME.log: a pipe nobody reads would fill and
    stop a server that logs every request (Argos logs each at INFO)."""
    return open(work / f"{name}.log", "wb")  # noqa: SIM115 (the child holds it)


def wait_ready(url: str, process: subprocess.Popen, seconds: float = 300) -> None:
    """Until GET /languages answers (both servers have it); the server's stderr if it exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with status {process.returncode}: see its "
                             "log under --work")
        try:
            with urllib.request.urlopen(url + "/languages", timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


def translate(url: str, line: str, source: str, target: str) -> str:
    """LibreTranslate's POST /translate of one line; the translated text."""
    body = json.dumps({"q": line, "source": source, "target": target, "format": "text"})
    request = urllib.request.Request(url + "/translate", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())["translatedText"]


def load_level(url: str, lines: list[str], clients: int, args: argparse.Namespace) -> dict:
    """Every line as its own request from `clients` threads, until done or max_seconds."""
    latencies, errors = [], []
    lock = threading.Lock()
    remaining = iter(lines)
    deadline = time.monotonic() + args.max_seconds

    def client() -> None:
        while time.monotonic() < deadline:
            with lock:
                line = next(remaining, None)
            if line is None:
                return
            started = time.perf_counter()
            try:
                translate(url, line, args.source_code, args.target_code)
            except Exception as error:  # noqa: BLE001 (counted, the load goes on)
                with lock:
                    errors.append(repr(error)[:160])
                continue
            with lock:
                latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(client) for _ in range(clients)]:
            future.result()
    seconds = time.perf_counter() - started
    return {"clients": clients, "answered": len(latencies), "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "sentences_per_s": round(len(latencies) / seconds, 2),
            **{f"p{share}_ms": round(percentile(latencies, share / 100), 1) if latencies
               else None for share in (50, 95, 99)},
            "seconds": round(seconds, 1)}


def measure(name: str, process: subprocess.Popen, url: str, lines: list[str],
            args: argparse.Namespace) -> dict[int, dict]:
    """Every level of --clients against one started server, which is stopped after."""
    results = {}
    try:
        wait_ready(url, process)
        for line in lines[:5]:  # warm-up: the first requests load and compile
            translate(url, line, args.source_code, args.target_code)
        for clients in (int(c) for c in args.clients.split(",")):
            cpu_before = server_cpu_seconds(process.pid)
            result = load_level(url, lines, clients, args)
            cpu = server_cpu_seconds(process.pid) - cpu_before
            result["cpu_s_per_sentence"] = round(cpu / max(result["answered"], 1), 4)
            figure(server=name, **result, **server_rss_mb(process.pid))
            results[clients] = result
    finally:
        process.terminate()
        process.wait(timeout=120)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="our model file")
    parser.add_argument("--theirs", type=Path,
                        help="the model file LibreTranslate serves (default: --model)")
    parser.add_argument("--work", type=Path, required=True,
                        help="LibreTranslate's environment, the package and its data")
    parser.add_argument("--source", type=Path, required=True, help="source sentences")
    parser.add_argument("--source-code", default="en")
    parser.add_argument("--target-code", default="de")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--max-seconds", type=float, default=120)
    parser.add_argument("--quantization", default="float32",
                        help="the Argos package's CTranslate2 weights (float32 or int8)")
    parser.add_argument("--server-flag", action="append", default=[], metavar="FLAG",
                        help="a flag for `nmt serve` (repeat for several)")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable of our server's environment only; repeatable")
    parser.add_argument("--port", type=int, default=18190)
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    lines = [line.strip() for line in args.source.read_text(encoding="utf-8").splitlines()
             if line.strip()][: args.sentences]
    python = install(work)
    package = export_package((args.theirs or args.model).resolve(), work, args.quantization)
    url = f"http://127.0.0.1:{args.port}"
    theirs = measure("libretranslate", libretranslate_server(python, package, work, args.port),
                     url, lines, args)
    ours = measure("nmt-serve", our_server(args.model, work, args.port, args.server_flag,
                                                args.server_env), url,
                   lines, args)
    for clients, mine in ours.items():
        other = theirs[clients]
        figure(case="ratio", clients=clients,
               throughput=round(mine["sentences_per_s"] / max(other["sentences_per_s"], 1e-9), 3),
               p50=round(mine["p50_ms"] / other["p50_ms"], 3)
               if mine["p50_ms"] and other["p50_ms"] else None,
               cpu_per_sentence=round(mine["cpu_s_per_sentence"]
                                      / max(other["cpu_s_per_sentence"], 1e-9), 3))
    figure(case="done", ours=str(args.model), theirs=str(args.theirs or args.model),
           median_sentence_chars=statistics.median(len(line) for line in lines))


if __name__ == "__main__":
    main()
