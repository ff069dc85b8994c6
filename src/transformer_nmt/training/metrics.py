"""What training reports: the device's peak rate for MFU, metrics.jsonl, TensorBoard, the plot.

The analytic FLOPs of a step come from transformer_nmt.training.flops (6 FLOPs per weight
per token plus the attention products, over the padded batch). MFU is that count per
second over the device's peak rate, which is measured at start-up with a dense matmul in
the training precision: an achievable peak, not the datasheet's. It is measured again
at every validation and checkpoint pause, keeping the best (PeakFlops).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from transformer_nmt.errors import UserError
from transformer_nmt.runtime import matmul_rate

METRICS_FILE = "metrics.jsonl"


def measure_peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    """FLOP/s of a dense square matmul in `dtype` on `device`, best of a few runs."""
    size = 4096 if device.type == "cuda" else 1024
    return matmul_rate(device, dtype, (size, size, size), repeats=3)


class PeakFlops:
    """The device's achievable matmul rate, the denominator of MFU.

    One measurement is short: if another process holds a core just then, the rate
    comes out low and every MFU of the run high (even above 100% on a shared
    machine). `refresh`, called at pauses that already cost seconds, measures again and
    keeps the best, so an unlucky start corrects itself.
    """

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.device, self.dtype = device, dtype
        self.value = measure_peak_flops(device, dtype)
        """FLOP/s, the best measured so far."""

    def refresh(self) -> float:
        """Measure again; return the best rate so far."""
        self.value = max(self.value, measure_peak_flops(self.device, self.dtype))
        return self.value


class MetricsLog:
    """Appends records to RUN_DIR/metrics.jsonl and, when installed, to TensorBoard.

    Each record is one JSON object with an 'event' ('train', 'valid', 'summary', ...),
    the 'step', 'wall' (training seconds since the run began, across resumes), 'time'
    (Unix time) and the event's values. Only the main process creates one.
    """

    def __init__(self, run_dir: Path, resume_step: int | None, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        if resume_step is None:
            self.path.write_text("")
        else:
            self._truncate_after(resume_step)
        self._handle = open(self.path, "a", encoding="utf-8")
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is an optional extra
                pass
            else:
                self._writer = SummaryWriter(str(Path(run_dir) / "tensorboard"),
                                             purge_step=resume_step)

    def _truncate_after(self, step: int) -> None:
        """Drop records of steps after the checkpoint being resumed (that work is redone)
        and a line torn by a killed process."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("step", 0) <= step:
                kept.append(line + "\n")
        self.path.write_text("".join(kept), encoding="utf-8")

    def write(self, event: str, step: int, wall: float, **values: Any) -> None:
        """Record `values` of `event` at `step`; numbers also go to TensorBoard."""
        record = {"event": event, "step": step, "wall": round(wall, 3),
                  "time": round(time.time(), 3), **values}
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        if self._writer is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(f"{event}/{key}", value, step)

    def close(self) -> None:
        """Flush and close the files."""
        self._handle.close()
        if self._writer is not None:
            self._writer.close()


def read_metrics(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a metrics.jsonl (or of RUN_DIR/metrics.jsonl)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise UserError(f"{path}: no such file; give a run directory of `nmt train`")
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError:
                if number == len(lines):
                    return  # the last line of a killed run may be torn
                raise UserError(f"{path}, line {number}: not a JSON record") from None


_X_LABELS = {"step": "optimizer step", "wall": "training hours", "tokens": "target tokens seen"}


def plot_metrics(metrics_path: str | Path, out: str | Path, x_axis: str = "step") -> Path:
    """Draw a run's training curves into a PNG: loss, validation perplexity, rate.

    x_axis: 'step', 'wall' (hours of training) or 'tokens' (target tokens seen).
    """
    if x_axis not in _X_LABELS:
        raise UserError(f"x axis must be step, wall or tokens, not {x_axis!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = list(read_metrics(metrics_path))
    train = [r for r in records if r["event"] == "train"]
    valid = [r for r in records if r["event"] == "valid"]
    if not train and not valid:
        raise UserError(f"{metrics_path}: no training or validation records to plot yet")

    def xs(rows: list[dict[str, Any]]) -> list[float]:
        if x_axis == "wall":
            return [r["wall"] / 3600 for r in rows]
        if x_axis == "tokens":
            return [r.get("tokens_seen", 0) for r in rows]
        return [r["step"] for r in rows]

    figure, (loss_ax, ppl_ax, rate_ax) = plt.subplots(3, 1, figsize=(8, 10), sharex=True)
    _plot_losses(loss_ax, ppl_ax, train, valid, xs)
    if train:
        _plot_rates(rate_ax, train, xs)
    rate_ax.set_xlabel(_X_LABELS[x_axis])
    for axis in (loss_ax, ppl_ax, rate_ax):
        axis.grid(alpha=0.3)
    figure.suptitle(f"{Path(metrics_path).resolve().name}: training curves")
    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def _plot_losses(loss_ax, ppl_ax, train: list[dict[str, Any]], valid: list[dict[str, Any]],
                 xs: Callable[[list[dict[str, Any]]], list[float]]) -> None:
    """Training and validation losses on `loss_ax`; validation perplexity, BLEU and chrF
    on `ppl_ax`."""
    import matplotlib.ticker

    if train:
        loss_ax.plot(xs(train), [r["loss"] for r in train], label="train loss (smoothed)")
        loss_ax.plot(xs(train), [r["nll"] for r in train], label="train NLL")
    if valid:
        loss_ax.plot(xs(valid), [r["nll"] for r in valid], "o-", label="valid NLL")
        ppl_ax.plot(xs(valid), [r["ppl"] for r in valid], "o-", color="C2", label="valid ppl")
        ppl_ax.set_yscale("log")
        ppl_ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ppl_ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        bleu = [r for r in valid if r.get("bleu") is not None]
        if bleu:
            bleu_ax = ppl_ax.twinx()
            bleu_ax.plot(xs(bleu), [r["bleu"] for r in bleu], "s-", color="C3",
                         label="valid BLEU")
            chrf = [r for r in bleu if r.get("chrf") is not None]
            if chrf:
                bleu_ax.plot(xs(chrf), [r["chrf"] for r in chrf], "^-", color="C5",
                             label="valid chrF")
            bleu_ax.set_ylabel("BLEU, chrF")
            bleu_ax.legend(loc="upper right")
    loss_ax.set_ylabel("nats per target token")
    loss_ax.legend()
    ppl_ax.set_ylabel("perplexity")
    ppl_ax.legend(loc="upper left")


def _plot_rates(rate_ax, train: list[dict[str, Any]],
                xs: Callable[[list[dict[str, Any]]], list[float]]) -> None:
    """The learning rate on `rate_ax`, and the training speed on its twin axis."""
    rate_ax.plot(xs(train), [r["lr"] for r in train], color="C4", label="learning rate")
    rate_ax.set_ylabel("learning rate")
    speed_ax = rate_ax.twinx()
    speed_ax.plot(xs(train), [r["tgt_tok_s"] for r in train], color="C5", alpha=0.6,
                  label="target tokens/s")
    speed_ax.set_ylabel("target tokens/s")
    rate_ax.legend(loc="upper left")
    speed_ax.legend(loc="upper right")


def format_count(number: float) -> str:
    """'950', '12.3k', '4.56M', '7.89B'."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(number) >= scale:
            return f"{number / scale:.3g}{unit}"
    return f"{number:.0f}"


def format_duration(seconds: float) -> str:
    """'2h05m', '3m20s' or '12.3s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
