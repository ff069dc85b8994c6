"""File plumbing every room uses: atomic writes, durable renames, and format tags.

Everything this project writes appears by a rename of a complete, fsynced temporary file
(or directory), so that a crash at any moment leaves the old file or the new one, never a
torn one. A temporary is named `.TARGET.PID.RANDOM.tmp` beside its target and locked
(flock) by its process while it lives: a killed process's temporaries are recognised by
their name and their free lock, and the next writer of the same target removes them
(`remove_leftover_temporaries`), never a running process's. What is written gets the
permissions of any file the user creates (0666, or 0777 for a directory, less the umask).
Every JSON or model file it writes carries a format name and a version, checked on
reading by `check_format`, so that a foreign or outdated file is refused in one line.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from transformer_nmt.errors import UserError

TEMPORARY = re.compile(r"\.(?P<target>.+)\.(?P<pid>[0-9]+)\.[a-z0-9_]+\.tmp")
"""The name of a temporary: `.TARGET.PID.RANDOM.tmp` (RANDOM as tempfile makes them)."""


def fsync_dir(path: str | Path) -> None:
    """Make renames inside directory `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def usual_mode(directory: bool = False) -> int:
    """The permissions of a file (or directory) the user creates: 0o666 (0o777) less the
    process's umask, which reading means setting (it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def give_usual_permissions(tree: str | Path) -> None:
    """Give `tree` and everything under it the permissions of `usual_mode`: for what other
    libraries write (safetensors writes its files private, 0600), before it is put in
    place. Symbolic links are left alone."""
    tree = Path(tree)
    paths = [tree, *tree.rglob("*")] if tree.is_dir() else [tree]
    for path in paths:
        if not path.is_symlink():
            os.chmod(path, usual_mode(directory=path.is_dir()))


def _temporary_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


def _still_there_once_locked(fd: int) -> bool:
    """Lock the new temporary open as `fd`; False if a cleaner took it for a dead
    process's in the instant between its creation and the lock, and removed it."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    return os.fstat(fd).st_nlink > 0


def _new_temporary_file(target: Path) -> tuple[int, Path]:
    """A new, locked temporary file for `target`, with the usual permissions: (fd, path)."""
    while True:
        fd, name = tempfile.mkstemp(prefix=_temporary_prefix(target), suffix=".tmp",
                                    dir=target.parent)
        if _still_there_once_locked(fd):
            # mkstemp makes the file private (0600); it gets a user's file's permissions.
            os.fchmod(fd, usual_mode())
            return fd, Path(name)
        os.close(fd)


@contextmanager
def temporary_directory(target: str | Path, needs_bytes: int | None = None
                        ) -> Iterator[Path]:
    """A new, empty directory beside `target` to build it in, named as its temporary and
    locked while the body runs, with the usual permissions; deleted at the end unless the
    body has renamed it (into place). A killed process's earlier ones for `target` are
    removed first. A full disk is a UserError naming `target` and, where the caller
    knows it, about how many bytes it needs (`needs_bytes`)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftover_temporaries(target.parent, target.name)
    while True:
        path = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), suffix=".tmp",
                                     dir=target.parent))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        if _still_there_once_locked(fd):
            break
        os.close(fd)
    try:
        os.chmod(path, usual_mode(directory=True))
        yield path
    except Exception as error:
        shutil.rmtree(path, ignore_errors=True)  # before the free space is measured
        _raise_full_disk(error, target, needs_bytes)
        raise
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


@contextmanager
def set_aside(path: Path) -> Iterator[Path]:
    """`path` renamed to a temporary name beside it for the body (which puts something
    else at `path`), then deleted; renamed back if the body fails. Locked meanwhile, so
    that a killed process's is a leftover that `remove_leftover_temporaries` removes."""
    aside = path.with_name(f"{_temporary_prefix(path)}{secrets.token_hex(4)}.tmp")
    fd = -1
    if not path.is_symlink():
        try:
            fd = os.open(path, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # an unreadable file: it is set aside unlocked
    try:
        os.replace(path, aside)
        try:
            yield aside
        except BaseException:
            os.replace(aside, path)
            raise
        _remove(aside)
    finally:
        if fd >= 0:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def remove_leftover_temporaries(directory: str | Path, target: str | None = None) -> None:
    """Delete the temporaries for `target` (a name in `directory`; None: for any) that a
    killed process left in `directory`: files of an `AtomicFile`, directories of
    `temporary_directory`, things `set_aside`. A clean exit or an exception removes its
    own; a running process's are locked by it and stay."""
    pattern = f".{glob.escape(target)}.*.tmp" if target is not None else ".*.tmp"
    for path in Path(directory).glob(pattern):
        name = TEMPORARY.fullmatch(path.name)
        if name and target in (None, name["target"]):
            _remove_if_unlocked(path)


def _remove_if_unlocked(path: Path) -> None:
    """Delete the temporary `path` unless a living process holds its lock."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return  # removed meanwhile, or not ours to read
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _remove(path)
    except OSError:
        pass  # locked by its running process, or not ours to remove
    finally:
        os.close(fd)


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
        remove_leftover_temporaries(self.path.parent, self.path.name)
        fd, self._temporary = _new_temporary_file(self.path)
        self.handle: BinaryIO = os.fdopen(fd, "wb", buffering=buffer_size)

    def close(self) -> None:
        """Put the complete file in place, durably."""
        try:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            # Renamed while open, so locked until it no longer has a temporary's name.
            os.replace(self._temporary, self.path)
            self.handle.close()
        except BaseException as error:
            self.abort()
            _raise_full_disk(error, self.path)
            raise
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Delete what was written; the old file, if any, stays."""
        self._temporary.unlink(missing_ok=True)
        try:
            self.handle.close()
        except OSError:
            pass  # a failed flush of data that is being thrown away

    def __exit__(self, kind, value, traceback) -> None:
        super().__exit__(kind, value, traceback)
        _raise_full_disk(value, self.path)


FULL_DISK = os.strerror(errno.ENOSPC)
"""What the OS says of a full disk, also inside the messages of libraries that wrap the
error in their own (safetensors' SafetensorError, CTranslate2's RuntimeError)."""


def _raise_full_disk(error: BaseException | None, path: Path,
                     needs_bytes: int | None = None) -> None:
    """A one-line UserError in place of `error` if it says `path`'s disk is full, with
    how much is free there and, if given, about how much `path` needs."""
    if error is None or not (getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
                             or FULL_DISK in str(error)):
        return
    free = shutil.disk_usage(path.parent).free
    needs = "" if needs_bytes is None else f", about {needs_bytes / 2**20:.0f} MiB needed"
    raise UserError(f"{path}: no space left on its disk ({free / 2**20:.0f} MiB free{needs}); "
                    "the previous file, if any, is kept; free some space and run the "
                    "command again") from None


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


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
    remove_leftover_temporaries(target.parent, target.name)
    tmp = target.with_name(f"{_temporary_prefix(target)}link.tmp")
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
