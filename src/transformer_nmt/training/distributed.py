"""One process or many: the torchrun environment, the device, and the few collectives the
trainer needs.

`torchrun --nproc_per_node=N -m transformer_nmt.cli train ...` (or `nmt train` under any
launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT) starts one
process per device; multi-node runs use torchrun's rendezvous (--nnodes, --rdzv-endpoint).
GPUs talk over NCCL, CPUs over gloo. Without those variables everything here is a no-op
for a single process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist

from transformer_nmt.errors import UserError
from transformer_nmt.runtime import resolve_device

T = TypeVar("T")


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


def init_distributed(device_name: str | None = None) -> Distributed:
    """Join the process group torchrun describes in the environment, or run alone."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank=local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                                device_id=device if device.type == "cuda" else None)
    return Distributed(rank, world_size, local_rank, device)


def shutdown(context: Distributed) -> None:
    """Leave the process group, if this process joined one."""
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()
