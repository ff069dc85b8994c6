"""Translated files waiting to be downloaded: kept in a temporary directory the server
owns, each under a random id of its own (never a name a client chose), given out once and
then deleted, and deleted unfetched after a time limit."""

from __future__ import annotations

import re
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 100
"""Characters of a client's file name kept in its download's name."""
ID_LENGTH = 32
"""Hex digits of a download's id: 128 random bits, not guessable."""


class StoreFull(Exception):
    """More translated files wait for download than the server keeps."""


def safe_name(name: str | None, kind: str) -> str:
    """A client's file name reduced to its last component in letters, digits, dots,
    dashes and underscores (so that it is safe in a URL and a Content-Disposition), with
    the extension of its type; 'document.KIND' when nothing is left."""
    base = PurePosixPath((name or "").replace("\\", "/")).name
    stem = SAFE_NAME.sub("_", PurePosixPath(base).stem).strip("._")[:MAX_NAME]
    return f"{stem or 'document'}.{kind}"


@dataclass
class _Stored:
    name: str
    path: Path
    expires: float


class FileStore:
    """Translated files by download id, in a temporary directory removed with the store
    (and, failing that, when the process exits)."""

    def __init__(self, keep_s: float = 1800.0, max_files: int = 1000) -> None:
        self.keep_s = keep_s
        self.max_files = max_files
        self._directory = tempfile.TemporaryDirectory(prefix="nmt-serve-files-")
        self._files: dict[str, _Stored] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes, name: str) -> str:
        """Keep `data` for download as `name`; the path to ask for it: 'ID-NAME'."""
        self.remove_expired()
        with self._lock:
            if len(self._files) >= self.max_files:
                raise StoreFull(f"{len(self._files)} translated files wait for download, "
                                "the most this server keeps; retry in a few minutes")
            download_id = secrets.token_hex(ID_LENGTH // 2)
            path = Path(self.directory) / download_id
            path.write_bytes(data)
            self._files[download_id] = _Stored(name, path, time.monotonic() + self.keep_s)
        return f"{download_id}-{name}"

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
        now = time.monotonic()
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
