"""One writing process per directory, held by an OS file lock.

Two processes writing into one directory (two trainings into one run directory, two
preparations into one data directory) would interleave their files without a word, or
take each other's work for an interrupted run's leftovers. The lock is `fcntl.flock` on
DIR/.lock: the kernel releases it when its process ends in any way, `kill -9` included, so
a crash never leaves a stale lock behind. The file holds the holder's PID, so that a
refused second process can say who holds the directory. The file stays when the lock is
released (but in a directory the lock made and nothing else was written into): deleting
it would let a process that opened it just before lock a file no one else can find.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from transformer_nmt.errors import UserError

LOCK_FILE = ".lock"


class DirectoryLock:
    """The exclusive right to write into `directory` (made if missing), for the life of
    the object (or of the `with` block); `release` gives it up early.

    A second holder is refused with a UserError: "DIRECTORY is being `doing` by another
    process (PID n); wait for it to finish or stop it, or `elsewhere`".
    """

    def __init__(self, directory: str | Path, doing: str, elsewhere: str) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._made_dir = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self._fd)
            raise UserError(f"{self.path.parent} is being {doing} by another process (PID "
                            f"{holder}); wait for it to finish or stop it, or "
                            f"{elsewhere}") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)

    def release(self) -> None:
        """Give the directory up (closing the descriptor drops the lock). A directory the
        lock itself created and nothing else was written into goes again, so that a
        refused or failed run leaves nothing behind."""
        if self._fd < 0:
            return
        if self._made_dir and [p.name for p in self.path.parent.iterdir()] == [LOCK_FILE]:
            self.path.unlink()
            self.path.parent.rmdir()
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> "DirectoryLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
