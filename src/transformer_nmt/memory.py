"""Handing memory back to the operating system, or keeping it where a loop reuses it
(Linux with glibc; elsewhere no-ops).

Decoding's largest buffers, the key/value caches, live for one batch and shrink as
sentences finish; without these, the allocator keeps what they used and resident
memory stays at the largest batch's worst moment, or grows batch after batch.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import sys
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

if TYPE_CHECKING:  # only a type here: the command line reads this module before torch
    from torch import Tensor

_MADV_DONTNEED = 4  # Linux: the pages read as zeros from now on, and are freed at once
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's largest on 64-bit systems
_MMAP_THRESHOLD_APART = 256 << 10  # blocks this large or larger are mapped on their own
_NEVER_TRIM = (1 << 31) - 1  # mallopt takes an int: 2 GB free at the top before a trim
_MIN_RELEASE = 1 << 20  # smaller tails are not worth a system call
IDEEP_CACHE_VARIABLE = "LRU_CACHE_CAPACITY"
"""How many kernels ideep, PyTorch's layer over oneDNN, keeps of its own (default 1024)."""


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # another C library
        return None
    if not all(hasattr(libc, name) for name in ("malloc_trim", "madvise", "mallopt")):
        return None
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


_LIBC = _glibc()


def release_free_memory() -> None:
    """Give memory that has been freed back to the operating system (glibc only).

    A batch's key/value caches are decoding's largest buffers; glibc keeps the freed
    blocks, and without this the resident size grew batch after batch, well past that
    of the largest batch.
    """
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def keep_freed_memory() -> None:
    """Let glibc keep the memory a process frees for its next allocations (blocks up to
    _MMAP_THRESHOLD_MAX) instead of handing it back to the operating system.

    A training step frees and allocates again the same few hundred megabytes of
    activations at every step; returned to the system, each page came back through a
    page fault and was zeroed again: millions of faults in minutes of training, far
    fewer with this.
    Resident memory stays at the step's peak, which it reaches anyway.
    """
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        _LIBC.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)


def keep_kernels_once() -> None:
    """Let oneDNN's cache alone keep the kernels of a CPU's bf16 products, for the rest of
    the process, unless the user set LRU_CACHE_CAPACITY. Only the process's first bf16
    product reads it: call this before.

    Every new shape of a bf16 product keeps a kernel in oneDNN's cache and a second
    description of it in ideep's, which only saves describing again a kernel that
    oneDNN's cache still holds. Training meets a new shape at nearly every step of its
    first epoch: without ideep's copies its peak memory is lower at the same speed.
    Decoding's small products
    do pay for the description, so training calls this, and decoding does not.
    """
    os.environ.setdefault(IDEEP_CACHE_VARIABLE, "1")  # 0 crashes PyTorch 2.13


ALLOCATOR_VARIABLE = "NMT_ALLOCATOR"
"""'system' keeps the C library's allocator for training (see `training_allocator`)."""
TCMALLOC_LIBRARIES = ("tcmalloc_minimal", "tcmalloc")
"""gperftools' tcmalloc, as ctypes.util.find_library names it (Debian and Ubuntu:
libtcmalloc-minimal4; Fedora: gperftools-libs)."""


def training_allocator(environ: Mapping[str, str],
                       find: Callable[[str], str | None] = ctypes.util.find_library
                       ) -> dict[str, str] | None:
    """The environment in which to run a CPU training process again with tcmalloc
    preloaded (LD_PRELOAD), or None to go on as it is: not on Linux, no tcmalloc
    installed, `NMT_ALLOCATOR=system`, or LD_PRELOAD already set (by the user, or by the
    run that preloaded it).

    glibc's allocator scatters a bf16 step's oneDNN kernels, kept for the process's life,
    among the holes its activations leave, and its heap grows; tcmalloc keeps it smaller
    and trains faster, with far fewer page faults.
    """
    if not sys.platform.startswith("linux") or environ.get(ALLOCATOR_VARIABLE) == "system" \
            or environ.get("LD_PRELOAD"):
        return None
    library = next(filter(None, map(find, TCMALLOC_LIBRARIES)), None)
    return None if library is None else {**environ, "LD_PRELOAD": library}


@contextlib.contextmanager
def kept_apart() -> Iterator[None]:
    """Within the block, large blocks (_MMAP_THRESHOLD_APART and more) are mapped on their
    own rather than taken from the heap, and after it the heap's free pages go back to the
    operating system (glibc only; after `keep_freed_memory`).

    For a training step that compiles new oneDNN kernels (a bf16 step meeting a new
    shape): each kernel keeps its memory for the rest of the process, and allocated among
    the step's activations, the blocks it keeps and the holes it leaves made the heap grow
    past the activations' own peak. The quickstart's training in bf16 peaks lower with
    this around its new shapes' steps, at no measurable cost in speed: the page faults of
    the few dozen steps that meet a new shape.
    """
    if _LIBC is None:
        yield
        return
    _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_APART)
    try:
        yield
    finally:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        _LIBC.malloc_trim(0)


def release_rows(buffer: Tensor, rows: int) -> None:
    """Let the operating system take back the pages past the first `rows` rows of
    `buffer`'s storage, which must be contiguous from row 0 and unused past `rows`.

    Their contents become zeros; the storage stays valid and the size does not change.
    Only whole pages strictly inside the storage are released, so nothing the
    allocator keeps next to it is touched.
    """
    if _LIBC is None or buffer.device.type != "cpu" or not buffer.is_contiguous():
        return
    storage = buffer.untyped_storage()
    if buffer.data_ptr() != storage.data_ptr():
        return
    row_bytes = buffer[0].numel() * buffer.element_size() if buffer.size(0) else 0
    page = mmap.PAGESIZE
    start = -(-(storage.data_ptr() + rows * row_bytes) // page) * page
    end = (storage.data_ptr() + storage.nbytes()) // page * page
    if end - start >= _MIN_RELEASE:
        _LIBC.madvise(start, end - start, _MADV_DONTNEED)
