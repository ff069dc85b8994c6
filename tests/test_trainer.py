"""The training loop: one big batch, exact resume, limits, skipped updates, validation."""

import contextlib
import dataclasses
import json
import math
import weakref

import pytest
import torch

from transformer_nmt.config import PRESETS
from transformer_nmt.data.batching import TokenBatchSampler, collate
from transformer_nmt.data.binarize import load_split
from transformer_nmt.errors import UserError
from transformer_nmt.runtime import bf16_supported
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.train import metrics as metrics_module
from transformer_nmt.train import trainer as trainer_module
from transformer_nmt.train.checkpoint import LAST, numbered_checkpoints
from transformer_nmt.model_file import read_model_file
from transformer_nmt.train.distributed import init_distributed
from transformer_nmt.train.trainer import Trainer, attention_kernels, train

from train_fixtures import tiny_data, tiny_overrides  # noqa: F401  (tiny_data is a fixture)

CPU = torch.device("cpu")


def run(tiny_data, out, **changes):
    return train(out=out, data=tiny_data, preset="tiny", overrides=tiny_overrides(**changes),
                 progress=False)


def parameters(run_dir, name=LAST):
    return read_model_file(run_dir / name)["model"]


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
    assert read_model_file(tmp_path / "run" / LAST)["step"] == 2
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


@pytest.mark.skipif(not bf16_supported(CPU), reason="this CPU has no native bf16")
def test_bf16_step_keeps_float32_weights_and_optimizer(tiny_data):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(precision="bf16")
    result = trainer.train_step([collate(data, [0, 1, 2])])
    assert result.updated and math.isfinite(result.loss)
    assert all(p.dtype == torch.float32 for p in trainer.raw_model.parameters())
    state = next(iter(trainer.optimizer.state.values()))
    assert state["exp_avg"].dtype == torch.float32


def snapshot(trainer):
    return [p.detach().clone() for p in trainer.parameters]


def unchanged(trainer, before):
    return all(torch.equal(a, b) for a, b in zip(before, trainer.parameters))


def batches(data, *indices):
    sampler = TokenBatchSampler(data.src_lengths, data.tgt_lengths, 96, seed=1)
    return [collate(data, sampler.batch(i)) for i in indices]


def test_a_step_out_of_gpu_memory_is_skipped_and_leaves_nothing_behind(tiny_data,
                                                                        monkeypatch):
    # CPU trainers let an out of memory through; turned on, the GPU path runs here.
    data = load_split(tiny_data, "train")
    failing, following = batches(data, 0, 1, 2), batches(data, 3, 4)
    trainer = tiny_trainer()
    trainer.skip_out_of_memory = True
    real_forward_backward = trainer._forward_backward
    calls = []

    def forward_backward(batch, weight):
        calls.append((batch, weight))
        if batch is failing[1]:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward_backward(batch, weight)

    monkeypatch.setattr(trainer, "_forward_backward", forward_backward)
    before = snapshot(trainer)
    result = trainer.train_step(failing)
    assert not result.updated and result.skipped == "out of GPU memory"
    assert trainer.step == 0 and trainer.skipped_total == 1 and trainer.bad_steps == 0
    assert unchanged(trainer, before)
    assert all(p.grad is None or not p.grad.any() for p in trainer.parameters)
    # The rest of the step runs the zero-weight dummy: every process must run its last
    # batch's backward, where DDP synchronizes the gradients.
    assert [weight for _, weight in calls] == [1.0, 1.0, 0.0] and calls[2][0] is trainer._dummy

    result = trainer.train_step(following)
    fresh = tiny_trainer()
    expected = fresh.train_step(following)
    assert result.updated and trainer.step == 1 and trainer.skipped_total == 1
    assert result.loss == expected.loss and result.grad_norm == expected.grad_norm
    assert all(torch.equal(a, b) for a, b in zip(trainer.parameters, fresh.parameters))


def test_out_of_memory_recovery_waits_for_the_failed_batch_to_be_freed(tiny_data,
                                                                       monkeypatch):
    # Inside the except clause the traceback still holds the failed forward's frames and
    # their tensors: emptying the cache (or running DDP's dummy batch) there frees nothing.
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer()
    trainer.skip_out_of_memory = True
    activations = []

    def forward_backward(batch, weight):
        held = torch.zeros(1000)
        activations.append(weakref.ref(held))
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    freed_when_emptying = []
    monkeypatch.setattr(trainer, "_forward_backward", forward_backward)
    monkeypatch.setattr(torch.cuda, "empty_cache",
                        lambda: freed_when_emptying.append(activations[0]() is None))
    assert trainer.train_step(batches(data, 0)).skipped == "out of GPU memory"
    assert freed_when_emptying == [True]


def test_out_of_memory_on_the_cpu_is_raised(tiny_data, monkeypatch):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer()
    assert not trainer.skip_out_of_memory

    def forward_backward(batch, weight):
        raise torch.OutOfMemoryError("out of memory (simulated)")

    monkeypatch.setattr(trainer, "_forward_backward", forward_backward)
    with pytest.raises(torch.OutOfMemoryError):
        trainer.train_step(batches(data, 0))
    assert trainer.skipped_total == 0


# fp16 runs on the CPU when the Trainer is built directly (`nmt train` refuses it there:
# resolve_precision), which puts its gradient scaler under test.

def fp16_steps_until_an_update(trainer, data):
    """Train on successive batches until an update; the results and the scale before each."""
    results, scales = [], []
    for index in range(10):
        scales.append(trainer.scaler.get_scale())
        results.append(trainer.train_step(batches(data, index)))
        if results[-1].updated:
            return results, scales
    raise AssertionError(f"no fp16 update in 10 steps: {results}")


def test_fp16_overflows_halve_the_scale_until_a_step_fits_in_float32_weights(tiny_data):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(precision="fp16")
    before = snapshot(trainer)
    results, scales = fp16_steps_until_an_update(trainer, data)
    # GradScaler's first scale, 2^16, overflows the summed loss's gradient.
    skipped = len(results) - 1
    assert skipped >= 1 and all(r.skipped == "fp16 overflow" for r in results[:-1])
    assert scales == [2.0 ** (16 - k) for k in range(skipped + 1)]
    assert trainer.step == 1 and trainer.bad_steps == 0 and trainer.skipped_total == skipped
    assert math.isfinite(results[-1].loss) and math.isfinite(results[-1].grad_norm)
    assert not any(torch.equal(a, b) for a, b in zip(before, trainer.parameters))
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in trainer.parameters)
    # Adam's step count, which sets its bias correction, counts the update alone.
    state = next(iter(trainer.optimizer.state.values()))
    assert state["exp_avg"].dtype == torch.float32 and int(state["step"]) == 1


def test_an_fp16_overflow_skips_the_update_without_counting_a_bad_step(tiny_data,
                                                                        monkeypatch):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(precision="fp16")
    fp16_steps_until_an_update(trainer, data)
    skipped_before, scale_before = trainer.skipped_total, trainer.scaler.get_scale()
    real_forward_backward = trainer._forward_backward

    def overflowing_forward_backward(batch, weight):
        sums = real_forward_backward(batch, weight)
        trainer.raw_model.encoder_layers[0].ffn.linear1.weight.grad[0, 0] = math.inf
        return sums

    monkeypatch.setattr(trainer, "_forward_backward", overflowing_forward_backward)
    before = snapshot(trainer)
    adam_before = {p: {name: t.clone() for name, t in state.items()}
                   for p, state in trainer.optimizer.state.items()}
    result = trainer.train_step(batches(data, 20))
    assert not result.updated and result.skipped == "fp16 overflow"
    assert trainer.step == 1 and trainer.bad_steps == 0
    assert trainer.skipped_total == skipped_before + 1
    assert trainer.scaler.get_scale() == scale_before / 2
    assert unchanged(trainer, before)
    assert all(torch.equal(adam_before[p][name], t)
               for p, state in trainer.optimizer.state.items() for name, t in state.items())
    monkeypatch.undo()
    assert trainer.train_step(batches(data, 21)).updated and trainer.step == 2


def test_the_fp16_scaler_state_is_saved_and_restored(tiny_data):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(precision="fp16")
    fp16_steps_until_an_update(trainer, data)
    restored = tiny_trainer(precision="fp16")
    assert restored.scaler.state_dict() != trainer.scaler.state_dict()
    restored.load_state_dict(trainer.state_dict())
    assert restored.scaler.state_dict() == trainer.scaler.state_dict()
    assert restored.scaler.get_scale() < 2.0 ** 16


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
