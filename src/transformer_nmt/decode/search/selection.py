"""The best entries of each row of a step's scores: `top_k` and `row_max`, as torch.topk
and torch.max(dim=1) compute them, faster on a CPU.

A search picks a handful of entries out of every row's vocabulary (beam search: 2k of
beam × vocabulary per sentence). On a CPU, PyTorch's reductions that return indices
(topk, max and argmax along a dimension) walk a row one element at a time and cost
many times more per element than the vectorized `amax`: topk alone took a visible
share of a beam step. So each row is cut into
blocks of BLOCK entries, every block's largest entry is found with `amax`, and the slow
reductions run only over the few blocks that can hold the answer. The results are those
of the torch functions (the same values; among equal values possibly other indices,
which torch.topk does not fix either); on other devices the torch functions are called
as they are.
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 64
"""Entries per block: small enough that k blocks are few entries to sort, large enough
that the blocks' maxima are few."""


def _blocked(scores: Tensor, k: int) -> bool:
    """Whether scores (rows, n) are worth the blocked path for k entries per row."""
    return scores.device.type == "cpu" and scores.size(1) >= 4 * k * BLOCK


def _blocks(scores: Tensor) -> tuple[Tensor, int]:
    """scores (rows, n) as (rows, n // BLOCK, BLOCK) whole blocks (a view), and the
    number of entries they cover; the rest form a partial last block."""
    rows, n = scores.shape
    whole = n - n % BLOCK
    return scores[:, :whole].view(rows, whole // BLOCK, BLOCK), whole


def top_k(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """torch.topk(scores, k, dim=1): the k largest values of each row of scores (rows, n),
    largest first, and their indices, both (rows, k). k <= n.

    Why the blocks suffice: if the i-th largest value v_i of a row lies in a block that
    was not kept, each of the k kept blocks has a maximum >= v_i, so the kept entries
    still hold k values >= v_i; the k largest kept values are therefore the row's.
    """
    if not _blocked(scores, k):
        return scores.topk(k, dim=1)
    rows, n = scores.shape
    blocks, whole = _blocks(scores)
    kept = blocks.amax(dim=2).topk(k, dim=1).indices  # (rows, k) the blocks with the largest maxima
    candidates = blocks.gather(1, kept.unsqueeze(2).expand(rows, k, BLOCK)).view(rows, k * BLOCK)
    index = (kept.unsqueeze(2) * BLOCK + torch.arange(BLOCK)).view(rows, k * BLOCK)
    if whole < n:  # a partial last block always takes part
        candidates = torch.cat([candidates, scores[:, whole:]], dim=1)
        index = torch.cat([index, torch.arange(whole, n).expand(rows, n - whole)], dim=1)
    values, position = candidates.topk(k, dim=1)  # (rows, k)
    return values, index.gather(1, position)


def row_max(scores: Tensor) -> tuple[Tensor, Tensor]:
    """torch.max(scores, dim=1): the largest value of each row of scores (rows, n) and the
    index of its first occurrence, both (rows,)."""
    if not _blocked(scores, 1):
        return scores.max(dim=1)
    rows, n = scores.shape
    blocks, whole = _blocks(scores)
    first_block = blocks.amax(dim=2).argmax(dim=1)  # (rows,) the first block holding the maximum
    block = blocks.gather(1, first_block.view(rows, 1, 1).expand(rows, 1, BLOCK)).squeeze(1)
    values, offset = block.max(dim=1)  # (rows,): first occurrence within that block
    index = first_block * BLOCK + offset
    if whole < n:
        # The partial last block comes after every whole one: it wins only if larger.
        rest_values, rest_offset = scores[:, whole:].max(dim=1)
        later = rest_values > values
        values = torch.where(later, rest_values, values)
        index = torch.where(later, rest_offset + whole, index)
    return values, index
