"""One process or many: the torchrun environment, the device, and the few collectives the
trainer needs.

`torchrun --nproc_per_node=N -m transformer_nmt.cli train ...` (or `nmt train` under any
launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT) starts one
process per device; multi-node runs use torchrun's rendezvous (--nnodes, --rdzv-endpoint).
GPUs talk over NCCL, CPUs over gloo. Without those variables everything here is a no-op
for a single process.

A process that dies (killed, out of memory, its machine gone) fails the others' next
collective: at once where its connections close, else after the process group's timeout.
To name it, every process adds to a counter of its own in the rendezvous store (torchrun's
agent holds it; without torchrun, rank 0) every HEARTBEAT_SECONDS from a thread (more
often under a shorter collective timeout); after a failed collective a process watches the
counters for SILENT_BEATS beats, and the ranks whose counter stood still have stopped or
hang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Iterator, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from transformer_nmt.errors import UserError
from transformer_nmt.runtime import resolve_device

T = TypeVar("T")

HEARTBEAT_SECONDS = 1.0
"""How often a process tells the store that it still runs, at most."""
BEATS_PER_TIMEOUT = 4
"""Heartbeats at least within a collective's timeout."""
SILENT_BEATS = 3
"""How long a process whose collective failed watches the others' heartbeats, in beats:
several, so that a live process busy in a step is not taken for a dead one."""


class Heartbeat:
    """A daemon thread adding 1 to this process's counter in the store every
    `interval` seconds, until `stop` or until the store is gone."""

    def __init__(self, store: dist.Store, rank: int, interval: float) -> None:
        self.store, self.key, self.interval = store, heartbeat_key(rank), interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="nmt-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.store.add(self.key, 1)
            except RuntimeError:  # the store's process is gone: nobody is left to tell
                return

    def stop(self) -> None:
        """End the thread and wait for it (at most one store call later): a process that
        left the process group, or exited, while the thread was inside a store call
        aborted ("terminate called without an active exception")."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(10.0, 2 * self.interval))


def heartbeat_key(rank: int) -> str:
    """The store key of `rank`'s heartbeats in this launch (torchrun's restarts share
    the agent's store)."""
    return f"nmt/heartbeat/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{rank}"


@dataclass(frozen=True)
class Distributed:
    """Where this process stands among the training processes."""

    rank: int
    """Global rank, 0 for the process that writes checkpoints and logs."""
    world_size: int
    """Number of processes."""
    local_rank: int
    """Rank on this machine: the index of its GPU."""
    device: torch.device
    """The device this process trains on."""
    store: dist.Store | None = field(default=None, compare=False, repr=False)
    """The rendezvous store, where there are several processes."""
    heartbeat: Heartbeat | None = field(default=None, compare=False, repr=False)
    """This process's heartbeat thread, where there are several processes."""

    @property
    def is_main(self) -> bool:
        """True for the process that writes files and talks to the user."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """True when there are several processes (a process group exists)."""
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over every process, in place; returned for convenience."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def any(self, *flags: bool) -> list[bool]:
        """For each flag, whether any process raised it (one small collective)."""
        if not self.enabled:
            return list(flags)
        tensor = torch.tensor([float(flag) for flag in flags], device=self.device)
        return [value > 0 for value in self.all_reduce_sum(tensor).tolist()]

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` on every process (any picklable object)."""
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def main_reads(self, read: Callable[[], T]) -> T:
        """What `read()` returns on rank 0, on every process; or the UserError it raised,
        raised on every process. Only rank 0 calls `read`, so that only it needs to see
        the files `read` reads, and every process stops alike when one is wrong."""
        value, error = None, None
        if self.is_main:
            try:
                value = read()
            except UserError as caught:
                error = caught
        value, error = self.broadcast((value, error))
        if error is not None:
            raise error
        return value

    def gather(self, value: Any) -> list[Any]:
        """Every process's `value`, in rank order, on every process."""
        if not self.enabled:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def silent_ranks(self) -> list[int] | None:
        """After a collective failed: the other ranks whose heartbeat stood still for
        SILENT_BEATS beats (stopped, or hanging), in order; None where the store itself is
        gone (its process stopped: torchrun's agent, or rank 0 without torchrun)."""
        if self.store is None or self.heartbeat is None:
            return None
        others = [rank for rank in range(self.world_size) if rank != self.rank]
        silence = SILENT_BEATS * self.heartbeat.interval
        try:
            self.store.set_timeout(timedelta(seconds=silence))
            before = [self.store.add(heartbeat_key(rank), 0) for rank in others]
            time.sleep(silence)
            after = [self.store.add(heartbeat_key(rank), 0) for rank in others]
        except RuntimeError:
            return None
        return [rank for rank, old, new in zip(others, before, after) if new == old]

    def lost_process_error(self, run: str) -> UserError | None:
        """After a collective failed: the one-line error naming the processes that
        stopped or hang, for the user to resume `run` (a phrase naming the run); None
        if every other process still runs (the failure is something else)."""
        with sigterm_ignored():
            silent = self.silent_ranks()
        if silent == []:
            return None
        if silent is None:
            who = ("the other processes, which stopped or hang (the rendezvous store is gone "
                   "too: torchrun's agent or rank 0 stopped)")
        elif len(silent) == 1:
            who = f"rank {silent[0]} of {self.world_size}, which stopped or hangs"
        else:
            who = (f"ranks {', '.join(map(str, silent))} of {self.world_size}, which stopped "
                   "or hang")
        return UserError(
            f"rank {self.rank} lost contact with {who}: the training ends here; start the "
            f"same torchrun command again to resume {run} from its last checkpoint")


@contextlib.contextmanager
def sigterm_ignored() -> Iterator[None]:
    """SIGTERM ignored in the body (main thread only): torchrun sends it to every
    process as soon as one has died, while the others are finding out which."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def init_distributed(device_name: str | None = None,
                     timeout: float | None = None) -> Distributed:
    """Join the process group torchrun describes in the environment, or run alone.

    timeout: seconds a collective waits for every process before it fails (None:
    PyTorch's default, 30 minutes over gloo, 10 over NCCL).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank=local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size <= 1 or dist.is_initialized():
        return Distributed(rank, world_size, local_rank, device)
    waited = timedelta(seconds=timeout) if timeout else None
    beat = min(HEARTBEAT_SECONDS, timeout / BEATS_PER_TIMEOUT) if timeout else HEARTBEAT_SECONDS
    # The rendezvous of init_method="env://", made here to keep its store for heartbeats.
    store, rank, world_size = next(dist.rendezvous("env://", rank, world_size,
                                                   timeout=waited or default_pg_timeout))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store,
                            rank=rank, world_size=world_size, timeout=waited,
                            device_id=device if device.type == "cuda" else None)
    return Distributed(rank, world_size, local_rank, device, store,
                       Heartbeat(store, rank, beat))


def shutdown(context: Distributed) -> None:
    """Stop the heartbeat and leave the process group, if this process joined one."""
    if context.heartbeat is not None:
        context.heartbeat.stop()
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()
