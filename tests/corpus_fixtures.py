"""Shared helper of the tests of a dead corpus worker: a worker process (or Ray actor)
killed from the outside while it translates a shard, as the OS's out-of-memory killer
would kill it, with nothing in the library to help.

A shard's translations are written to a temporary named `.NNNNNN.txt.PID.RANDOM.tmp` in
DIR/.shards (transformer_nmt.files.TEMPORARY), which exists from the shard's start to its
end: the PID in its name is the process translating it. The worker is stopped (SIGSTOP)
before it is checked, so that it cannot finish the shard between the check and the kill.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from transformer_nmt.corpus.shards import SHARDS
from transformer_nmt.files import TEMPORARY


def _translating(shards: Path) -> set[int]:
    """The PIDs of the processes, other than this one, writing a shard's translations."""
    try:
        names = [entry.name for entry in os.scandir(shards)]
    except FileNotFoundError:
        return set()
    found = (TEMPORARY.fullmatch(name) for name in names)
    return {int(match["pid"]) for match in found
            if match and match["target"].endswith(".txt") and int(match["pid"]) != os.getpid()}


def _kill_one_mid_shard(shards: Path, killed: list[int], stop: threading.Event) -> None:
    while not stop.is_set() and not killed:
        for pid in _translating(shards):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue  # ended meanwhile
            if pid in _translating(shards):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            os.kill(pid, signal.SIGCONT)  # between two shards: let it go on
        stop.wait(0.001)


@contextmanager
def killing_a_worker_mid_shard(out: Path) -> Iterator[list[int]]:
    """Kill (SIGKILL) the first process seen translating a shard into `out`, once, while
    the body runs; yields the list that then holds its PID."""
    killed: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_kill_one_mid_shard, args=(out / SHARDS, killed, stop),
                               daemon=True)
    watcher.start()
    try:
        yield killed
    finally:
        stop.set()
        watcher.join()
