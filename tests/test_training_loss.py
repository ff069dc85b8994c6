"""Label-smoothed cross entropy: PyTorch's definition, padding ignored, sums per token."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_nmt.training import loss as loss_module
from transformer_nmt.training.loss import (label_smoothed_nll, perplexity,
                                     projected_label_smoothed_nll)


def random_batch(seed=0, batch=3, length=5, vocab=11, pad=0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=generator)
    target = torch.randint(1, vocab, (batch, length), generator=generator)
    target[0, 3:] = pad
    target[2, 1:] = pad
    return logits, target


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.2])
def test_matches_torch_cross_entropy(epsilon):
    logits, target = random_batch()
    loss, nll = label_smoothed_nll(logits, target, epsilon, pad_id=0)
    flat_logits, flat_target = logits.reshape(-1, logits.size(-1)), target.reshape(-1)
    expected = F.cross_entropy(flat_logits, flat_target, ignore_index=0,
                               label_smoothing=epsilon, reduction="sum")
    expected_nll = F.cross_entropy(flat_logits, flat_target, ignore_index=0, reduction="sum")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected_nll)
    assert loss.dtype == nll.dtype == torch.float32


def test_padding_counts_for_nothing():
    logits, target = random_batch()
    loss, nll = label_smoothed_nll(logits, target, 0.1)
    noisy = logits.clone()
    noisy[target.eq(0)] = 1e4  # whatever the model says at padding
    loss2, nll2 = label_smoothed_nll(noisy, target, 0.1)
    torch.testing.assert_close((loss, nll), (loss2, nll2))


def test_gradient_flows_through_loss_only():
    logits, target = random_batch()
    logits.requires_grad_(True)
    loss, nll = label_smoothed_nll(logits, target, 0.1)
    assert not nll.requires_grad
    loss.backward()
    assert logits.grad[target.eq(0)].abs().sum() == 0
    assert logits.grad[target.ne(0)].abs().sum() > 0


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_gradient_matches_autograd_of_the_definition(epsilon):
    logits, target = random_batch(seed=1)
    ours = logits.double().requires_grad_(True)
    reference = logits.double().requires_grad_(True)
    loss, _ = label_smoothed_nll(ours, target, epsilon)
    (loss * 0.5).backward()
    expected = F.cross_entropy(reference.reshape(-1, 11), target.reshape(-1), ignore_index=0,
                               label_smoothing=epsilon, reduction="sum")
    (expected * 0.5).backward()
    torch.testing.assert_close(ours.grad, reference.grad)
    assert torch.equal(ours, reference)  # the backward worked on a copy


def test_bf16_logits_give_float32_sums():
    logits, target = random_batch()
    loss, _ = label_smoothed_nll(logits.bfloat16(), target, 0.1)
    reference, _ = label_smoothed_nll(logits.bfloat16().float(), target, 0.1)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, reference)


def projection_batch(seed=2, vocab=11, d_model=6):
    """Decoder states (3, 5, d_model), a projection weight (vocab, d_model), padded targets."""
    generator = torch.Generator().manual_seed(seed)
    _, target = random_batch(seed=seed, vocab=vocab)
    states = torch.randn(3, 5, d_model, generator=generator, dtype=torch.float64)
    weight = torch.randn(vocab, d_model, generator=generator, dtype=torch.float64)
    return states, weight, target


@pytest.mark.parametrize("rows_per_chunk", [1, 2, 100])
def test_projected_loss_equals_the_loss_of_the_projected_logits(monkeypatch, rows_per_chunk):
    # Chunks of 1 and 2 rows cross every chunk boundary; 100 is one chunk for all.
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", rows_per_chunk * 11)
    states, weight, target = projection_batch()
    ours = [states.clone().requires_grad_(True), weight.clone().requires_grad_(True)]
    reference = [states.clone().requires_grad_(True), weight.clone().requires_grad_(True)]
    loss, nll = projected_label_smoothed_nll(ours[0], ours[1], target, 0.1)
    expected, expected_nll = label_smoothed_nll(reference[0] @ reference[1].t(), target, 0.1)
    assert not nll.requires_grad
    (loss * 0.5).backward()
    (expected * 0.5).backward()
    torch.testing.assert_close((loss, nll), (expected.float(), expected_nll.float()))
    for mine, theirs in zip(ours, reference):  # float32 sums inside: float32 tolerance
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-6)
    assert ours[0].grad[target.eq(0)].abs().sum() == 0


@pytest.mark.parametrize("rows_per_chunk", [1, 100])
def test_projected_loss_with_a_logits_bias_equals_cross_entropy_of_the_biased_logits(
        monkeypatch, rows_per_chunk):
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", rows_per_chunk * 11)
    states, weight, target = projection_batch()
    bias = 3 * torch.randn(11, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ours = [states.clone().requires_grad_(True), weight.clone().requires_grad_(True)]
    reference = [states.clone().requires_grad_(True), weight.clone().requires_grad_(True)]
    loss, nll = projected_label_smoothed_nll(ours[0], ours[1], target, 0.1, bias=bias)
    logits = F.linear(reference[0], reference[1], bias)  # (3, 5, 11) every logit at once
    expected = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=0,
                               label_smoothing=0.1, reduction="sum")
    expected_nll = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=0,
                                   reduction="sum")
    loss.backward()
    expected.backward()
    torch.testing.assert_close((loss, nll), (expected.float(), expected_nll.float()))
    for mine, theirs in zip(ours, reference):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-6)
    unbiased, _ = projected_label_smoothed_nll(states, weight, target, 0.1)
    assert abs(unbiased.item() - loss.item()) > 0.1  # the bias counted


class _ProductShapes(TorchDispatchMode):
    """Records the operand shapes of every matrix product."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            self.shapes.append((tuple(args[0].shape), tuple(args[1].shape)))
        return func(*args, **(kwargs or {}))


def test_every_product_of_the_projected_loss_has_rows_in_multiples(monkeypatch):
    # A new product shape costs a compiled kernel in bf16 on a CPU: the chunks' rows
    # (the last chunk's included) come in multiples, whatever the number of tokens.
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", 128 * 11)
    states, weight, target = projection_batch()  # 15 positions, some of them padding
    with _ProductShapes() as recorded:
        projected_label_smoothed_nll(states.requires_grad_(True), weight, target, 0.1)
    vocab, multiple = weight.size(0), loss_module.CHUNK_ROW_MULTIPLE
    # (rows, d) @ (d, vocab), (rows, vocab) @ (vocab, d), and (vocab, rows) @ (rows, d)
    rows = [left[1] if left[0] == vocab else left[0] for left, _ in recorded.shapes]
    assert len(rows) == 3 and all(count % multiple == 0 for count in rows)


def test_projected_loss_without_gradients_gives_the_same_sums():
    states, weight, target = projection_batch()
    weight = torch.nn.Parameter(weight)  # as in validation: a parameter, under no_grad
    with_grad = projected_label_smoothed_nll(states.requires_grad_(True), weight, target, 0.1)
    with torch.no_grad():
        without = projected_label_smoothed_nll(states, weight, target, 0.1)
    torch.testing.assert_close(with_grad, without)


@pytest.mark.parametrize("with_bias", [False, True])
def test_projected_loss_under_autocast_projects_in_bf16(with_bias):
    states, weight, target = (t.float() if t.is_floating_point() else t
                              for t in projection_batch())
    bias = torch.randn(11, generator=torch.Generator().manual_seed(7)) if with_bias else None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = projected_label_smoothed_nll(states, weight, target, 0.1, bias=bias)
        logits = F.linear(states, weight, bias)  # what autocast does to the projection
    expected, _ = label_smoothed_nll(logits, target, 0.1)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected)


def test_perplexity():
    assert perplexity(0.0) == 1.0
    assert perplexity(math.log(42.0)) == pytest.approx(42.0)
    assert perplexity(1e6) == math.inf


def test_the_loss_projects_in_chunks_on_a_cpu_and_in_one_piece_on_a_gpu():
    from transformer_nmt.training.loss import CHUNK_ROW_MULTIPLE, _chunk_rows

    cpu_rows = _chunk_rows(37000, 12500, torch.device("cpu"))
    assert 0 < cpu_rows < 12500 and cpu_rows % CHUNK_ROW_MULTIPLE == 0
    assert _chunk_rows(37000, 12500, torch.device("cuda")) == 12500
    assert _chunk_rows(37000, 0, torch.device("cuda")) == 1  # no zero step for range()
