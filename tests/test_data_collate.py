"""Padding a batch of pairs into tensors, with BOS, EOS and truncation."""

import torch

from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.collate import Batch, collate

from data_fixtures import make_split


def test_collate_adds_specials_and_pads(tmp_path):
    make_split(tmp_path)
    data = load_split(tmp_path, "train")
    batch = collate(data, [0, 1, 3])
    assert batch.src.tolist() == [[5, 6, 7, 3, 0], [3, 0, 0, 0, 0], [9, 10, 11, 12, 3]]
    assert batch.tgt_in.tolist() == [[2, 20, 0], [2, 21, 22], [2, 23, 24]]
    assert batch.tgt_out.tolist() == [[20, 3, 0], [21, 22, 3], [23, 24, 3]]
    assert (batch.src_tokens, batch.tgt_tokens) == (4 + 1 + 5, 2 + 3 + 3)
    assert batch.src.dtype == torch.int64 and len(batch) == 3 and batch.indices == [0, 1, 3]
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and torch.equal(moved.src, batch.src)


def test_collate_truncates_to_max_len_and_handles_no_rows(tmp_path):
    make_split(tmp_path)
    data = load_split(tmp_path, "train")
    batch = collate(data, [3], max_len=3)
    assert batch.src.tolist() == [[9, 10, 3]] and batch.tgt_out.tolist() == [[23, 24, 3]]
    empty = collate(data, [])
    assert empty.src.shape == (0, 1) and empty.tgt_in.shape == (0, 1) and len(empty) == 0
    assert (empty.src_tokens, empty.tgt_tokens) == (0, 0)


def test_collate_pads_each_side_to_a_multiple_of_the_length_multiple(tmp_path):
    make_split(tmp_path)
    data = load_split(tmp_path, "train")
    exact, padded = collate(data, [0, 1, 3]), collate(data, [0, 1, 3], length_multiple=4)
    assert padded.src.shape == (3, 8) and padded.tgt_in.shape == (3, 4)
    assert torch.equal(padded.src[:, :5], exact.src) and padded.src[:, 5:].eq(0).all()
    assert torch.equal(padded.tgt_out[:, :3], exact.tgt_out) and padded.tgt_out[:, 3:].eq(0).all()
    assert (padded.src_tokens, padded.tgt_tokens) == (exact.src_tokens, exact.tgt_tokens)
    # Never past the model's positions: max_len caps the padded length too.
    assert collate(data, [3], max_len=3, length_multiple=4).src.shape == (1, 3)
