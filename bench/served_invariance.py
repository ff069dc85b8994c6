"""Whether `nmt serve` gives a sentence the same translation when it arrives alone and when
it arrives with others (issue 51's fourth goal, through the server as users meet it).

Starts `nmt serve` on loopback with the model file in --precision (plus any
--server-flag), sends --sentences lines of --source one request at a time (each alone in
the server), then all of them at once from as many clients (released together), twice,
in two orders. Prints one JSON line: how many sentences got another text, or another
score (the API's, rounded to 4 decimals), at once than alone.

    python bench/served_invariance.py --model quickstart/model.pt --source test.en
        [--precision bf16] [--sentences 40] [--server-flag=--no-batch-invariant]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from serve_load import wait_ready


def translate(url: str, line: str) -> tuple[str, tuple[float, ...]]:
    """The server's best translation of `line` and its sentences' scores."""
    request = urllib.request.Request(url + "/v1/translate",
                                     data=json.dumps({"text": line}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())
    (result,) = answer["translations"]
    return result["text"], tuple(sentence["score"] for sentence in result["sentences"])


def at_once(url: str, lines: list[str], order: list[int]
            ) -> dict[int, tuple[str, tuple[float, ...]]]:
    """Every line sent at the same moment, one client each, started in `order`."""
    found: dict[int, tuple[str, tuple[float, ...]]] = {}
    start = threading.Barrier(len(order))

    def client(index: int) -> None:
        start.wait()
        found[index] = translate(url, lines[index])

    threads = [threading.Thread(target=client, args=(index,)) for index in order]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--server-flag", action="append", default=[], metavar="FLAG")
    parser.add_argument("--port", type=int, default=18191)
    args = parser.parse_args()
    lines = args.source.read_text(encoding="utf-8").splitlines()[: args.sentences]
    url = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "transformer_nmt.cli", "serve", "--model", str(args.model),
         "--port", str(args.port), "--precision", args.precision, "--log-level", "warning",
         *args.server_flag], stderr=subprocess.PIPE)  # as serve_load.py: warnings only
    try:
        wait_ready(url, server)
        alone = {index: translate(url, line) for index, line in enumerate(lines)}
        order = list(range(len(lines)))
        together = [at_once(url, lines, order)]
        random.Random(0).shuffle(order)
        together.append(at_once(url, lines, order))
    finally:
        server.terminate()
        server.wait(timeout=60)
    texts = sum(any(run[i][0] != alone[i][0] for run in together) for i in alone)
    scores = sum(any(run[i] != alone[i] for run in together) for i in alone)
    print(json.dumps(dict(figure="served_invariance", precision=args.precision,
                          flags=args.server_flag, sentences=len(lines),
                          other_text_at_once=texts, other_text_or_score_at_once=scores)),
          flush=True)


if __name__ == "__main__":
    main()
