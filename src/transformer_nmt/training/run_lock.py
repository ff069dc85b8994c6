"""One training process per run directory, held by an OS file lock.

Two trainings writing into one run directory would interleave their checkpoints and
metrics without a word. The lock is `fcntl.flock` on RUN_DIR/.lock: the kernel releases
it when its process ends in any way, `kill -9` included, so a crash never leaves a stale
lock behind. The file holds the holder's PID, so that a refused second process can say
who holds the directory.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from transformer_nmt.errors import UserError

LOCK_FILE = ".lock"


class RunLock:
    """The exclusive right to write into a run directory, for the life of the object
    (or of the `with` block); `release` gives it up early."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._made_dir = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self._fd)
            raise UserError(f"{self.path.parent} is being trained by another process (PID "
                            f"{holder}); wait for it to finish or stop it, or train into "
                            "another run directory") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)

    def release(self) -> None:
        """Give the directory up (closing the descriptor drops the lock). A directory the
        lock itself created and nothing else was written into goes again, so that a
        refused run leaves nothing behind."""
        if self._fd < 0:
            return
        if self._made_dir and [p.name for p in self.path.parent.iterdir()] == [LOCK_FILE]:
            self.path.unlink()
            self.path.parent.rmdir()
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
