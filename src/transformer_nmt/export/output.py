"""Where an export goes: built aside, then renamed into place, never over a user's files.

A half-written export directory would look like a model to the runtime that later loads
it, so every export is built in a temporary sibling of its destination and appears by one
rename once complete. An existing destination is replaced only when asked to (`force`).
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from transformer_nmt.errors import UserError
from transformer_nmt.files import fsync_dir


def check_destination(out: Path, force: bool) -> None:
    """UserError if `out` exists and holds something, unless `force`."""
    if not out.exists() and not out.is_symlink():
        return
    empty_dir = out.is_dir() and not out.is_symlink() and not any(out.iterdir())
    if not empty_dir and not force:
        raise UserError(f"{out} already exists and is not empty; choose another output or "
                        "pass --force to replace it")


@contextmanager
def export_directory(out: str | Path, force: bool = False) -> Iterator[Path]:
    """A temporary directory beside `out` to build the export in; on success it is renamed
    to `out` (an old `out` is removed only then), on failure deleted, `out` left as it was."""
    out = Path(out)
    check_destination(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Made by mkdir, not mkdtemp, so that the export gets the user's usual permissions.
    building = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(building, ignore_errors=True)  # a crashed export's leftovers
    building.mkdir()
    try:
        yield building
        replace_path(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def replace_path(new: Path, out: Path) -> None:
    """Put the complete `new` (file or directory) at `out`, removing what was there."""
    if out.exists() or out.is_symlink():
        old = out.with_name(f".{out.name}.{os.getpid()}.old")
        os.replace(out, old)
        os.replace(new, out)
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    else:
        os.replace(new, out)
    fsync_dir(out.parent)
