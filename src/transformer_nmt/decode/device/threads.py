"""How decoding shares the CPU: how many batches are decoded at once (workers), and how
many threads each one's tensor operations get.

Every split of the cores between what decodes at once is decided here: the workers of
a call, each batch's or step's threads, a server's event loop's.

A decoding step multiplies a few dozen rows by each weight matrix, products that split
poorly across cores: separate batches, one per share of the cores, keep the cores busier
than one batch split across all of them. The Translator applies the count around its own work (`torch_threads`) and gives the calling
thread its previous count back, so that its callers never set threads themselves.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

_PROCESS_THREADS = torch.get_num_threads()
"""The threads PyTorch had when this module was imported: the cores decoding shares out
(read once, as applying `decoding_threads` changes the process's setting)."""


def use_cores(count: int) -> None:
    """Decode on `count` cores from now on: for a process that is one of several sharing
    the machine's cores (a worker of `nmt translate-corpus`), whatever PyTorch found."""
    global _PROCESS_THREADS
    _PROCESS_THREADS = max(count, 1)
    torch.set_num_threads(_PROCESS_THREADS)


def all_cores() -> int:
    """The cores decoding shares out in this process."""
    return _PROCESS_THREADS


def default_workers(device: str | torch.device, line_by_line: bool = False) -> int:
    """Batches decoded at once by default: two on a CPU with two or more cores, else one;
    one `line_by_line` (interactive use), whose only batch should have every core.

    Two half batches rather than one whole one translate faster and in less peak memory
    on a 2-core CPU; more workers or larger batches hold more batches' memory.
    """
    if line_by_line:
        return 1
    return 2 if torch.device(device).type == "cpu" and _PROCESS_THREADS >= 2 else 1


def decoding_threads(workers: int, device: str | torch.device, cores: int | None = None) -> int:
    """The thread count (torch.set_num_threads) for decoding `workers` batches at once on
    `device`: on a CPU, each worker's share of the `cores` (default: the process's
    threads when this module was imported), at least 1; elsewhere every one of them.
    """
    cores = _PROCESS_THREADS if cores is None else cores
    if workers > 1 and torch.device(device).type == "cpu":
        return max(cores // workers, 1)
    return cores


EVENT_LOOP_THREADS = 1
"""Torch threads of a server's main thread, which runs the event loop and never decodes:
kept to one, it never starts OpenMP workers of its own, which would outnumber the cores
and make the lead slot's workers sleep between parallel regions instead of spinning (a
lone request then decodes markedly slower)."""


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the body with torch.set_num_threads(count), then give the process its
    previous thread count back (also after an error)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
