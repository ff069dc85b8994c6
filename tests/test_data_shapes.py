"""A fixed set of batch shapes: the grid, the sampler's batches and collate's empty rows,
and a training step that the empty rows leave unchanged."""

import dataclasses

import numpy as np
import pytest
import torch

from transformer_nmt.config import PRESETS
from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.collate import collate
from transformer_nmt.data.shapes import BatchShapes, length_grid
from transformer_nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.training.distributed import init_distributed
from transformer_nmt.training.trainer import Trainer


def test_the_grid_grows_geometrically_in_multiples_of_eight_up_to_the_longest():
    grid = length_grid(160)
    assert grid[0] == 8 and grid[-2] < 160 <= grid[-1]
    assert np.all(grid % 8 == 0) and np.all(np.diff(grid) >= 8)
    assert np.diff(grid)[-1] > 8  # coarser as lengths grow
    shapes = BatchShapes.for_lengths(160, 1000)
    assert shapes.padded(9) == 16 and shapes.padded(16) == 16
    assert shapes.padded(np.array([1, 8, 33])).tolist() == [8, 8, 40]
    assert shapes.rows(16, 40) == 1000 // 40 and shapes.rows(2000, 8) == 1
    with pytest.raises(ValueError):
        shapes.padded(10_000)


def lengths(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 90, count)
    return src, np.clip(src + rng.integers(-8, 9, count), 1, None)


def test_every_batch_has_a_shape_of_the_grid_and_the_sampler_counts_its_empty_rows():
    src, tgt = lengths(3000, seed=1)
    shapes = BatchShapes.for_lengths(int(max(src.max(), tgt.max())) + 1, 800)
    sampler = TokenBatchSampler(src, tgt, 800, seed=2, shapes=shapes)
    seen, padded, pairs = set(), 0, []
    for number in range(sampler.num_batches):
        batch = sampler.batch(number)
        pairs += batch
        src_len = shapes.padded(int(src[batch].max()) + 1)
        tgt_len = shapes.padded(int(tgt[batch].max()) + 1)
        rows = shapes.rows(src_len, tgt_len)
        assert len(batch) <= rows and rows * max(src_len, tgt_len) <= 800
        seen.add((rows, src_len, tgt_len))
        padded += rows * (src_len + tgt_len)
    assert sorted(pairs) == list(range(3000))
    # The shape follows from the two lengths: at most one per pair of grid lengths.
    assert len(seen) == len({(s, t) for _, s, t in seen}) <= len(shapes.grid) ** 2
    real = int((src + 1).sum() + (tgt + 1).sum())
    assert sampler.padding_efficiency() == pytest.approx(real / padded)
    exact = TokenBatchSampler(src, tgt, 800, seed=2)
    assert len(seen) < len({len(exact.batch(n)) for n in range(exact.num_batches)})


def test_a_sampler_resumed_with_other_shapes_cuts_its_batches_anew():
    src, tgt = lengths(500, seed=3)
    shapes = BatchShapes.for_lengths(100, 400)
    plain = TokenBatchSampler(src, tgt, 400, seed=1)
    iterator = iter(plain)
    for _ in range(plain.num_batches // 2):
        next(iterator)
    resumed = TokenBatchSampler(src, tgt, 400, seed=1, shapes=shapes)
    resumed.load_state_dict(plain.state_dict())
    assert resumed.position == 0 and resumed.consumed == pytest.approx(
        resumed.num_batches / 2, abs=1)
    with pytest.raises(ValueError):
        TokenBatchSampler(src, tgt, 500, seed=1, shapes=shapes)  # another budget


def test_collate_fills_a_batch_with_empty_rows_up_to_its_shape(tiny_data):
    data = load_split(tiny_data, "train")
    shapes = BatchShapes.for_lengths(64, 96)
    exact, filled = collate(data, [0, 1, 2]), collate(data, [0, 1, 2], shapes=shapes)
    rows, src_len = filled.src.shape
    tgt_len = filled.tgt_in.size(1)
    assert src_len in shapes.grid and tgt_len in shapes.grid
    assert rows == shapes.rows(src_len, tgt_len) > 3
    assert torch.equal(filled.src[:3, :exact.src.size(1)], exact.src)
    assert torch.equal(filled.tgt_out[:3, :exact.tgt_out.size(1)], exact.tgt_out)
    assert filled.src[3:, 0].eq(EOS_ID).all() and filled.src[3:, 1:].eq(PAD_ID).all()
    assert filled.tgt_in[3:, 0].eq(BOS_ID).all() and filled.tgt_out[3:].eq(PAD_ID).all()
    assert (filled.src_tokens, filled.tgt_tokens, filled.indices) == (
        exact.src_tokens, exact.tgt_tokens, exact.indices)


def tiny_trainer() -> Trainer:
    torch.manual_seed(3)
    model = Transformer(dataclasses.replace(PRESETS["tiny"].model, dropout=0.0), 64)
    cfg = dataclasses.replace(PRESETS["tiny"].train, adam_eps=1e-4)
    return Trainer(model, cfg, init_distributed("cpu"), "fp32")


def test_a_step_on_a_batch_with_empty_rows_trains_like_one_without(tiny_data):
    data = load_split(tiny_data, "train")
    indices = TokenBatchSampler(data.src_lengths, data.tgt_lengths, 96, seed=1).batch(2)[:5]
    shapes = BatchShapes.for_lengths(64, 96)
    filled = collate(data, indices, shapes=shapes)
    assert len(filled) > len(indices)
    plain_trainer, filled_trainer = tiny_trainer(), tiny_trainer()
    plain = plain_trainer.train_step([collate(data, indices)])
    with_rows = filled_trainer.train_step([filled])
    assert with_rows.updated and with_rows.tgt_tokens == plain.tgt_tokens
    assert with_rows.nll == pytest.approx(plain.nll, rel=1e-5)
    for a, b in zip(plain_trainer.raw_model.parameters(), filled_trainer.raw_model.parameters()):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_step_compiled_for_fixed_shapes_trains_like_the_eager_step(tiny_data):
    # torch.compile(dynamic=False), as the trainer compiles with shape_buckets on: the
    # compiled forward and backward give the eager step's update, to float tolerance.
    data = load_split(tiny_data, "train")
    shapes = BatchShapes.for_lengths(64, 96)
    sampler = TokenBatchSampler(data.src_lengths, data.tgt_lengths, 96, seed=1, shapes=shapes)
    batches = [collate(data, sampler.batch(i), shapes=shapes) for i in range(3)]
    eager = tiny_trainer()
    torch.manual_seed(3)
    model = Transformer(dataclasses.replace(PRESETS["tiny"].model, dropout=0.0), 64)
    cfg = dataclasses.replace(PRESETS["tiny"].train, adam_eps=1e-4, shape_buckets=True)
    compiled = Trainer(model, cfg, init_distributed("cpu"), "fp32", compile=True)
    for batch in batches:
        expected, found = eager.train_step([batch]), compiled.train_step([batch])
        assert found.updated and found.nll == pytest.approx(expected.nll, rel=1e-4)
    for a, b in zip(eager.raw_model.parameters(), compiled.raw_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
