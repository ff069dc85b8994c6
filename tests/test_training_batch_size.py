"""Sharing one update's batch among processes (training/batch_size.py): the global batch stays
the configured one at any world size unless max_tokens and update_freq fix it per process."""

import pytest

from transformer_nmt.config import get_preset
from transformer_nmt.training.batch_size import BatchPlan, describe_batch, plan_batch


@pytest.mark.parametrize("world_size, expected", [
    (1, BatchPlan(25000, 1, 25000, False)),
    (2, BatchPlan(12500, 1, 25000, False)),
    (8, BatchPlan(3125, 1, 25000, False)),
])
def test_the_derived_batch_is_the_global_one_shared_among_processes(world_size, expected):
    assert plan_batch(25000, 0, 0, world_size) == expected


@pytest.mark.parametrize("world_size, expected", [
    # 25000 under a cap of 4096: 7 batches of 3572, not 7 of 4096 (28672 tokens).
    (1, BatchPlan(3572, 7, 25004, False)),
    (2, BatchPlan(3125, 4, 25000, False)),
    (8, BatchPlan(3125, 1, 25000, False)),
])
def test_a_memory_cap_accumulates_the_rest_of_the_share(world_size, expected):
    plan = plan_batch(25000, 4096, 0, world_size)
    assert plan == expected and plan.per_batch_tokens <= 4096


@pytest.mark.parametrize("world_size, expected", [
    (1, BatchPlan(6250, 4, 25000, False)),
    (2, BatchPlan(3125, 4, 25000, False)),
    (8, BatchPlan(782, 4, 25024, False)),
])
def test_a_given_update_freq_splits_the_share(world_size, expected):
    assert plan_batch(25000, 0, 4, world_size) == expected


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_max_tokens_and_update_freq_both_given_hold_per_process(world_size):
    plan = plan_batch(25000, 3125, 2, world_size)
    assert plan == BatchPlan(3125, 2, world_size * 2 * 3125, True)


def test_the_start_line_names_the_global_batch_and_when_it_is_per_process():
    assert describe_batch(plan_batch(25000, 0, 0, 8), 8) == (
        "batch: 25000 tokens per side per update = 8 process(es) x 1 accumulated x 3125 tokens")
    assert "per process as given" in describe_batch(plan_batch(25000, 3125, 1, 8), 8)


def test_impossible_plans_are_refused():
    with pytest.raises(ValueError):
        plan_batch(25000, 0, 0, 0)
    with pytest.raises(ValueError):
        plan_batch(0, 0, 0, 1)


@pytest.mark.parametrize("preset, tokens", [("base", 25000), ("big", 25000), ("small", 4096),
                                            ("tiny", 512)])
def test_each_preset_trains_one_process_on_one_batch_of_its_size(preset, tokens):
    cfg = get_preset(preset).train
    assert plan_batch(cfg.batch_tokens, cfg.max_tokens, cfg.update_freq, 1) == BatchPlan(
        tokens, 1, tokens, False)
