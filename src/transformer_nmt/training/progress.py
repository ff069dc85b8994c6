"""The bookkeeping of a training run: its totals across sessions (`RunProgress`), the sums
of one logging interval, and what one session prints: each validation's line and the
closing summary.

`RunProgress` is saved in every checkpoint under "progress" as a plain dict of numbers,
so that checkpoints stay loadable with torch.load(weights_only=True).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformer_nmt.training.loss import perplexity
from transformer_nmt.training.metrics import format_count, format_duration
from transformer_nmt.training.trainer import StepResult

SIGNALS = ("SIGINT", "SIGTERM", "signal")
"""The values of `SessionSummary.stopped_by` that mean a signal stopped the session."""


@dataclass
class RunProgress:
    """What the run has done so far, earlier sessions included."""

    wall: float = 0.0
    """Training seconds (validation and checkpoints included, start-up excluded)."""
    tgt_tokens: int = 0
    """Target tokens of the applied updates, all processes."""
    src_tokens: int = 0
    """Source tokens of the applied updates, all processes."""
    flops: float = 0.0
    """Analytic training FLOPs of the applied updates, all processes."""
    best_valid_nll: float | None = None
    """The lowest validation NLL per token so far (None before the first validation)."""
    best_valid: float | None = None
    """The best value of the run's valid_metric so far (the NLL for 'loss')."""
    best_valid_step: int | None = None
    """The step of best_valid, the step of checkpoint_best.pt."""
    bad_validations: int = 0
    """Validations in a row since the last that improved on best_valid (patience's count)."""

    def add(self, result: StepResult) -> None:
        """Count an applied update."""
        self.tgt_tokens += result.tgt_tokens
        self.src_tokens += result.src_tokens
        self.flops += result.flops

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of numbers, as checkpoints store it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "RunProgress":
        """The state `to_dict` saved. Checkpoints from before valid_metric existed ranked
        by the NLL alone: their best NLL is their best value."""
        values = dict(values)
        if "best_valid" not in values:
            values["best_valid"] = values.get("best_valid_nll")
        return cls(**values)


@dataclass
class Interval:
    """Sums over the updates since the last "train" log record, and the clock of it."""

    loss: float = 0.0
    """Smoothed loss summed over target tokens (nats)."""
    nll: float = 0.0
    """Negative log-likelihood summed over target tokens (nats)."""
    tgt: int = 0
    src: int = 0
    flops: float = 0.0
    steps: int = 0
    started: float = field(default_factory=time.perf_counter)
    """perf_counter() when the interval began, moved on past pauses (validation, saving)
    so that they stay out of the speed."""

    def add(self, result: StepResult) -> None:
        """Count an applied update."""
        self.loss += result.loss
        self.nll += result.nll
        self.tgt += result.tgt_tokens
        self.src += result.src_tokens
        self.flops += result.flops
        self.steps += 1

    def reset(self) -> None:
        """Start a new interval now."""
        self.loss = self.nll = self.flops = 0.0
        self.tgt = self.src = self.steps = 0
        self.started = time.perf_counter()

    def seconds(self) -> float:
        """Training seconds since the interval began (never 0)."""
        return max(time.perf_counter() - self.started, 1e-9)

    def mfu(self, seconds: float, peak: float, world_size: int) -> float:
        """Model FLOPs utilization over `seconds` of `world_size` devices of `peak` FLOP/s."""
        return self.flops / seconds / (peak * world_size)

    def record(self, seconds: float, last: StepResult, peak: float,
               world_size: int) -> dict[str, float]:
        """The fields of a "train" log record: means per token and step, rates, and the
        learning rate and gradient norm of the interval's last update `last`."""
        tokens = max(self.tgt, 1)
        steps = max(self.steps, 1)
        return dict(loss=self.loss / tokens, nll=self.nll / tokens,
                    ppl=perplexity(self.nll / tokens), smoothed_ppl=perplexity(self.loss / tokens),
                    lr=last.lr, grad_norm=last.grad_norm, step_tgt_tokens=self.tgt / steps,
                    step_src_tokens=self.src / steps, tgt_tok_s=self.tgt / seconds,
                    tok_s=(self.tgt + self.src) / seconds,
                    mfu=self.mfu(seconds, peak, world_size))


@dataclass
class SessionSummary:
    """What a `train` call (one session) did, and where its run stands after it."""

    run_dir: Path
    step: int
    """Optimizer steps of the run, earlier sessions included."""
    epoch: float
    """Passes over the training data (fractional)."""
    tgt_tokens: int
    """Target tokens trained on, earlier sessions included."""
    src_tokens: int
    wall: float
    """Training seconds, earlier sessions included."""
    flops: float
    """Analytic training FLOPs, all processes, earlier sessions included."""
    peak_flops: float
    """Measured matmul FLOP/s of one device in the training precision."""
    world_size: int
    stopped_by: str
    """'max_steps', 'max_epochs', 'max_time', 'patience' (early stopping), 'SIGINT',
    'SIGTERM' or 'finished' (nothing to do)."""
    best_valid_nll: float | None = None
    valid_metric: str = "loss"
    best_valid: float | None = None
    """The best value of valid_metric, at step best_valid_step."""
    best_valid_step: int | None = None
    checkpoint: Path | None = None
    """The last checkpoint written (None if none was)."""
    lines: list[str] = field(default_factory=list)
    """The closing report, as printed."""


def validation_line(step: int, result: dict[str, float], scores: dict[str, float],
                    improved: bool, progress: RunProgress, metric: str, patience: int) -> str:
    """The line a validation prints: its loss, NLL, perplexity and scores (`result` of
    `Trainer.evaluate`, `scores` of BLEU and chrF), and the best so far unless it is."""
    text = (f"valid step {step}: loss {result['loss']:.3f} nll {result['nll']:.3f} "
            f"ppl {result['ppl']:.2f}" + "".join(f" {name} {scores[name]:.2f}"
                                                for name in ("bleu", "chrf") if name in scores))
    if improved:
        return text + " (best)"
    return (text + f" (best {metric} {progress.best_valid:.3f} at step "
            f"{progress.best_valid_step}; {progress.bad_validations} without improvement"
            + (f" of patience {patience})" if patience else ")"))


def finished_lines(summary: SessionSummary, limit: str) -> list[str]:
    """The report of a session that found its run already at `limit`."""
    return [f"{summary.run_dir} has finished training ({limit} reached at step "
            f"{summary.step}); nothing to do. Raise --max-steps, --max-epochs, --max-time or "
            "--patience to train further, or train into a new --out"]


def report_lines(summary: SessionSummary, device_type: str, precision: str,
                 limit_value: object) -> list[str]:
    """The closing report of a session that trained: what, how fast, at what cost, the best
    validation, and why it stopped (`limit_value`: the setting of the limit it reached)."""
    wall, peak = format_duration(summary.wall), summary.peak_flops
    lines = [
        f"trained {summary.step} steps ({summary.epoch:.2f} epochs, "
        f"{format_count(summary.tgt_tokens)} target + {format_count(summary.src_tokens)} "
        f"source tokens) in {wall} on {summary.world_size} {device_type} process(es), "
        f"{precision}",
        f"training cost: {summary.flops:.3g} FLOPs analytic (6 x weights x tokens + "
        f"attention); {summary.wall * summary.world_size * peak:.3g} FLOPs as the paper's "
        f"Table 2 counts it ({wall} x {summary.world_size} device(s) x "
        f"{peak / 1e9:.0f} GFLOP/s sustained matmul rate)"]
    if summary.best_valid_nll is not None:
        lines.append(f"best validation NLL {summary.best_valid_nll:.3f} (ppl "
                     f"{perplexity(summary.best_valid_nll):.2f}); checkpoints in "
                     f"{summary.run_dir}")
    if summary.valid_metric != "loss" and summary.best_valid is not None:
        lines.append(f"best validation {summary.valid_metric} {summary.best_valid:.2f} at "
                     f"step {summary.best_valid_step} (checkpoint_best.pt)")
    if summary.stopped_by == "patience":
        lines.append(f"stopped early at step {summary.step}: validation {summary.valid_metric} "
                     f"did not improve in {limit_value} validations in a row; the best is "
                     f"{summary.best_valid:.4g} at step {summary.best_valid_step} in "
                     f"{summary.run_dir / 'checkpoint_best.pt'}; last checkpoint "
                     f"{summary.checkpoint}")
    elif summary.stopped_by in SIGNALS:
        lines.append(f"stopped by {summary.stopped_by} at step {summary.step}; checkpoint "
                     f"{summary.checkpoint}; continue with: nmt train --resume {summary.run_dir}")
    else:
        lines.append(f"stopped by {summary.stopped_by} ({limit_value}); "
                     f"last checkpoint {summary.checkpoint}")
    return lines
