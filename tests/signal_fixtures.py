"""Shared helpers of the tests that send SIGINT: the handler they rely on, set rather than
assumed.

A process started as a background job of a non-interactive shell, or by some CI runners,
begins with SIGINT ignored; Python then keeps it ignored (as `nohup` means it to be) and
installs no KeyboardInterrupt. A test that sends SIGINT sets Python's default handler for
its own duration (`default_sigint`) and in the children it starts (`DEFAULT_SIGINT`).
Tests marked `sigint` run once more with SIGINT ignored (tests/test_signals_ignored.py).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

DEFAULT_SIGINT = ("import signal\n"
                  "signal.signal(signal.SIGINT, signal.default_int_handler)\n")
"""The lines a Python child's script starts with to take Ctrl-C as a terminal's
foreground process does, however the test session was started."""


@contextmanager
def default_sigint() -> Iterator[None]:
    """Python's default SIGINT handler (KeyboardInterrupt in the main thread) for the
    body, then the handler that was there before."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
