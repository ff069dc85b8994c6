"""One optimizer step (training/trainer.py): accumulation equals one big batch, in buffers
outside any graph pool as it did in `.grad`, skipped updates
leave nothing behind (non-finite, out of GPU memory, fp16 overflow), bf16 and fp16 keep
float32 weights, evaluation keeps the model's mode, and the trainer's state round-trips."""

import contextlib
import dataclasses
import math
import weakref

import pytest
import torch

from transformer_nmt.config import PRESETS
from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.collate import collate
from transformer_nmt.data.binarize import load_split
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.runtime import bf16_supported
from transformer_nmt.training.distributed import init_distributed
from transformer_nmt.training import trainer as trainer_module
from transformer_nmt.training.loss import label_smoothed_nll
from transformer_nmt.training.trainer import Trainer


CPU = torch.device("cpu")


def tiny_trainer(seed=3, dropout=0.0, precision="fp32", **model_changes):
    torch.manual_seed(seed)
    model = Transformer(dataclasses.replace(PRESETS["tiny"].model, dropout=dropout,
                                            **model_changes), 64)
    # Adam with the paper's eps 1e-9 moves every weight by about lr * sign(gradient), also
    # where the gradient is rounding noise around an exact zero (the key biases: softmax
    # ignores them), so float-tolerance comparisons use an eps far above that noise.
    cfg = dataclasses.replace(PRESETS["tiny"].train, adam_eps=1e-4)
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


class TodaysTrainer(Trainer):
    """The accumulation before the trainer's buffers: every `.grad` unset before a step,
    so that the first backward stores autograd's own tensor there and the next ones add
    to it."""

    def _point_grads_at_buffers(self):
        self.optimizer.zero_grad(set_to_none=True)


def pooled_gradients(trainer):
    """`trainer` with every parameter's gradient handed over in one tensor per parameter
    that the next backward overwrites, as a backward replayed from a CUDA graph hands
    them over in the graphs' memory pool."""
    for parameter in trainer.parameters:
        pool = torch.empty_like(parameter)

        def replayed(grad, pool=pool):
            pool.copy_(grad)
            return pool.view_as(pool)  # a fresh tensor on the pool's memory

        parameter.register_hook(replayed)
    return trainer


def test_micro_batches_accumulate_in_the_trainers_buffers_as_they_did_in_grad(tiny_data):
    data = load_split(tiny_data, "train")
    steps = [batches(data, 0, 5, 9), batches(data, 2, 7, 11)]
    # Pinned to fp32 (tiny_trainer's precision): the buffers' first addition is onto
    # zero, the next ones are autograd's own, in the same order: the same update, exactly.
    ours, today = tiny_trainer(), tiny_trainer()
    today.__class__ = TodaysTrainer
    for step in steps:
        result, expected = ours.train_step(step), today.train_step(step)
        assert result.updated and result.grad_norm == expected.grad_norm
        assert all(torch.equal(a, b) for a, b in zip(ours.parameters, today.parameters))
    # The buffers are the gradients the optimizer read, zeroed for the next step.
    assert all(p.grad is buffer and not buffer.any()
               for p, buffer in zip(ours.parameters, ours._grads))


def test_gradients_handed_over_in_a_graph_pool_accumulate_outside_it(tiny_data):
    data = load_split(tiny_data, "train")
    step = batches(data, 0, 5)
    plain, pooled = tiny_trainer(), pooled_gradients(tiny_trainer())
    assert plain.train_step(step).updated and pooled.train_step(step).updated
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters, pooled.parameters))
    # Today's accumulation kept the first micro-batch's gradient in the pool and added
    # the second to the memory the second had overwritten: another update.
    today = pooled_gradients(tiny_trainer())
    today.__class__ = TodaysTrainer
    assert today.train_step(step).updated
    assert not all(torch.equal(a, b) for a, b in zip(plain.parameters, today.parameters))


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


@pytest.mark.skipif(not bf16_supported(CPU), reason="this CPU has no native bf16")
def test_bf16_step_keeps_float32_weights_and_optimizer(tiny_data):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(precision="bf16")
    result = trainer.train_step([collate(data, [0, 1, 2])])
    assert result.updated and math.isfinite(result.loss)
    assert all(p.dtype == torch.float32 for p in trainer.raw_model.parameters())
    state = next(iter(trainer.optimizer.state.values()))
    assert state["exp_avg"].dtype == torch.float32


@pytest.mark.parametrize("changes", [dict(activation="swish"), dict(activation="gelu"),
                                     dict(positional="sinusoidal-halves"),
                                     dict(logits_bias=True),
                                     dict(logits_bias=True, tie_embeddings="none")])
def test_a_step_trains_each_architecture_and_leaves_the_logits_bias_alone(tiny_data, changes):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(**changes)
    model = trainer.raw_model
    if model.logits_bias is not None:
        model.logits_bias.copy_(torch.randn(64, generator=torch.Generator().manual_seed(1)))
        assert all(p is not model.logits_bias for p in trainer.parameters)
    bias = None if model.logits_bias is None else model.logits_bias.clone()
    batch = collate(data, [0, 1, 2])
    # The chunked loss of the decoder states is the loss of the model's whole logits.
    with torch.no_grad():
        logits = model.eval()(batch.src, batch.tgt_in)  # (batch, tgt_len, vocab)
    expected, _ = label_smoothed_nll(logits, batch.tgt_out, trainer.cfg.label_smoothing)
    assert trainer.evaluate([batch])["loss"] == pytest.approx(
        expected.item() / batch.tgt_tokens, rel=1e-5)
    before = snapshot(trainer)
    result = trainer.train_step([batch])
    assert result.updated and not unchanged(trainer, before)
    assert result.loss == pytest.approx(expected.item(), rel=1e-5)  # dropout is 0
    if bias is not None:
        assert torch.equal(model.logits_bias, bias)


def steps_kept_apart(monkeypatch, trainer: Trainer) -> list[int]:
    """The steps (trainer.step before each) that `trainer` runs inside kept_apart, filled
    in as it trains."""
    apart_at = []

    @contextlib.contextmanager
    def recording():
        apart_at.append(trainer.step)
        yield

    monkeypatch.setattr(trainer_module, "kept_apart", recording)
    return apart_at


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_bf16_steps_that_meet_new_shapes_keep_their_blocks_apart(tiny_data, monkeypatch,
                                                                  precision):
    # Each new shape of a bf16 product compiles a kernel on a CPU (trainer.kept_apart);
    # fp32 keeps nothing per shape.
    data = load_split(tiny_data, "train")
    first, same, other = batches(data, 0, 0, 3)
    assert first.tgt_in.numel() != other.tgt_in.numel()
    trainer = tiny_trainer(precision=precision)
    apart_at = steps_kept_apart(monkeypatch, trainer)
    for batch in (first, same, other):
        assert trainer.train_step([batch]).updated
    assert apart_at == ([0, 2] if precision == "bf16" else [])


def test_a_bf16_step_of_known_row_counts_but_new_lengths_keeps_its_blocks_apart(tiny_data,
                                                                              monkeypatch):
    # Attention's products are per sentence: 2 sentences of twice the length have the
    # linear layers' row counts of 4 sentences, and new attention shapes all the same.
    data = load_split(tiny_data, "train")
    four = collate(data, [0, 1, 2, 3])
    trainer = tiny_trainer(precision="bf16")
    pad = trainer.raw_model.pad_id

    def widened(tensor):  # rows 0-1 of `tensor`, padded to twice its length
        return torch.nn.functional.pad(tensor[:2], (0, tensor.size(1)), value=pad)

    src, tgt_out = widened(four.src), widened(four.tgt_out)
    two = dataclasses.replace(four, src=src, tgt_in=widened(four.tgt_in), tgt_out=tgt_out,
                              indices=four.indices[:2], tgt_tokens=int((tgt_out != pad).sum()),
                              src_tokens=int((src != pad).sum()))
    assert (two.src.numel(), two.tgt_in.numel()) == (four.src.numel(), four.tgt_in.numel())
    apart_at = steps_kept_apart(monkeypatch, trainer)
    for batch in (four, two, two):
        assert trainer.train_step([batch]).updated
    assert apart_at == [0, 1]


@pytest.mark.parametrize("training", [True, False])
def test_evaluation_leaves_the_models_mode_as_it_found_it(tiny_data, training):
    data = load_split(tiny_data, "valid")
    trainer = tiny_trainer(dropout=0.1)
    trainer.raw_model.train(training)
    result = trainer.evaluate([collate(data, [0, 1, 2]), None])
    assert result["tokens"] > 0 and math.isfinite(result["nll"])
    assert all(module.training == training for module in trainer.raw_model.modules())


def test_evaluation_runs_in_the_precision_it_is_given(tiny_data):
    # Validation on a CPU runs in fp32 whatever the training's precision
    # (runtime.validation_precision): a bf16 trainer evaluates in fp32 when asked.
    batch = collate(load_split(tiny_data, "valid"), [0, 1, 2])
    trainer = tiny_trainer(precision="bf16")
    own, asked = trainer.evaluate([batch]), trainer.evaluate([batch], "fp32")
    trainer.precision = "fp32"
    assert asked == trainer.evaluate([batch])
    assert own["nll"] != asked["nll"]


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
