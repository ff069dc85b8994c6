"""How one optimizer update's batch is shared among the processes and accumulated batches.

The batch a step trains on shapes the result (the paper's ~25000 source + 25000 target
tokens a step), so a run configures it globally, as `batch_tokens`, and every process
derives its share from the world size: 8 processes train on the same batch as 1, each
on an eighth of it. `max_tokens` caps one forward/backward batch for memory, and the
share that does not fit under it is accumulated over `update_freq` batches. Only when
both max_tokens and update_freq are given is the batch per process, as fairseq's is:
the global batch is then whatever the world size makes of it.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class BatchPlan(NamedTuple):
    """How each process builds its share of one optimizer update."""

    per_batch_tokens: int
    """Most tokens per side, padding counted, of one forward/backward batch of a process."""
    update_freq: int
    """Batches each process accumulates into one update."""
    global_tokens: int
    """Token budget per side of one update: processes x update_freq x per_batch_tokens."""
    explicit: bool
    """True when max_tokens and update_freq were both given: they hold per process as
    given, and batch_tokens was not used."""


def fixes_batch_per_process(max_tokens: int, update_freq: int) -> bool:
    """Whether max_tokens and update_freq, both given, fix the batch per process."""
    return max_tokens > 0 and update_freq > 0


def plan_batch(batch_tokens: int, max_tokens: int, update_freq: int,
               world_size: int) -> BatchPlan:
    """The batch of each process for `batch_tokens` tokens per side per update over
    `world_size` processes.

    max_tokens (0: no cap) and update_freq (0: derived) as TrainConfig holds them. Each
    process's share is ceil(batch_tokens / world_size); update_freq, unless given, is the
    fewest batches that fit the share under max_tokens, and the share is spread evenly
    over them, so that the global budget exceeds batch_tokens by rounding only. Both
    max_tokens and update_freq given: they are taken as they are (`explicit`).
    """
    if world_size < 1 or batch_tokens < 1 or max_tokens < 0 or update_freq < 0:
        raise ValueError(f"no batch plan for batch_tokens={batch_tokens}, max_tokens="
                         f"{max_tokens}, update_freq={update_freq}, world_size={world_size}")
    if fixes_batch_per_process(max_tokens, update_freq):
        return BatchPlan(max_tokens, update_freq, world_size * update_freq * max_tokens, True)
    share = math.ceil(batch_tokens / world_size)
    if not update_freq:
        update_freq = math.ceil(share / max_tokens) if max_tokens else 1
    per_batch = math.ceil(share / update_freq)
    return BatchPlan(per_batch, update_freq, world_size * update_freq * per_batch, False)


def describe_batch(plan: BatchPlan, world_size: int) -> str:
    """One line for the start of training: the global batch and how it is made up."""
    line = (f"batch: {plan.global_tokens} tokens per side per update = {world_size} "
            f"process(es) x {plan.update_freq} accumulated x {plan.per_batch_tokens} tokens")
    if plan.explicit:
        line += (" (max_tokens and update_freq were both given, so they hold per process "
                 "as given and batch_tokens is not used)")
    return line
