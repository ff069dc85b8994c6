"""Top-k and row maxima over blocks (decode/search/selection.py) against torch's own."""

from __future__ import annotations

import pytest
import torch

from transformer_nmt.decode.search.selection import BLOCK, row_max, top_k


def scores(rows: int, width: int, seed: int = 0) -> torch.Tensor:
    """Random scores with the cases a search meets: rows mostly at -inf (forced EOS, a
    banned vocabulary), exact ties, a row with one finite entry near its end."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=generator)
    x[0, 100:] = float("-inf")
    x[1] = x[1].mul(2).round()  # many equal values
    x[2] = float("-inf")
    x[2, width - 3] = -1.5
    return x


@pytest.mark.parametrize("width", [8000, 4 * BLOCK * 8 + 5, 32000 + 37])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_top_k_gives_torch_topk_values_and_indices_of_them(width, k):
    x = scores(6, width, seed=width + k)
    values, index = top_k(x, k)
    expected_values, _ = x.topk(k, dim=1)
    assert torch.equal(values, expected_values)
    assert torch.equal(x.gather(1, index), values)
    assert all(len(set(row)) == k for row in index.tolist())  # k different entries
    # Distinct values leave no choice: the very same indices.
    distinct = [0, 3, 4, 5]
    assert torch.equal(index[distinct], x.topk(k, dim=1).indices[distinct])


def test_top_k_of_narrow_rows_is_torch_topk():
    x = scores(4, 200)
    assert all(torch.equal(a, b) for a, b in zip(top_k(x, 8), x.topk(8, dim=1)))


@pytest.mark.parametrize("width", [8000, 8001, 2 * BLOCK * 4 + 1, 100])
def test_row_max_is_torch_max_first_occurrence_included(width):
    x = scores(6, width, seed=width)
    x[3, 5] = x[3, width - 1] = 50.0  # the first of two maxima counts
    if width > BLOCK + 2:
        x[4, BLOCK + 1] = x[4, BLOCK - 1] = 60.0
    values, index = row_max(x)
    expected_values, expected_index = x.max(dim=1)
    assert torch.equal(values, expected_values)
    assert torch.equal(index, expected_index)


def test_row_max_prefers_a_larger_value_in_the_partial_last_block():
    x = torch.zeros(2, 4 * BLOCK + 3)
    x[0, -1] = 1.0  # only in the tail
    x[1, -2] = x[1, 0] = 1.0  # a tie: the earlier one
    assert row_max(x)[1].tolist() == [4 * BLOCK + 2, 0]
