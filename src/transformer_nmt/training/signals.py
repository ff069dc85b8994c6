"""Stopping a training cleanly on SIGINT or SIGTERM: the first signal asks the loop to
finish its step and write a checkpoint; a second one stops at once, the default way."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from tqdm import tqdm


class StopSignals:
    """Turns the first SIGINT/SIGTERM into a request to stop after the current step; a
    second one stops at once, the default way."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        # Python lets only the main thread install handlers; elsewhere signals keep theirs.
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, number: int, frame: Any) -> None:
        if self.received is not None:
            signal.signal(number, self._previous[number])
            signal.raise_signal(number)
            return
        self.received = signal.Signals(number).name
        tqdm.write(f"{self.received} received: finishing this step and writing a checkpoint "
                   "(send it again to stop at once)", file=sys.stderr)

    def __exit__(self, *exc: Any) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
