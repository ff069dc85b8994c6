"""Shared helpers of the server's tests: a model file that records its languages, an app
built in-process, a batcher started for a test's body, and a real `nmt serve` process on
a free port."""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from decode_fixtures import SHORT
from transformer_nmt.decode.text.translator import TranslatorOptions
from transformer_nmt.model_file import read_model_file, save_model_file
from transformer_nmt.serve.server import build_app
from transformer_nmt.serve.settings import ServeSettings

FAST = TranslatorOptions(SHORT, engine="torch", workers=1, precision="fp32")
"""Beam 2, short outputs, one worker, the PyTorch search: quick searches that still use
the beam, and on the random test models the same whatever the batching (CTranslate2's
server path has tests of its own)."""


def with_languages(model_file: Path, directory: Path, source: str = "en",
                   target: str = "de") -> Path:
    """A copy of `model_file` that records it translates `source` to `target`."""
    payload = read_model_file(model_file)
    payload["src_lang"], payload["tgt_lang"] = source, target
    path = directory / "model.pt"
    save_model_file(payload, path)
    return path


def make_app(model_file: Path, **settings):
    """The server app of `model_file` with FAST decoding and these ServeSettings fields."""
    return build_app(model_file, FAST, ServeSettings(**settings))


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def url_of(port: int) -> str:
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def running_server(model_file: Path, *arguments: str, env: dict[str, str] | None = None,
                   stderr: Path | None = None, open_files: int | None = None,
                   ) -> Iterator[tuple[str, subprocess.Popen]]:
    """(base URL, process) of `nmt serve` on a free port, ready; stopped afterwards. Its
    stderr goes to the file `stderr` if given (a pipe otherwise), and it may hold at most
    `open_files` file descriptors if given. In fp32, as FAST decodes, so that answers
    compare exactly on every CPU class."""
    port = free_port()
    command = [sys.executable, "-m", "transformer_nmt.cli", "serve", "--model",
               str(model_file), "--port", str(port), "--beam", "2", "--max-len-b", "6",
               "--workers", "1", "--precision", "fp32", "--log-level", "warning",
               *arguments]
    limit = None if open_files is None else functools.partial(
        resource.setrlimit, resource.RLIMIT_NOFILE,
        (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    with contextlib.ExitStack() as files:
        errors = subprocess.PIPE if stderr is None else files.enter_context(stderr.open("wb"))
        process = subprocess.Popen(command, env={**os.environ, **(env or {})},
                                   stdout=subprocess.PIPE, stderr=errors, preexec_fn=limit)
    try:
        wait_until_ready(url_of(port), process)
        yield url_of(port), process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()


def wait_until_ready(url: str, process: subprocess.Popen, seconds: float = 60) -> None:
    """Return once GET /ready answers 200; AssertionError if the process died first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr and process.stderr.read().decode()
        try:
            with urllib.request.urlopen(url + "/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} was not ready within {seconds} s")


async def with_batcher(translator, body, **settings):
    """Run `body(batcher)` with a started Batcher of `translator` and these settings
    (defaults: a 50 ms wait for company), stopped afterwards: (its result, the metrics)."""
    from transformer_nmt.serve.batcher import Batcher
    from transformer_nmt.serve.metrics import ServerMetrics

    metrics = ServerMetrics()
    fields = {"max_batch_tokens": 4096, "max_wait_s": 0.05, "max_queue": 1000, **settings}
    batcher = Batcher(translator, metrics, **fields)
    batcher.start()
    try:
        return await body(batcher), metrics
    finally:
        await batcher.stop()


def tokens_of(translator, lines):
    """The subword tokens of each of `lines`, as the server counts them for its budget."""
    return [len(translator.vocab.encode(line)) for line in lines]


class Clock:
    """A clock that moves only when told: expiries without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
