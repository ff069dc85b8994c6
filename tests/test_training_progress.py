"""A run's bookkeeping (training/progress.py): totals that survive a weights_only checkpoint,
interval sums that reset, and the closing report."""

import math
from pathlib import Path

import pytest
import torch

from transformer_nmt.training.progress import (Interval, RunProgress, SessionSummary,
                                               finished_lines, report_lines)
from transformer_nmt.training.trainer import StepResult


def step(tgt=100, src=90):
    return StepResult(loss=2.0 * tgt, nll=1.5 * tgt, tgt_tokens=tgt, src_tokens=src,
                      sentences=10, flops=1e9, grad_norm=0.5, lr=1e-3, updated=True)


def test_progress_survives_a_checkpoint_read_with_weights_only(tmp_path):
    state = RunProgress(wall=12.5, best_valid_nll=1.25)
    state.add(step())
    state.add(step(tgt=50, src=40))
    torch.save({"progress": state.to_dict()}, tmp_path / "checkpoint.pt")
    loaded = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["progress"]
    assert RunProgress.from_dict(loaded) == state
    assert (state.tgt_tokens, state.src_tokens, state.flops) == (150, 130, 2e9)


def test_an_interval_averages_per_token_and_resets():
    interval = Interval()
    interval.add(step(tgt=100))
    interval.add(step(tgt=300))
    record = interval.record(seconds=2.0, last=step(), peak=1e9, world_size=2)
    assert record["loss"] == pytest.approx(2.0) and record["nll"] == pytest.approx(1.5)
    assert record["ppl"] == pytest.approx(math.exp(1.5))
    assert record["step_tgt_tokens"] == 200 and record["tgt_tok_s"] == 200
    assert record["mfu"] == pytest.approx(2e9 / 2.0 / 2e9)
    started = interval.started
    interval.reset()
    assert (interval.steps, interval.tgt, interval.loss) == (0, 0, 0.0)
    assert interval.started >= started


def summary(stopped_by):
    return SessionSummary(Path("runs/x"), 7, 1.5, 1000, 900, 60.0, 1e12, 1e10, 2, stopped_by,
                        best_valid_nll=1.0, checkpoint=Path("runs/x/checkpoint_7.pt"))


def test_the_report_says_why_training_stopped_and_how_to_go_on():
    by_limit = "\n".join(report_lines(summary("max_steps"), "cpu", "fp32", 7))
    assert "trained 7 steps" in by_limit and "on 2 cpu process(es), fp32" in by_limit
    assert "stopped by max_steps (7); last checkpoint runs/x/checkpoint_7.pt" in by_limit
    by_signal = "\n".join(report_lines(summary("SIGTERM"), "cpu", "fp32", None))
    assert "continue with: nmt train --resume runs/x" in by_signal
    assert "nothing to do" in finished_lines(summary("finished"), "max_steps")[0]


def test_state_of_an_older_checkpoint_ranks_by_its_best_nll():
    state = RunProgress.from_dict({"wall": 1.0, "tgt_tokens": 2, "src_tokens": 2,
                                     "flops": 3.0, "best_valid_nll": 2.5})
    assert (state.best_valid, state.best_valid_step, state.bad_validations) == (2.5, None, 0)
    assert RunProgress.from_dict(state.to_dict()) == state
