"""When a session logs, validates and saves: every so many steps, every so many minutes
(saving), and once more when it stops.

Step-numbered work happens once per step number, after the update that reached it: a
skipped update repeats no step number and so triggers nothing by itself.
"""

from __future__ import annotations

import time
from typing import Callable

from transformer_nmt.config import TrainConfig


def _every(step: int | None, every: int) -> bool:
    """Whether `step` (None: no update was applied) is a multiple of `every` (0: never)."""
    return bool(step and every and step % every == 0)


class Cadence:
    """The settings that say how often to log (log_every), validate (valid_every) and
    save (save_every, save_every_minutes), and the clock of the last save.

    can_validate: whether the data has a valid split (else validation is never due).
    clock: seconds of a monotonic clock (a test's fake one).
    """

    def __init__(self, cfg: TrainConfig, can_validate: bool,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.cfg, self.can_validate, self.clock = cfg, can_validate, clock
        self.last_save = clock()

    def save_time_up(self) -> bool:
        """Whether save_every_minutes have passed since the clock was last restarted."""
        minutes = self.cfg.save_every_minutes
        return bool(minutes) and self.clock() - self.last_save >= 60 * minutes

    def restart_clock(self) -> None:
        """Count save_every_minutes from now: when the loop starts, and after every
        checkpoint."""
        self.last_save = self.clock()

    def log_due(self, step: int | None, stopping: bool) -> bool:
        """Whether a "train" record is due after the update to `step` (None: skipped)."""
        return stopping or _every(step, self.cfg.log_every)

    def validation_due(self, step: int | None, stopping: bool, signalled: bool) -> bool:
        """Whether to validate now: at every valid_every-th step and when the session
        stops, unless a signal stops it (the user wants it to end, not to validate)."""
        return self.can_validate and not signalled and (
            stopping or _every(step, self.cfg.valid_every))

    def save_due(self, step: int | None, stopping: bool, save_time_up: bool) -> bool:
        """Whether to write a numbered checkpoint: every save_every steps, when
        save_every_minutes are up (`save_time_up`, agreed by every process), and when
        the session stops."""
        return stopping or save_time_up or _every(step, self.cfg.save_every)
