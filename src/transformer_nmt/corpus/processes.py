"""Worker processes of a pool, as translate-corpus's local backend starts them: how one
begins (Ctrl-C left to the parent, its share of the cores) and how it ends with its parent
however the parent died; and ending a pool's processes at once.

Processes are spawned, not forked (OpenMP is not safe across a fork once used), and each
loads the model itself.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from transformer_nmt.decode.device.threads import use_cores

PARENT_POLL_S = 1.0
"""How often a worker process looks whether its parent still lives."""


def enter_worker_process(cores: int) -> None:
    """Begin a worker process of a pool that decodes on `cores` cores: Ctrl-C, which
    reaches the whole process group, is left to the parent, which stops the workers; and
    the worker ends with its parent (`end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()
    use_cores(cores)


def end_with_parent() -> None:
    """End this process within about PARENT_POLL_S of its parent's death, however the
    parent died (SIGKILL, the OOM killer), rather than live on re-parented, holding a
    model in memory. A daemon thread watches the parent's PID: Linux's parent-death
    signal would fire when the parent's thread that spawned this process ends, which for
    a pool may be any thread, not the process."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # nothing to clean up that the parent still waits for

    threading.Thread(target=watch, name="nmt-parent-watch", daemon=True).start()


def terminate_processes(pool: ProcessPoolExecutor) -> None:
    """End `pool`'s worker processes now (an interrupt, an error), whatever they do."""
    for process in list((pool._processes or {}).values()):  # no public handle on them
        process.terminate()
