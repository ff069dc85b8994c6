"""Handing decoding's memory back to the operating system."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys

import pytest
import torch

from transformer_nmt import memory
from transformer_nmt.runtime import bf16_supported

pytestmark = pytest.mark.skipif(memory._LIBC is None, reason="needs Linux with glibc")


def resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * mmap.PAGESIZE


def test_release_rows_frees_the_pages_past_the_rows_kept_and_keeps_the_rows():
    buffer = torch.ones(64, 256, 1024)  # 64 MB, 1 MB a row
    before = resident_bytes()
    memory.release_rows(buffer, 16)
    freed = before - resident_bytes()
    assert freed >= 0.9 * 48 * 2**20
    assert bool(buffer[:16].eq(1).all())
    assert bool(buffer[17:63].eq(0).all())  # whole pages past row 16 read as zeros now
    buffer.fill_(2)  # still ordinary, writable memory
    assert bool(buffer.eq(2).all())


def test_release_rows_leaves_small_tails_and_views_alone():
    buffer = torch.ones(4, 1024)  # 16 KB: below the size worth a system call
    memory.release_rows(buffer, 1)
    assert bool(buffer.eq(1).all())
    big = torch.ones(8, 2**18)
    memory.release_rows(big[2:], 0)  # does not start at its storage: left alone
    assert bool(big.eq(1).all())


def test_kept_apart_maps_large_blocks_apart_and_trims_the_heap_after_even_on_error(
        monkeypatch):
    calls = []

    class RecordingLibc:
        def mallopt(self, parameter, value):
            calls.append(("mallopt", parameter, value))

        def malloc_trim(self, pad):
            calls.append(("malloc_trim", pad))

    monkeypatch.setattr(memory, "_LIBC", RecordingLibc())
    with pytest.raises(RuntimeError):
        with memory.kept_apart():
            assert calls == [("mallopt", memory._M_MMAP_THRESHOLD, 256 << 10)]
            raise RuntimeError
    # Afterwards the heap serves blocks up to glibc's largest threshold again, as
    # keep_freed_memory set it, and hands its free pages back.
    assert calls[1:] == [("mallopt", memory._M_MMAP_THRESHOLD, memory._MMAP_THRESHOLD_MAX),
                         ("malloc_trim", 0)]


KERNELS_KEPT_PER_SHAPE = """
import ctypes, sys
import torch
import torch.nn.functional as F
from transformer_nmt import memory

if sys.argv[1] == "once":
    memory.keep_kernels_once()


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2


def in_use():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


torch.set_num_threads(1)
weight = torch.randn(64, 64, requires_grad=True)


def step(rows):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = F.linear(torch.randn(rows, 64, requires_grad=True), weight)
    out.float().sum().backward()


step(100)
before = in_use()
for rows in range(200, 240):
    step(rows)
print((in_use() - before) / 40)
"""


@pytest.mark.skipif(not bf16_supported(torch.device("cpu")), reason="no native bf16")
def test_kernels_kept_once_keep_less_memory_per_new_bf16_shape(monkeypatch):
    # ideep's own cache copies what oneDNN's keeps: about 0.8 of 1.9 MB a shape.
    monkeypatch.delenv(memory.IDEEP_CACHE_VARIABLE, raising=False)

    def bytes_per_shape(mode: str) -> float:
        run = subprocess.run([sys.executable, "-c", KERNELS_KEPT_PER_SHAPE, mode],
                             capture_output=True, text=True, check=True)
        return float(run.stdout)

    both, once = bytes_per_shape("both"), bytes_per_shape("once")
    assert once < both - 0.3 * 2**20, (once, both)


def test_keep_kernels_once_leaves_the_users_setting(monkeypatch):
    monkeypatch.setenv(memory.IDEEP_CACHE_VARIABLE, "64")
    memory.keep_kernels_once()
    assert os.environ[memory.IDEEP_CACHE_VARIABLE] == "64"
    monkeypatch.delenv(memory.IDEEP_CACHE_VARIABLE)
    memory.keep_kernels_once()
    assert os.environ[memory.IDEEP_CACHE_VARIABLE] == "1"
