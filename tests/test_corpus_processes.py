"""Worker processes (corpus/processes.py): a pool's workers end with a parent killed
outright, as the OOM killer or `kill -9 PID` does."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

PARENT = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from transformer_nmt.corpus.processes import enter_worker_process

if __name__ == "__main__":
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                               initializer=enter_worker_process, initargs=(1,))
    pids = {pool.submit(os.getpid).result() for _ in range(8)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie waiting to be reaped,
    re-parented where nobody reaps, has)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_with_a_parent_killed_outright(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT, encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert workers and all(_running(pid) for pid in workers)
    finally:
        parent.kill()  # SIGKILL to the parent alone, as the OOM killer sends it
        parent.wait()
    deadline = time.monotonic() + 60  # generous: they look every second
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in workers)
