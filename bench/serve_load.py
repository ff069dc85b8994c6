"""`nmt serve` under load against `nmt translate`'s offline throughput, in one run.

Starts `nmt serve` on loopback with a base-shape model, then sends the first --sentences
of newstest2014 (English), one sentence per request, from 1, 8, 32 and 128 concurrent
clients (each level bounded by --max-seconds; the script stops by itself), once per
--hogs count: with that many busy-loop processes running beside the server (a shared
machine). Prints one JSON line per level: sentences/s, target tokens/s, p50/p95/p99
latency, errors, the server's CPU seconds (user + system) per answered sentence, and its
peak RSS (both with any child processes'); before that, in the same run, the offline throughput of the same
sentences through the Translator with the same settings (what `nmt translate` does), and
each sentence's latency decoded alone (batch of one), for the one-client comparison.
With --paired N, the server's added latency is measured without the machine's drift
between the two: N sentences, each decoded alone in this process and then sent to the
idle server, one after the other (after 5 of each to warm both up).

Without --model, the model is a random one of the base shape with the vocabulary of
--vocab-from (a model file). A random model never predicts EOS, so both sides decode
with --max-len-a 1.075 --max-len-b 0: every sentence runs to round(1.075 x its source
tokens), the German/English subword ratio of newstest2014 (see translate_speed.py), then
stops. Target tokens are counted by encoding each translation with the model's
vocabulary, the same way on both sides.

    python bench/serve_load.py --vocab-from quickstart/model.pt [--sentences 1000]
        [--clients 1,8,32,128] [--beam 4] [--max-seconds 120] [--hogs 0,2] [--no-guard]
    python bench/serve_load.py --model imported-random.pt --ratio-lengths ...
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import (load_for_inference, model_payload, read_model_file,
                                        save_model_file)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "wmt14"
LENGTH_RATIO = 1.075


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def random_base_model(vocab_from: Path, out: Path) -> Path:
    """A random base-shape model file with the vocabulary of the model at `vocab_from`."""
    payload = read_model_file(vocab_from)
    torch.manual_seed(0)
    model = Transformer(get_preset("base").model, payload["vocab_size"])
    save_model_file(model_payload(model, payload["vocab"]), out)
    return out


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def offline(model: Path, lines: list[str], decode: DecodeConfig) -> tuple[dict, list[str]]:
    """Throughput of the whole list through the Translator, as `nmt translate` runs it."""
    translator = Translator(load_for_inference(model), TranslatorOptions(decode))
    started, cpu_before = time.perf_counter(), process_cpu_seconds()
    outputs = list(translator.translate(lines))
    seconds, cpu = time.perf_counter() - started, process_cpu_seconds() - cpu_before
    return {"sentences_per_s": len(lines) / seconds, "seconds": seconds,
            "cpu_s_per_sentence": cpu / len(lines)}, outputs


def process_cpu_seconds() -> float:
    """User + system CPU seconds of this process (all its threads) so far."""
    times = os.times()
    return times.user + times.system


def alone_translator(model: Path, decode: DecodeConfig) -> Translator:
    """A Translator that decodes one line at a time with every core (interactive use)."""
    return Translator(load_for_inference(model),
                      TranslatorOptions(decode, buffer_size=1, workers=1))


def alone_latency(translator: Translator, line: str) -> float:
    """Milliseconds to translate `line` by itself."""
    started = time.perf_counter()
    next(translator.translate([line]))
    return (time.perf_counter() - started) * 1000


def translate_request(url: str, line: str) -> urllib.request.Request:
    """POST /v1/translate of `line` alone."""
    return urllib.request.Request(url + "/v1/translate", data=json.dumps({"text": line}).encode(),
                                  headers={"Content-Type": "application/json"})


def served_latency(url: str, line: str) -> float:
    """Milliseconds for the server to answer `line` as one request."""
    started = time.perf_counter()
    with urllib.request.urlopen(translate_request(url, line), timeout=120) as response:
        response.read()
    return (time.perf_counter() - started) * 1000


def paired_level(url: str, translator: Translator, lines: list[str]) -> None:
    """Each line decoded alone here, then answered by the idle server, back to back."""
    for line in lines[:5]:
        alone_latency(translator, line)
        served_latency(url, line)
    alone, served = [], []
    for line in lines[5:]:
        alone.append(alone_latency(translator, line))
        served.append(served_latency(url, line))
    extra = [s - a for s, a in zip(served, alone)]
    figure(case="paired", sentences=len(extra), alone_p50_ms=round(statistics.median(alone), 1),
           served_p50_ms=round(statistics.median(served), 1),
           median_extra_ms=round(statistics.median(extra), 1),
           extra_p25_p75_ms=[round(percentile(extra, 0.25), 1), round(percentile(extra, 0.75), 1)])


def process_tree(pid: int) -> list[int]:
    """`pid` and every process under it."""
    tree, index = [pid], 0
    while index < len(tree):
        try:
            with open(f"/proc/{tree[index]}/task/{tree[index]}/children", encoding="ascii") as f:
                tree += [int(child) for child in f.read().split()]
        except OSError:
            pass
        index += 1
    return tree


def server_rss_mb(pid: int) -> dict:
    """The resident memory of the server and its child processes, summed (the peak: the
    sum of each one's peak, an upper bound)."""
    totals = {"VmRSS": 0, "VmHWM": 0}
    for member in process_tree(pid):
        try:
            with open(f"/proc/{member}/status", encoding="ascii") as status:
                for line in status:
                    name, _, value = line.partition(":")
                    if name in totals:
                        totals[name] += int(value.split()[0])
        except OSError:
            pass
    return {"rss_mb": round(totals["VmRSS"] / 1024), "peak_rss_mb": round(totals["VmHWM"] / 1024)}


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the server and its child processes have used so far."""
    seconds = 0.0
    for member in process_tree(pid):
        try:
            with open(f"/proc/{member}/stat", encoding="ascii") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        seconds += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def batch_sentences(url: str) -> tuple[float, float]:
    """The server's count and sum of sentences per decoded batch or engine step so far
    (the histogram nmt_batch_sentences of /metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("nmt_batch_sentences_count", "nmt_batch_sentences_sum"):
            values[name] = float(value)
    return values.get("nmt_batch_sentences_count", 0.0), values.get("nmt_batch_sentences_sum", 0.0)


def busy_loop() -> None:
    while True:
        pass


def start_hogs(count: int) -> list[multiprocessing.Process]:
    """`count` processes that only burn CPU, as a neighbour on a shared machine would."""
    hogs = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    return hogs


def load_level(url: str, lines: list[str], clients: int, max_seconds: float,
               count_tokens) -> dict:
    """Send every line as its own request from `clients` threads; stop at max_seconds."""
    latencies, errors, tokens = {}, [], []
    lock = threading.Lock()
    remaining = iter(enumerate(lines))
    deadline = time.monotonic() + max_seconds

    def client() -> None:
        while time.monotonic() < deadline:
            with lock:
                index, line = next(remaining, (None, None))
            if line is None:
                return
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(translate_request(url, line), timeout=120) as response:
                    text = json.loads(response.read())["translations"][0]["text"]
            except Exception as error:  # noqa: BLE001 (counted, the load goes on)
                with lock:
                    errors.append(repr(error)[:120])
                continue
            with lock:
                latencies[index] = (time.perf_counter() - started) * 1000
                tokens.append(count_tokens(text))

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(client) for _ in range(clients)]:
            future.result()
    seconds = time.perf_counter() - started
    return latencies, {"clients": clients, "answered": len(latencies), "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "sentences_per_s": round(len(latencies) / seconds, 2),
            "target_tokens_per_s": round(sum(tokens) / seconds, 1),
            **{f"p{share}_ms": round(percentile(list(latencies.values()), share / 100), 1)
               if latencies else None for share in (50, 95, 99)},
            "seconds": round(seconds, 1)}


def serve_level(url: str, lines: list[str], clients: int, args: argparse.Namespace,
                count_tokens, alone: list[float], speed: dict, pid: int, hogs: int) -> None:
    """One load level against the running server, printed as one JSON line."""
    cpu_before, clients_cpu_before = server_cpu_seconds(pid), process_cpu_seconds()
    steps_before, sentences_before = batch_sentences(url)
    latencies, result = load_level(url, lines, clients, args.max_seconds, count_tokens)
    steps, sentences = (after - before for after, before
                        in zip(batch_sentences(url), (steps_before, sentences_before)))
    cpu = server_cpu_seconds(pid) - cpu_before
    clients_cpu = process_cpu_seconds() - clients_cpu_before
    if clients == 1:
        # The same sentences' latency through the server and decoded alone.
        extra = [latencies[i] - alone[i] for i in range(len(alone)) if i in latencies]
        result["median_extra_ms_vs_alone"] = round(statistics.median(extra), 1)
    answered = max(result["answered"], 1)
    figure(case="serve", beam=args.beam, hogs=hogs, **result,
           cpu_s_per_sentence=round(cpu / answered, 4),
           # The load generator runs on the same cores: what it took from the server.
           clients_cpu_s_per_sentence=round(clients_cpu / answered, 4),
           # How full the engines' steps (or the batches) were: sentences decoded at once.
           sentences_per_step=round(sentences / steps, 2) if steps else None,
           vs_offline=round(result["sentences_per_s"] / speed["sentences_per_s"], 3),
           **server_rss_mb(pid))


def wait_ready(url: str, process: subprocess.Popen) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"the server exited: {process.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/ready", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a model file (default: random base)")
    parser.add_argument("--vocab-from", type=Path, help="model whose vocabulary the random "
                        "base model uses")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=120)
    parser.add_argument("--alone", type=int, default=50,
                        help="sentences decoded alone for the one-client comparison")
    parser.add_argument("--paired", type=int, default=0,
                        help="sentences decoded alone and served alternately (0: none)")
    parser.add_argument("--port", type=int, default=18187)
    parser.add_argument("--no-guard", action="store_true",
                        help="decode without the guard on both sides (offline and served)")
    parser.add_argument("--ratio-lengths", action="store_true",
                        help="with --model: every output runs to round(1.075 x its source "
                        "tokens), as for the random base model (for a --model with random "
                        "weights, which never ends a sentence by itself)")
    parser.add_argument("--server-flag", action="append", default=[], metavar="FLAG",
                        help="a flag for `nmt serve` (repeat: --server-flag=--no-batch-invariant "
                        "measures the server without its default batch invariance)")
    parser.add_argument("--hogs", default="0",
                        help="busy-loop processes beside the server, one pass of the levels "
                        "per count (e.g. 0,2: quiet, then shared)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or random_base_model(args.vocab_from, Path(scratch) / "base.pt")
        lines = [line.strip() for line in (DATA / "newstest2014.en").read_text(
            encoding="utf-8").splitlines() if line.strip()][: args.sentences]
        by_ratio = not args.model or args.ratio_lengths
        decode = DecodeConfig(beam=args.beam, guard=not args.no_guard,
                              max_len_a=LENGTH_RATIO if by_ratio else 1,
                              max_len_b=0 if by_ratio else 50)
        vocab = load_for_inference(model).vocab
        count_tokens = lambda text: len(vocab.encode(text)) + 1  # noqa: E731 (EOS)
        translator = alone_translator(model, decode)
        alone = [alone_latency(translator, line) for line in lines[: args.alone]]
        figure(case="alone", sentences=len(alone), p50_ms=round(percentile(alone, 0.5), 1),
               mean_ms=round(statistics.mean(alone), 1))
        speed, outputs = offline(model, lines, decode)
        offline_tokens = sum(count_tokens(text) for text in outputs)
        figure(case="offline", sentences=len(lines), beam=args.beam,
               sentences_per_s=round(speed["sentences_per_s"], 2),
               target_tokens_per_s=round(offline_tokens / speed["seconds"], 1),
               cpu_s_per_sentence=round(speed["cpu_s_per_sentence"], 4))
        url = f"http://127.0.0.1:{args.port}"
        command = [sys.executable, "-m", "transformer_nmt.cli", "serve", "--model",
                   str(model), "--port", str(args.port), "--beam", str(args.beam),
                   "--max-len-a", str(decode.max_len_a), "--max-len-b", str(decode.max_len_b),
                   "--max-queue", "100000", "--timeout", "600", "--log-level", "warning",
                   *(["--no-guard"] if args.no_guard else []), *args.server_flag]
        process = subprocess.Popen(command, stderr=subprocess.PIPE)
        try:
            wait_ready(url, process)
            if args.paired:
                paired_level(url, translator, lines[: args.paired + 5])
            for hog_count in (int(h) for h in args.hogs.split(",")):
                hogs = start_hogs(hog_count)
                try:
                    for clients in (int(c) for c in args.clients.split(",")):
                        serve_level(url, lines, clients, args, count_tokens, alone, speed,
                                    process.pid, hog_count)
                finally:
                    for hog in hogs:
                        hog.terminate()
        finally:
            process.terminate()
            figure(case="shutdown", exit_status=process.wait(timeout=700))


if __name__ == "__main__":
    main()
