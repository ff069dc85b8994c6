"""Where an export goes: built aside, then renamed into place, never over a user's files.

A half-written export directory would look like a model to the runtime that later loads
it, so every export is built in a temporary sibling of its destination
(files.temporary_directory, locked and recognisably named) and appears by one rename once
complete. An existing destination is replaced only when asked to (`force`). An export
stopped by SIGINT or SIGTERM removes what it built; the leftovers of a killed one are
removed by the next export to the same destination, before it starts.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from transformer_nmt.errors import UserError
from transformer_nmt.files import (fsync_dir, give_usual_permissions, set_aside,
                                   temporary_directory)


def check_destination(out: Path, force: bool) -> None:
    """UserError if `out` exists and holds something, unless `force`."""
    if not out.exists() and not out.is_symlink():
        return
    empty_dir = out.is_dir() and not out.is_symlink() and not any(out.iterdir())
    if not empty_dir and not force:
        raise UserError(f"{out} already exists and is not empty; choose another output or "
                        "pass --force to replace it")


@contextmanager
def export_directory(out: str | Path, force: bool = False, needs_bytes: int | None = None
                     ) -> Iterator[Path]:
    """A temporary directory beside `out` to build the export in; on success it is renamed
    to `out` (an old `out` is removed only then), on failure deleted, `out` left as it was.
    needs_bytes: about how large the export is, said if the disk is full."""
    out = Path(out)
    check_destination(out, force)
    with temporary_directory(out, needs_bytes) as building:
        yield building
        replace_path(building, out)


def replace_path(new: Path, out: Path) -> None:
    """Put the complete `new` (file or directory) at `out`, removing what was there. What
    other libraries wrote into `new` gets the permissions of the user's own files first."""
    give_usual_permissions(new)
    if out.exists() or out.is_symlink():
        with set_aside(out):
            os.replace(new, out)
    else:
        os.replace(new, out)
    fsync_dir(out.parent)
