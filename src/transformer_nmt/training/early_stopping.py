"""Early stopping: which validation improved on the run's best, and when patience runs out.

The best value, its step and the validations since are the run's and live in its
progress record (training/progress.py), saved in every checkpoint; `EarlyStopping` is
the rule applied to them, so that a resumed run goes on counting where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer_nmt.training.progress import RunProgress


def better(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` of validation metric `metric` beats `best` (None: nothing yet):
    lower for 'loss' (the NLL per token), higher for 'bleu' and 'chrf'."""
    if best is None:
        return True
    return value < best if metric == "loss" else value > best


@dataclass(frozen=True)
class EarlyStopping:
    """Stop after `patience` validations in a row (0: never) that did not improve on the
    best value of `metric` (the run's valid_metric)."""

    metric: str
    patience: int

    def record(self, progress: RunProgress, value: float, step: int) -> bool:
        """Count the validation of `step` that measured `value` in `progress`; whether it
        is the run's best so far."""
        improved = better(self.metric, value, progress.best_valid)
        if improved:
            progress.best_valid, progress.best_valid_step = value, step
            progress.bad_validations = 0
        else:
            progress.bad_validations += 1
        return improved

    def out_of_patience(self, progress: RunProgress) -> bool:
        """Whether the run has had `patience` validations in a row without improvement."""
        return bool(self.patience) and progress.bad_validations >= self.patience
