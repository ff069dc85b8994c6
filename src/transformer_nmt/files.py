"""File plumbing every room uses: atomic writes, durable renames, and format tags.

Everything this project writes appears by a rename of a complete, fsynced temporary file,
so that a crash at any moment leaves the old file or the new one, never a torn one.
Every JSON or model file it writes carries a format name and a version, checked on
reading by `check_format`, so that a foreign or outdated file is refused in one line.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

from transformer_nmt.errors import UserError


def fsync_dir(path: str | Path) -> None:
    """Make renames inside directory `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's file mode creation mask (reading it means setting it: put it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class AllOrNothing:
    """A writer with `close()` (put the complete file in place) and `abort()` (delete
    what was written, leave the target as it was): as a context manager it closes on
    success and aborts on any exception, so that nested writers all go or all stay."""

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


class AtomicFile(AllOrNothing):
    """A file written under a temporary name in its directory and put in place whole.

    `handle` takes the bytes; `close()` flushes and fsyncs it, renames it over `path` and
    fsyncs the directory, so that the rename survives a crash too; `abort()` deletes it
    and leaves the old `path`, if any, as it was. As a context manager (see
    `AllOrNothing`) it closes on success and aborts on any exception. A full disk is a
    UserError naming the file.

    buffer_size: the handle's buffer in bytes (-1: Python's default).
    """

    def __init__(self, path: str | Path, buffer_size: int = -1) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp",
                                    dir=self.path.parent)
        self._temporary = Path(name)
        # mkstemp makes the file private (0600); what we write gets the permissions of
        # any file the user creates, so that a group sharing a directory can read it.
        os.fchmod(fd, 0o666 & ~_umask())
        self.handle: BinaryIO = os.fdopen(fd, "wb", buffering=buffer_size)

    def close(self) -> None:
        """Put the complete file in place, durably."""
        try:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            os.replace(self._temporary, self.path)
        except BaseException as error:
            self.abort()
            _raise_full_disk(error, self.path)
            raise
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Delete what was written; the old file, if any, stays."""
        try:
            self.handle.close()
        except OSError:
            pass  # a failed flush of data that is being thrown away
        self._temporary.unlink(missing_ok=True)

    def __exit__(self, kind, value, traceback) -> None:
        super().__exit__(kind, value, traceback)
        _raise_full_disk(value, self.path)


def remove_leftover_temporaries(directory: str | Path) -> None:
    """Delete the temporary files that an AtomicFile in `directory` leaves behind when its
    process is killed mid-write (a clean exit or an exception removes its own)."""
    for path in Path(directory).glob(".*.tmp"):
        if path.is_file():
            path.unlink(missing_ok=True)


def _raise_full_disk(error: BaseException | None, path: Path) -> None:
    """A one-line UserError in place of `error` if it says `path`'s disk is full."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        free = shutil.disk_usage(path.parent).free
        raise UserError(f"{path}: no space left on its disk ({free / 2**20:.0f} MiB free); "
                        "the previous file, if any, is kept; free some space and "
                        "run the command again") from None


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write` on the handle of an `AtomicFile` for `path` and put it in place: on
    any failure the temporary file is removed and the old `path`, if any, is kept."""
    with AtomicFile(path) as file:
        write(file.handle)


def write_json_atomic(path: str | Path, value: Any) -> None:
    """Write `value` as indented UTF-8 JSON to `path` atomically (see `atomic_write`)."""
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_link(source: Path, target: Path) -> None:
    """Make `target` the same file as `source` (a hard link, or a copy where links are not
    supported), replacing any old `target` atomically."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    fsync_dir(target.parent)


def check_format(record: Any, path: str | Path, name: str, version: int, *,
                 name_key: str | None = "format", version_key: str = "version",
                 remedy: str) -> None:
    """UserError unless `record` (read from `path`) is a dict tagged with format `name`
    (under `name_key`; None: no name is stored) and `version` (under `version_key`).

    remedy: what the user should do with a foreign or outdated file, said in the error.
    """
    if not isinstance(record, dict) or (name_key is not None and record.get(name_key) != name):
        raise UserError(f"{path}: not a {name} file; {remedy}")
    found = record.get(version_key)
    if found != version:
        raise UserError(f"{path}: {name} version {found} is not supported by this release "
                        f"(it reads version {version}); {remedy}")
