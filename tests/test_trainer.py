"""The training loop: one big batch, exact resume, limits, skipped updates, validation."""

import contextlib
import dataclasses
import json
import math

import pytest
import torch

from transformer_nmt.config import PRESETS
from transformer_nmt.data.batching import TokenBatchSampler, collate
from transformer_nmt.data.binarize import load_split
from transformer_nmt.errors import UserError
from transformer_nmt.hardware import bf16_supported
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.train import trainer as trainer_module
from transformer_nmt.train.checkpoint import LAST, numbered_checkpoints, read_checkpoint
from transformer_nmt.train.distributed import init_distributed
from transformer_nmt.train.trainer import (Trainer, attention_kernels,
                                          resolve_precision, train)

from train_fixtures import tiny_data, tiny_overrides  # noqa: F401  (tiny_data is a fixture)

CPU = torch.device("cpu")


def run(tiny_data, out, **changes):
    return train(out=out, data=tiny_data, preset="tiny", overrides=tiny_overrides(**changes),
                 progress=False)


def parameters(run_dir, name=LAST):
    return read_checkpoint(run_dir / name)["model"]


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def tiny_trainer(seed=3, dropout=0.0, precision="fp32"):
    torch.manual_seed(seed)
    model = Transformer(dataclasses.replace(PRESETS["tiny"].model, dropout=dropout), 64)
    # Adam with the paper's eps 1e-9 moves every weight by about lr * sign(gradient), also
    # where the gradient is rounding noise around an exact zero (the key biases: softmax
    # ignores them), so float-tolerance comparisons use an eps far above that noise.
    cfg = dataclasses.replace(PRESETS["tiny"].train, max_tokens=96, adam_eps=1e-4)
    return Trainer(model, cfg, init_distributed("cpu"), precision)


def test_accumulated_batches_train_like_one_big_batch(tiny_data):
    data = load_split(tiny_data, "train")
    sampler = TokenBatchSampler(data.src_lengths, data.tgt_lengths, 96, seed=1)
    first, second = sampler.batch(0), sampler.batch(5)
    accumulated, merged = tiny_trainer(), tiny_trainer()
    result = accumulated.train_step([collate(data, first), collate(data, second)])
    merged_result = merged.train_step([collate(data, first + second)])
    assert result.updated and merged_result.updated and accumulated.step == 1
    assert result.tgt_tokens == merged_result.tgt_tokens
    assert result.nll == pytest.approx(merged_result.nll, rel=1e-5)
    for a, b in zip(accumulated.raw_model.parameters(), merged.raw_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_resumed_run_equals_an_uninterrupted_one(tiny_data, tmp_path):
    # update_freq 4 makes 12 steps cross an epoch end (about 40 batches an epoch) with a
    # short last step; dropout is on, so the random streams must be restored too.
    settings = dict(update_freq=4, max_steps=12)
    straight = run(tiny_data, tmp_path / "straight", **settings)
    assert straight.epoch > 1
    stopped = run(tiny_data, tmp_path / "resumed", **settings | {"max_steps": 5})
    assert stopped.stopped_by == "max_steps" and stopped.step == 5
    resumed = train(resume=tmp_path / "resumed", overrides=[("max_steps", 12)], progress=False)
    assert resumed.step == 12
    a, b = parameters(tmp_path / "straight"), parameters(tmp_path / "resumed")
    assert all(torch.equal(a[name], b[name]) for name in a)
    optimizer_a = read_checkpoint(tmp_path / "straight" / LAST)["trainer"]["optimizer"]["state"]
    optimizer_b = read_checkpoint(tmp_path / "resumed" / LAST)["trainer"]["optimizer"]["state"]
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
    best = read_checkpoint(run_dir / "checkpoint_best.pt")
    valid = [r for r in metrics(run_dir) if r["event"] == "valid"]
    assert [r["step"] for r in valid] == [2, 4, 6]
    best_record = min(valid, key=lambda r: r["nll"])
    assert best["step"] == best_record["step"] and best_record["best"]
    assert summary.best_valid_nll == pytest.approx(best_record["nll"])
    checkpoint = read_checkpoint(run_dir / LAST)
    assert set(checkpoint) >= {"model", "vocab", "model_config", "train_config", "trainer",
                               "sampler", "rng", "step", "epoch", "data_digest", "progress"}


def test_limits_by_epochs_and_time(tiny_data, tmp_path):
    summary = run(tiny_data, tmp_path / "epochs", max_epochs=1, max_steps=10_000, update_freq=8)
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
    assert read_checkpoint(tmp_path / "run" / LAST)["step"] == 2
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())


def test_a_skipped_update_leaves_the_weights_alone(tiny_data):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer()
    trainer.raw_model.encoder_layers[0].ffn.linear1.weight.data[0, 0] = math.inf
    before = [p.detach().clone() for p in trainer.raw_model.parameters()]
    result = trainer.train_step([collate(data, [0, 1])])
    assert not result.updated and result.skipped.startswith("non-finite")
    assert trainer.step == 0 and trainer.bad_steps == 1
    after = list(trainer.raw_model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_validation_bleu_hook_and_greedy_default(tiny_data, tmp_path):
    seen = []
    train(out=tmp_path / "hook", data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_steps=2, valid_every=1, valid_bleu=True),
          valid_bleu=lambda model: seen.append(model) or 12.5)
    valid = [r for r in metrics(tmp_path / "hook") if r["event"] == "valid"]
    assert [r["bleu"] for r in valid] == [12.5, 12.5]
    assert isinstance(seen[0], Transformer)
    run(tiny_data, tmp_path / "greedy", max_steps=1, valid_bleu=True)
    (record,) = [r for r in metrics(tmp_path / "greedy") if r["event"] == "valid"]
    assert 0 <= record["bleu"] <= 100


def test_cpu_bf16_uses_the_math_attention_kernel_for_short_batches():
    assert isinstance(attention_kernels(CPU, "fp32", 25), contextlib.nullcontext)
    assert not isinstance(attention_kernels(CPU, "bf16", 25), contextlib.nullcontext)
    assert isinstance(attention_kernels(CPU, "bf16", 400), contextlib.nullcontext)


def test_precision_choices():
    assert resolve_precision("auto", CPU) == ("bf16" if bf16_supported(CPU) else "fp32")
    assert resolve_precision("fp32", CPU) == "fp32"
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU)


@pytest.mark.skipif(not bf16_supported(CPU), reason="this CPU has no native bf16")
def test_bf16_step_keeps_float32_weights_and_optimizer(tiny_data):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(precision="bf16")
    result = trainer.train_step([collate(data, [0, 1, 2])])
    assert result.updated and math.isfinite(result.loss)
    assert all(p.dtype == torch.float32 for p in trainer.raw_model.parameters())
    state = next(iter(trainer.optimizer.state.values()))
    assert state["exp_avg"].dtype == torch.float32
