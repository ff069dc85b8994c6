"""The spare buffers decoding caches' reorders gather into (decode/attention/spare_pool.py):
a buffer given back serves the next take of its shape, dtype and device, one of more rows
gives the pages of the rows not taken back to the operating system, and only the latest
shape is kept."""

from __future__ import annotations

import mmap

import pytest
import torch

from transformer_nmt import memory
from transformer_nmt.decode.attention.spare_pool import SparePool


def resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * mmap.PAGESIZE


def test_a_buffer_given_back_serves_the_next_take_of_its_kind_only():
    pool, like = SparePool(), torch.empty(4, 2, 3)
    fresh = pool.take(4, like)
    assert fresh.shape == (4, 2, 3) and fresh.dtype == like.dtype
    pool.give(fresh)
    assert pool.take(5, like).data_ptr() != fresh.data_ptr()  # too few rows: a new one
    assert pool.take(4, like.bfloat16()).data_ptr() != fresh.data_ptr()  # another dtype
    assert pool.take(3, like).data_ptr() == fresh.data_ptr()  # its first rows
    assert pool.take(3, like).data_ptr() != fresh.data_ptr()  # taken: no longer spare


def test_only_buffers_of_the_latest_shape_are_kept_two_at_most():
    pool = SparePool()
    old, one, two, three = (torch.empty(2, 5), torch.empty(2, 3), torch.empty(2, 3),
                            torch.empty(2, 3))
    for buffer in (old, one, two, three):
        pool.give(buffer)
    taken = {pool.take(2, one).data_ptr() for _ in range(3)}
    assert three.data_ptr() in taken and two.data_ptr() in taken
    assert one.data_ptr() not in taken
    assert pool.take(2, old).data_ptr() != old.data_ptr()  # another shape: dropped


@pytest.mark.skipif(memory._LIBC is None, reason="needs Linux with glibc")
def test_a_spare_taken_for_fewer_rows_gives_the_rest_back():
    pool = SparePool()
    like = torch.empty(32, 8, 128, 64)  # 8 MB, 256 KB a row
    spare = torch.ones_like(like)
    pool.give(spare)
    before = resident_bytes()
    taken = pool.take(8, like)
    assert taken.shape == (8, 8, 128, 64) and taken.data_ptr() == spare.data_ptr()
    assert before - resident_bytes() >= 0.9 * 24 * 256 * 2**10
    assert bool(taken.eq(1).all())
