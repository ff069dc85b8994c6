"""The whole of `nmt train` as a library call (training/session.py): exact resume, checkpoints,
limits, divergence, validation hooks and the MFU's measured peak."""

import json
import math
import os
import shutil

import pytest
import torch

from transformer_nmt import memory
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import read_model_file
from transformer_nmt.training import metrics as metrics_module
from transformer_nmt.training import session as session_module
from transformer_nmt.training import trainer as trainer_module
from transformer_nmt.training.checkpoint import LAST, numbered_checkpoints
from transformer_nmt.training.session import train

from train_fixtures import tiny_overrides


def run(tiny_data, out, **changes):
    return train(out=out, data=tiny_data, preset="tiny", overrides=tiny_overrides(**changes),
                 progress=False)


def parameters(run_dir, name=LAST):
    return read_model_file(run_dir / name)["model"]


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_trains_marians_architecture_fields_into_its_model_file(tiny_data, tmp_path):
    summary = run(tiny_data, tmp_path / "run", max_steps=2, activation="swish",
                  positional="sinusoidal-halves", logits_bias=True)
    assert summary.step == 2
    payload = read_model_file(tmp_path / "run" / LAST)
    config = payload["model_config"]
    assert (config["activation"], config["positional"], config["logits_bias"]) == (
        "swish", "sinusoidal-halves", True)
    # A buffer, not a parameter: training leaves it as it began.
    assert torch.equal(payload["model"]["logits_bias"], torch.zeros(payload["vocab_size"]))


def test_a_resumed_run_equals_an_uninterrupted_one(tiny_data, tmp_path):
    # 4 batches a step (the cap of 96 tokens accumulated up to 384) make 12 steps cross
    # an epoch end (about 40 batches an epoch) with a short last step; dropout is on, so
    # the random streams must be restored too.
    settings = dict(batch_tokens=384, max_tokens=96, max_steps=12)
    straight = run(tiny_data, tmp_path / "straight", **settings)
    assert straight.epoch > 1
    stopped = run(tiny_data, tmp_path / "resumed", **settings | {"max_steps": 5})
    assert stopped.stopped_by == "max_steps" and stopped.step == 5
    resumed = train(resume=tmp_path / "resumed", overrides=[("max_steps", 12)], progress=False)
    assert resumed.step == 12
    a, b = parameters(tmp_path / "straight"), parameters(tmp_path / "resumed")
    assert all(torch.equal(a[name], b[name]) for name in a)
    optimizer_a = read_model_file(tmp_path / "straight" / LAST)["trainer"]["optimizer"]["state"]
    optimizer_b = read_model_file(tmp_path / "resumed" / LAST)["trainer"]["optimizer"]["state"]
    assert all(torch.equal(optimizer_a[k]["exp_avg_sq"], optimizer_b[k]["exp_avg_sq"])
               for k in optimizer_a)
    steps = [r["step"] for r in metrics(tmp_path / "resumed") if r["event"] == "train"]
    assert steps == list(range(1, 13))
    assert json.loads((tmp_path / "resumed" / "config.json").read_text())["sessions"][1][
        "from_step"] == 5


def test_checkpoints_best_last_and_rotation(tiny_data, tmp_path):
    summary = run(tiny_data, tmp_path / "run", max_steps=6, valid_every=2, save_every=2,
                  keep_last=2)
    run_dir = tmp_path / "run"
    assert [step for step, _ in numbered_checkpoints(run_dir)] == [4, 6]
    assert summary.checkpoint == run_dir / "checkpoint_6.pt"
    best = read_model_file(run_dir / "checkpoint_best.pt")
    valid = [r for r in metrics(run_dir) if r["event"] == "valid"]
    assert [r["step"] for r in valid] == [2, 4, 6]
    best_record = min(valid, key=lambda r: r["nll"])
    assert best["step"] == best_record["step"] and best_record["best"]
    assert summary.best_valid_nll == pytest.approx(best_record["nll"])
    checkpoint = read_model_file(run_dir / LAST)
    assert set(checkpoint) >= {"model", "vocab", "model_config", "train_config", "trainer",
                               "sampler", "rng", "step", "epoch", "data_digest", "progress"}


def test_limits_by_epochs_and_time(tiny_data, tmp_path):
    summary = run(tiny_data, tmp_path / "epochs", max_epochs=1, max_steps=10_000,
                  batch_tokens=8 * 96, max_tokens=96)
    assert summary.stopped_by == "max_epochs" and summary.epoch == 1.0
    summary = run(tiny_data, tmp_path / "time", max_time="1e-6")
    assert summary.stopped_by == "max_time" and summary.step == 1
    lines = "\n".join(summary.lines)
    assert "training cost" in lines and "FLOPs" in lines


def test_non_finite_updates_are_skipped_then_training_stops(tiny_data, tmp_path, monkeypatch):
    real_loss = trainer_module.projected_label_smoothed_nll
    calls = {"n": 0}

    def loss_that_explodes(*args, **kwargs):
        calls["n"] += 1
        loss, nll = real_loss(*args, **kwargs)
        return (loss * math.nan, nll) if calls["n"] > 2 else (loss, nll)

    monkeypatch.setattr(trainer_module, "projected_label_smoothed_nll", loss_that_explodes)
    with pytest.raises(UserError, match="diverged: 3 updates in a row"):
        run(tiny_data, tmp_path / "run", max_steps=20, save_every=1, max_bad_steps=3)
    skips = [r for r in metrics(tmp_path / "run") if r["event"] == "skip"]
    assert [r["reason"] for r in skips] == ["non-finite loss"] * 3
    weights = parameters(tmp_path / "run")
    assert read_model_file(tmp_path / "run" / LAST)["step"] == 2
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())


def test_validation_bleu_hook_and_greedy_default(tiny_data, tmp_path):
    seen = []
    train(out=tmp_path / "hook", data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_steps=2, valid_every=1, valid_bleu=True),
          valid_scores=lambda model: seen.append(model) or {"bleu": 12.5, "chrf": 30.0})
    valid = [r for r in metrics(tmp_path / "hook") if r["event"] == "valid"]
    assert [(r["bleu"], r["chrf"]) for r in valid] == [(12.5, 30.0), (12.5, 30.0)]
    assert isinstance(seen[0], Transformer)
    run(tiny_data, tmp_path / "greedy", max_steps=1, valid_bleu=True)
    (record,) = [r for r in metrics(tmp_path / "greedy") if r["event"] == "valid"]
    assert 0 <= record["bleu"] <= 100 and 0 <= record["chrf"] <= 100


def test_the_validation_loss_runs_in_the_validation_precision(tiny_data, tmp_path,
                                                            monkeypatch):
    # runtime.validation_precision decides (fp32 on a CPU); a fake rule naming another
    # precision than the training's shows the session follows it.
    asked, used = [], []
    real_evaluate = trainer_module.Trainer.evaluate

    def rule(device, precision):
        asked.append((device.type, precision))
        return "bf16"

    def recording(self, batches, precision=None):
        used.append(precision)
        return real_evaluate(self, batches, precision)

    monkeypatch.setattr(session_module, "validation_precision", rule)
    monkeypatch.setattr(trainer_module.Trainer, "evaluate", recording)
    run(tiny_data, tmp_path / "run", max_steps=2, valid_every=1)
    assert used == ["bf16", "bf16"] and ("cpu", "fp32") in asked


def test_mfu_recovers_from_a_peak_measured_while_the_cpu_was_busy(tiny_data, tmp_path,
                                                                  monkeypatch):
    # The first measurement is far too low (as when another process held the cores); the
    # one at the first validation pause is right, and the MFU logged after it follows.
    measured = iter([1e3] + [1e18] * 10)
    monkeypatch.setattr(metrics_module, "measure_peak_flops", lambda device, dtype: next(measured))
    run(tiny_data, tmp_path / "run", max_steps=4, valid_every=2, log_every=1)
    mfu = {r["step"]: r["mfu"] for r in metrics(tmp_path / "run") if r["event"] == "train"}
    assert mfu[1] > 1 and mfu[2] > 1
    assert mfu[3] < 1e-6 and mfu[4] < 1e-6


def scripted(values, metric="bleu"):
    """A validation hook returning `values` of `metric` in turn (the other metric 0)."""
    values = iter(values)
    other = "chrf" if metric == "bleu" else "bleu"
    return lambda model: {metric: next(values), other: 0.0}


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_patience_stops_training_and_keeps_the_best_checkpoint(tiny_data, tmp_path, metric):
    run_dir = tmp_path / "run"
    settings = tiny_overrides(max_steps=50, valid_every=1, save_every=1, patience=2,
                              valid_metric=metric)
    summary = train(out=run_dir, data=tiny_data, preset="tiny", overrides=settings,
                    progress=False, valid_scores=scripted([10.0, 12.0, 11.0, 12.0], metric))
    assert summary.stopped_by == "patience" and summary.step == 4
    assert (summary.best_valid, summary.best_valid_step) == (12.0, 2)
    text = "\n".join(summary.lines)
    assert "stopped early at step 4" in text and "in 2 validations in a row" in text
    best = read_model_file(run_dir / "checkpoint_best.pt")
    assert best["step"] == 2
    assert (best["validation"]["step"], best["validation"]["metric"],
            best["validation"]["value"], best["validation"][metric]) == (2, metric, 12.0, 12.0)
    assert read_model_file(run_dir / "checkpoint_4.pt")["validation"]["value"] == 12.0
    valid = [r for r in metrics(run_dir) if r["event"] == "valid"]
    assert [(r["best"], r["bad_validations"], r[metric]) for r in valid] == [
        (True, 0, 10.0), (True, 0, 12.0), (False, 1, 11.0), (False, 2, 12.0)]

    # The same run again has nothing to do; more patience continues it with its best.
    again = train(out=run_dir, data=tiny_data, preset="tiny", overrides=settings,
                  progress=False, valid_scores=scripted([]))
    assert again.stopped_by == "finished" and "--patience" in again.lines[0]
    # The count goes on across sessions: 11.5 is the third validation without improvement.
    more = train(resume=run_dir, overrides=[("patience", 4)], progress=False,
                 valid_scores=scripted([11.5, 13.0, 1.0, 1.0, 1.0, 1.0], metric))
    assert more.stopped_by == "patience" and more.step == 10
    assert (more.best_valid, more.best_valid_step) == (13.0, 6)
    assert read_model_file(run_dir / "checkpoint_best.pt")["step"] == 6


def test_loss_is_the_default_metric_and_lower_is_better(tiny_data, tmp_path):
    summary = run(tiny_data, tmp_path / "run", max_steps=4, valid_every=1)
    valid = [r for r in metrics(tmp_path / "run") if r["event"] == "valid"]
    assert all(r["metric"] == "loss" and r["bleu"] is None for r in valid)
    best = min(valid, key=lambda r: r["nll"])
    assert summary.best_valid == pytest.approx(best["nll"])
    assert summary.best_valid_step == best["step"]
    assert read_model_file(tmp_path / "run" / "checkpoint_best.pt")["validation"][
        "value"] == pytest.approx(best["nll"])


def test_early_stopping_without_a_valid_split_is_refused(tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    manifest = json.loads((data / "manifest.json").read_text())
    del manifest["splits"]["valid"]
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="has no valid split"):
        run(data, tmp_path / "run", max_steps=2, patience=2)


def test_batches_are_padded_to_the_length_multiple_the_runtime_asks_for(tiny_data, tmp_path,
                                                                      monkeypatch):
    # bf16 on a CPU asks for multiples of 8 (runtime.length_multiple); faked here for fp32
    # so that any CPU runs the test.
    monkeypatch.setattr(session_module, "length_multiple", lambda device, precision: 8)
    shapes = []
    real_step = trainer_module.Trainer.train_step

    def recording_step(self, batches):
        shapes.extend((b.src.size(1), b.tgt_in.size(1)) for b in batches if b is not None)
        return real_step(self, batches)

    monkeypatch.setattr(trainer_module.Trainer, "train_step", recording_step)
    summary = run(tiny_data, tmp_path / "run", max_steps=6)
    assert summary.step == 6 and shapes
    assert all(source % 8 == 0 and target % 8 == 0 for source, target in shapes)


def test_shape_buckets_train_on_a_few_fixed_shapes(tiny_data, tmp_path, monkeypatch):
    shapes = []
    real_step = trainer_module.Trainer.train_step

    def recording_step(self, batches):
        shapes.extend(tuple(b.tgt_in.shape) + (b.src.size(1),) for b in batches if b is not None)
        return real_step(self, batches)

    monkeypatch.setattr(trainer_module.Trainer, "train_step", recording_step)
    summary = run(tiny_data, tmp_path / "run", max_steps=12, shape_buckets=True)
    assert summary.step == 12 and len(shapes) >= 12
    # Each shape's rows follow from its lengths; lengths are multiples of 8.
    assert all(rows == max(96 // max(src_len, tgt_len), 1) and src_len % 8 == tgt_len % 8 == 0
               for rows, tgt_len, src_len in shapes)


def test_training_on_a_cpu_keeps_each_bf16_kernel_once(tiny_data, tmp_path, monkeypatch):
    # Set before the run's first product: ideep reads it once per process (memory.py).
    monkeypatch.delenv(memory.IDEEP_CACHE_VARIABLE, raising=False)
    run(tiny_data, tmp_path / "run", max_steps=1)
    assert os.environ[memory.IDEEP_CACHE_VARIABLE] == "1"
