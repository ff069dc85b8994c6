"""Stopping a search whose every request went away: a server's batch decodes for clients
that may leave while it runs, and its remaining steps would be work nobody reads.

The caller that knows who is waiting (the server's batcher) runs the decoding inside
`stop_when(withdrawn)`; the lockstep loop asks `stop_if_withdrawn` between two steps, in
the thread that decodes, and the search ends with `Withdrawn`. A search outside such a
block never stops early.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_local = threading.local()


class Withdrawn(Exception):
    """Every request waiting for this search went away; it stopped between two steps."""


@contextmanager
def stop_when(withdrawn: Callable[[], bool]) -> Iterator[None]:
    """Searches in this thread, inside the block, stop once `withdrawn()` is true."""
    outer = getattr(_local, "withdrawn", None)
    _local.withdrawn = withdrawn
    try:
        yield
    finally:
        _local.withdrawn = outer


def stop_if_withdrawn() -> None:
    """Withdrawn if this thread decodes inside `stop_when` and its check is true now."""
    withdrawn = getattr(_local, "withdrawn", None)
    if withdrawn is not None and withdrawn():
        raise Withdrawn("every request of the batch went away")
