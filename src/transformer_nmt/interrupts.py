"""SIGTERM handled as Ctrl-C is, and both held while an exception would do harm: the
command unwinds, removing what it was building, and ends with one line.

Python's default for SIGTERM ends the process on the spot, so that the temporaries of a
file or directory being built stay behind; SIGINT raises KeyboardInterrupt, which unwinds
through every writer's clean-up. Inside `sigterm_unwinds`, SIGTERM raises `Terminated`
the same way; a second SIGTERM during the clean-up ends the process at once. Inside
`stop_signals_held` both wait until the body is done: an exception raised in the middle of
an import of a C++ extension can abort the process instead of unwinding it.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator


class Terminated(BaseException):
    """SIGTERM arrived: raised in the main thread, a BaseException (as KeyboardInterrupt
    is) so that no `except Exception` takes it for an error to handle."""


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Run the body with SIGTERM raising `Terminated` in the main thread (elsewhere
    Python lets no thread install handlers, and SIGTERM keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def unwind(number: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, previous)
        raise Terminated

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM received during the body until it has finished, then
    raise the first one with the handler that was there before (KeyboardInterrupt,
    `Terminated`, ...): for work that an exception must not cut short, such as importing
    torch or loading a model, whose C++ code calls back into Python (an exception raised
    there can abort the process: "terminate called ...", or leave the interpreter
    exiting by SIGINT whatever was caught). In threads other than the main one, signals
    are left as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(number: int, frame: Any) -> None:
        received.append(number)

    previous = {number: signal.signal(number, hold) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if received:
        signal.raise_signal(received[0])
