"""One training process per run directory, held by an OS file lock (transformer_nmt.locks).

Two trainings writing into one run directory would interleave their checkpoints and
metrics without a word; the second is refused, naming the first's PID. The holder removes
the temporaries a killed training left (a checkpoint half written: files.AtomicFile),
which no later checkpoint of another step name would.
"""

from __future__ import annotations

from pathlib import Path

from transformer_nmt.files import remove_leftover_temporaries
from transformer_nmt.locks import LOCK_FILE, DirectoryLock

__all__ = ["LOCK_FILE", "RunLock"]


class RunLock(DirectoryLock):
    """The exclusive right to write into a run directory, for the life of the object
    (or of the `with` block); `release` gives it up early."""

    def __init__(self, run_dir: str | Path) -> None:
        super().__init__(run_dir, "trained", "train into another run directory")
        remove_leftover_temporaries(run_dir)
