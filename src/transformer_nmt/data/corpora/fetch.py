"""The files of a corpus that lives on the web, from wherever the user has them.

A recipe names a file by its path below the corpus's home (`data/task1/raw/val.en.gz`,
`wmt14/dev.tgz`); `fetch` turns that into a local file. The corpus is read from the
`mirror` option, else from the recipe's environment variable, else from its real home URL;
a mirror that is a local directory is read in place, and a URL (a mirror's or the home's)
is downloaded once into the cache.
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from transformer_nmt.data.corpora.base import SourceOptions
from transformer_nmt.errors import UserError
from transformer_nmt.files import AtomicFile


@dataclass(frozen=True)
class Remote:
    """Where a downloadable corpus lives and how to speak of it."""

    url: str
    """Its real home; the paths `fetch` is given are relative to it."""
    env: str
    """The environment variable that may name a mirror (a directory or a URL) instead."""
    cache_name: str
    """Its folder in the download cache."""
    hint: str
    """What to tell the user when a download fails."""


def is_url(location: str) -> bool:
    """Whether `location` has a scheme (https://, file://, ...) rather than being a path."""
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location) is not None


def default_cache_dir() -> Path:
    """~/.cache/transformer-nmt (or $XDG_CACHE_HOME/transformer-nmt)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer-nmt"


def download(url: str, target: Path, hint: str) -> Path:
    """Fetch `url` to `target` unless it is already there (written via a temporary file,
    so an interrupted download is never taken for a finished one)."""
    if target.is_file():
        return target
    try:
        with urllib.request.urlopen(url, timeout=60) as response, AtomicFile(target) as out:
            shutil.copyfileobj(response, out.handle, 1 << 20)
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise UserError(f"cannot download {url}: {reason}; {hint}") from None
    return target


def location(options: SourceOptions, remote: Remote) -> str:
    """Where the corpus is read from: options.mirror, else $remote.env, else its home URL."""
    return options.mirror or os.environ.get(remote.env) or remote.url


def mirror_dir(options: SourceOptions, remote: Remote) -> Path | None:
    """The local mirror directory the corpus is read from; None when it comes from a URL
    (recipes whose mirrors may hold extracted files look there before calling `fetch`)."""
    where = location(options, remote)
    return None if is_url(where) else Path(where)


def fetch(options: SourceOptions, remote: Remote, relative: str,
          missing: Callable[[Path], str], also: Sequence[str] = ()) -> Path:
    """The local file of `relative`, a path below the corpus's home.

    From a local mirror directory: the first of `relative` and the `also` alternatives
    (other places a user may have put the file) that is a file below it; when none is,
    a UserError saying `missing(directory)`. From a URL: the file downloaded to
    CACHE/remote.cache_name/relative unless it is already there, CACHE being
    options.cache_dir or the user's cache; a failed download is a UserError naming the
    URL and remote.hint.
    """
    root = mirror_dir(options, remote)
    if root is not None:
        for candidate in (relative, *also):
            if (root / candidate).is_file():
                return root / candidate
        raise UserError(missing(root))
    # urljoin drops the last path segment of a base without a trailing slash, which a
    # user's mirror URL may well lack.
    url = urllib.parse.urljoin(location(options, remote).rstrip("/") + "/", relative)
    cache = options.cache_dir or default_cache_dir()
    return download(url, cache / remote.cache_name / relative, remote.hint)
