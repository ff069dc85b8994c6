"""Translated files waiting to be downloaded: kept in a temporary directory the server
owns, each under a random id of its own (never a name a client chose), given out once and
then deleted, and deleted unfetched after a time limit.

The store is bounded in files and bytes, in all and for each client, so that one client
cannot fill it for everyone; a refusal says when the first file that would make room
expires. Its directory holds a lock (`locks`) for the life of the server, so that a
server killed without cleaning up (SIGKILL, a crash) leaves a directory no live server
holds, which the next store opened removes.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable

from transformer_nmt.errors import UserError
from transformer_nmt.locks import LOCK_FILE, DirectoryLock

logger = logging.getLogger(__name__)

SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 100
"""Characters of a client's file name kept in its download's name."""
ID_LENGTH = 32
"""Hex digits of a download's id: 128 random bits, not guessable."""
DIRECTORY_PREFIX = "nmt-serve-files-"
"""How the name of a store's directory begins, in the system's temporary directory: only
directories named so, and holding a lock no process holds, are removed as left behind."""
IPV6_CLIENT_PREFIX = 64
"""Bits of an IPv6 address that name one client: a host is given a /64 network, and
could otherwise count as 2**64 clients."""


class StoreFull(Exception):
    """The store keeps no more files now, or no more from this client."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """Whole seconds until the first file whose going makes room expires (sooner if
        files are downloaded)."""


def safe_name(name: str | None, kind: str) -> str:
    """A client's file name reduced to its last component in letters, digits, dots,
    dashes and underscores (so that it is safe in a URL and a Content-Disposition), with
    the extension of its type; 'document.KIND' when nothing is left."""
    base = PurePosixPath((name or "").replace("\\", "/")).name
    stem = SAFE_NAME.sub("_", PurePosixPath(base).stem).strip("._")[:MAX_NAME]
    return f"{stem or 'document'}.{kind}"


def client_key(host: str | None) -> str:
    """Who a request comes from, for the store's bounds per client: its IPv4 address, the
    /64 network of its IPv6 address, or the host as given (a Unix socket's, a test's)."""
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return host or ""
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False))


@dataclass
class _Stored:
    name: str
    path: Path
    expires: float
    client: str
    size: int


@dataclass(frozen=True)
class _Bound:
    """At most `files` files and `size` bytes (beyond one file, however large)."""

    files: int
    size: int
    whose: str
    """Whose files it counts, as a refusal says: '' for all, ' from your address'."""

    def fits(self, sizes: list[int], size: int) -> bool:
        return len(sizes) < self.files and (not sizes or sum(sizes) + size <= self.size)


class FileStore:
    """Translated files by download id, in a temporary directory removed with the store
    (and, failing that, when the process exits, or by the next store opened after a
    crash), at most `max_files` files and `max_bytes` bytes in all and `client_files` and
    `client_bytes` from one client; `clock` says the time in seconds."""

    def __init__(self, keep_s: float = 1800.0, max_files: int = 1000,
                 max_bytes: int = 1 << 30, client_files: int = 100,
                 client_bytes: int = 128 << 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_s = keep_s
        self.bounds = (_Bound(client_files, client_bytes, " from your address"),
                       _Bound(max_files, max_bytes, ""))
        self._clock = clock
        for left in remove_abandoned(Path(tempfile.gettempdir())):
            logger.info("removed %s, which a server killed before it could clean up left "
                        "behind", left)
        self._directory = tempfile.TemporaryDirectory(prefix=DIRECTORY_PREFIX)
        self._owner = DirectoryLock(self._directory.name, "used by a server's file store",
                                    "start the server again")
        self._files: dict[str, _Stored] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes, name: str, client: str = "") -> str:
        """Keep `data` for download as `name`; the path to ask for it: 'ID-NAME'.
        StoreFull when the store, or `client`'s share of it, has no room for it."""
        self.remove_expired()
        with self._lock:
            self._check_room(client, len(data))
            download_id = secrets.token_hex(ID_LENGTH // 2)
            path = Path(self.directory) / download_id
            path.write_bytes(data)
            self._files[download_id] = _Stored(name, path, self._clock() + self.keep_s,
                                               client, len(data))
        return f"{download_id}-{name}"

    def check_room(self, client: str = "") -> None:
        """StoreFull if no file from `client` could be kept now: said before the work of
        translating one, rather than after."""
        self.remove_expired()
        with self._lock:
            self._check_room(client, 0)

    def _check_room(self, client: str, size: int) -> None:
        for bound in self.bounds:
            counted = [stored for stored in self._files.values()
                       if not bound.whose or stored.client == client]
            if not bound.fits([stored.size for stored in counted], size):
                wait = self._wait(bound, counted, size)
                raise StoreFull(_full(bound, counted, size, wait), wait)

    def _wait(self, bound: _Bound, counted: list[_Stored], size: int) -> int:
        """Whole seconds until enough of `counted` expire for a file of `size` to fit."""
        left = sorted(counted, key=lambda stored: stored.expires)
        expires = self._clock()
        while left and not bound.fits([stored.size for stored in left], size):
            expires = left.pop(0).expires
        return max(1, math.ceil(expires - self._clock()))

    def take(self, download: str) -> tuple[str, bytes] | None:
        """(name, content) of the file at 'ID-NAME', deleted from the store; None for an
        id that is unknown, taken already or expired, or a name that is not its own."""
        self.remove_expired()
        download_id, _, name = download.partition("-")
        with self._lock:
            stored = self._files.get(download_id)
            if stored is None or stored.name != name:
                return None
            del self._files[download_id]
        try:
            return stored.name, stored.path.read_bytes()
        finally:
            stored.path.unlink(missing_ok=True)

    def remove_expired(self) -> None:
        """Delete the files whose time is up."""
        now = self._clock()
        with self._lock:
            expired = [key for key, stored in self._files.items() if stored.expires <= now]
            gone = [self._files.pop(key) for key in expired]
        for stored in gone:
            stored.path.unlink(missing_ok=True)

    @property
    def directory(self) -> str:
        """Where the files wait: a directory of this store's own."""
        return self._directory.name

    def __len__(self) -> int:
        return len(self._files)

    def close(self) -> None:
        """Delete every file and the directory."""
        with self._lock:
            self._files.clear()
        self._directory.cleanup()
        self._owner.release()


def _full(bound: _Bound, counted: list[_Stored], size: int, wait: int) -> str:
    """Why a file of `size` bytes is refused by `bound`, and when to retry."""
    one_client = " for one client" if bound.whose else ""
    if len(counted) >= bound.files:
        why = (f"{len(counted)} translated files{bound.whose} wait for download, the most "
               f"the server keeps{one_client}")
    else:
        why = (f"translated files of {sum(stored.size for stored in counted)} bytes"
               f"{bound.whose} wait for download, and the server keeps {bound.size}"
               f"{one_client}" + (f" (this one has {size})" if size else ""))
    download = "download them or " if bound.whose else ""
    return f"{why}; {download}retry in {wait} s, once enough of them have expired"


def remove_abandoned(root: Path) -> list[Path]:
    """Remove the stores' directories in `root` that their servers left behind: named
    with DIRECTORY_PREFIX, this user's, and holding a lock that some store took (it holds
    a PID) and no process holds now. A directory whose lock is not written yet is one a
    store is making: it is left, as is anything else. The directories removed."""
    removed = []
    for directory in _candidates(root.iterdir() if root.is_dir() else ()):
        try:
            if not (directory / LOCK_FILE).read_bytes().strip():
                continue
            # Taken, the lock proves its holder gone; given up at once, since no store
            # ever takes a directory it did not make.
            DirectoryLock(directory, "used by a server's file store", "").release()
        except (OSError, UserError):  # gone meanwhile, or its server is alive
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def _candidates(entries: Iterable[Path]) -> Iterable[Path]:
    """The entries that are directories (not links to one) this user made, named as a
    store's are."""
    for entry in entries:
        if not entry.name.startswith(DIRECTORY_PREFIX):
            continue
        try:
            status = entry.lstat()  # the entry's own, a link's not followed
        except OSError:
            continue
        if stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid():
            yield entry
