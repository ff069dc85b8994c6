"""The learning-rate schedule of eq. (3).

lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

The rate grows linearly for the first `warmup` steps and then decays with the inverse
square root of the step number; the peak, at step = warmup, is
lr_scale * (d_model * warmup)^-0.5 (7.0e-4 for the base model with 4000 warm-up steps).
Steps count optimizer updates from 1, so the first update uses a small but non-zero rate.
A given `peak` replaces that peak and keeps the shape (fairseq's inverse_sqrt schedule):
lrate = peak * min(step / warmup, (warmup / step)^0.5), as fine-tuning sets it.
"""

from __future__ import annotations

import torch


class InverseSqrtSchedule:
    """Eq. (3) as a function of the optimizer step; `apply` writes it into an optimizer."""

    def __init__(self, d_model: int, warmup_steps: int, lr_scale: float = 1.0,
                 peak: float = 0.0) -> None:
        """peak: the rate at step `warmup_steps` (0: eq. (3)'s, from d_model and lr_scale)."""
        if peak > 0:
            # The factor on eq. (3) that puts its peak at `peak`.
            lr_scale = peak * (d_model * warmup_steps) ** 0.5
        self.d_model, self.warmup_steps, self.lr_scale = d_model, warmup_steps, lr_scale

    def __call__(self, step: int) -> float:
        """The learning rate of optimizer step `step` (counted from 1)."""
        if step < 1:
            raise ValueError(f"optimizer steps count from 1, got {step}")
        return (self.lr_scale * self.d_model ** -0.5
                * min(step ** -0.5, step * self.warmup_steps ** -1.5))

    @property
    def peak(self) -> float:
        """The largest rate, reached at step = warmup_steps."""
        return self(self.warmup_steps)

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set every parameter group's rate to that of `step`; return the rate."""
        lr = self(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr
