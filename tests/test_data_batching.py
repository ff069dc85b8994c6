"""Token-budget batches: budget, coverage, shuffling, DDP shards, exact resume."""

import warnings

import numpy as np
import pytest

from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.errors import UserError


def lengths(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 60, n)
    tgt = np.clip((src * rng.uniform(0.7, 1.4, n)).astype(int), 0, None)
    return src, tgt


def epoch(sampler):
    return [list(batch) for batch in sampler]


@pytest.mark.parametrize("max_tokens", [90, 300, 2000])
def test_batches_fit_the_budget_and_cover_every_pair_once(max_tokens):
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens, seed=3)
    for number in range(2):
        sampler.set_epoch(number)
        batches = epoch(sampler)
        assert len(batches) == len(sampler) == sampler.num_batches
        for batch in batches:
            # Padding counted, specials included: every row is as long as the longest.
            assert len(batch) * (src[batch].max() + 1) <= max_tokens
            assert len(batch) * (tgt[batch].max() + 1) <= max_tokens
        assert sorted(i for batch in batches for i in batch) == list(range(len(src)))


def test_order_is_shuffled_per_epoch_and_reproducible():
    src, tgt = lengths()
    first, again = (TokenBatchSampler(src, tgt, 300, seed=5) for _ in range(2))
    assert epoch(first) == epoch(again)
    first.set_epoch(1)
    again.set_epoch(1)
    one = epoch(first)
    assert one == epoch(again)
    assert sorted(map(tuple, one)) == sorted(map(tuple, epoch(TokenBatchSampler(src, tgt, 300,
                                                                               seed=5))))
    assert one != epoch(TokenBatchSampler(src, tgt, 300, seed=5))
    unshuffled = epoch(TokenBatchSampler(src, tgt, 300, seed=5, shuffle=False))
    longest = [max(src[b].max(), tgt[b].max()) for b in unshuffled]
    assert longest == sorted(longest)


def test_a_pair_over_budget_gets_its_own_batch_and_one_warning():
    src, tgt = np.array([3, 100, 4, 120, 2]), np.array([3, 5, 4, 2, 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = TokenBatchSampler(src, tgt, 50, seed=0)
    assert len(caught) == 1 and "2 pair(s)" in str(caught[0].message)
    batches = epoch(sampler)
    assert [1] in batches and [3] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("world_size", [2, 3, 7])
def test_rank_shards_are_disjoint_complete_and_equally_long(world_size):
    src, tgt = lengths(400)
    shards = []
    for rank in range(world_size):
        sampler = TokenBatchSampler(src, tgt, 500, seed=1, rank=rank, world_size=world_size)
        sampler.set_epoch(2)
        shards.append(epoch(sampler))
        assert len(shards[-1]) == len(sampler) == -(-sampler.num_batches // world_size)
    assert len({len(shard) for shard in shards}) == 1
    everything = [i for shard in shards for batch in shard for i in batch]
    assert sorted(everything) == list(range(400))
    empties = sum(batch == [] for shard in shards for batch in shard)
    batches = TokenBatchSampler(src, tgt, 500, seed=1).num_batches
    assert empties == len(shards[0]) * world_size - batches < world_size


def test_resuming_mid_epoch_yields_exactly_the_rest():
    src, tgt = lengths()
    full = TokenBatchSampler(src, tgt, 300, seed=9)
    full.set_epoch(4)
    expected = epoch(full)
    first = TokenBatchSampler(src, tgt, 300, seed=9)
    first.set_epoch(4)
    iterator = iter(first)
    done = [next(iterator) for _ in range(7)]
    state = first.state_dict()
    assert (state["epoch"], state["position"]) == (4, 7)
    resumed = TokenBatchSampler(src, tgt, 300, seed=9)
    resumed.load_state_dict(state)
    resumed.set_epoch(4)  # a trainer's habitual call must not rewind
    assert done + epoch(resumed) == expected
    resumed.set_epoch(5)
    assert len(epoch(resumed)) == len(expected)


def test_resuming_with_another_world_size_covers_the_rest_once():
    src, tgt = lengths(600)
    states, seen = [], []
    for rank in range(2):
        sampler = TokenBatchSampler(src, tgt, 200, seed=2, rank=rank, world_size=2)
        iterator = iter(sampler)
        for _ in range(5):
            seen += next(iterator)
        states.append(sampler.state_dict())
    for rank in range(3):
        sampler = TokenBatchSampler(src, tgt, 200, seed=2, rank=rank, world_size=3)
        sampler.load_state_dict(states[rank % 2])
        seen += [i for batch in sampler for i in batch]
    assert sorted(seen) == list(range(600))


def test_resuming_with_other_data_or_seed_is_refused():
    src, tgt = lengths()
    state = TokenBatchSampler(src, tgt, 300, seed=9).state_dict()
    with pytest.raises(UserError, match="num_pairs was 1500, now 1499"):
        TokenBatchSampler(src[1:], tgt[1:], 300, seed=9).load_state_dict(state)
    with pytest.raises(UserError, match="seed was 9, now 8"):
        TokenBatchSampler(src, tgt, 300, seed=8).load_state_dict(state)


def test_resuming_with_batches_cut_at_another_size_goes_on_from_the_same_fraction():
    # A process's share of a global batch halves when the world size doubles.
    src, tgt = lengths(600)
    before = TokenBatchSampler(src, tgt, 400, seed=2)
    before.set_epoch(3)
    iterator = iter(before)
    for _ in range(before.num_batches // 4):
        next(iterator)
    after = [TokenBatchSampler(src, tgt, 200, seed=2, rank=rank, world_size=2)
             for rank in range(2)]
    for sampler in after:
        sampler.load_state_dict(before.state_dict())
    assert after[0].epoch == 3 and after[0].num_batches > before.num_batches
    assert after[0].consumed / after[0].num_batches == pytest.approx(
        before.consumed / before.num_batches, abs=1 / before.num_batches)
    rest = sum(len(list(sampler)) for sampler in after)
    assert rest == pytest.approx(after[0].num_batches * 3 / 4, abs=3)


def test_padding_efficiency_matches_the_batches():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, 1000, seed=0)
    real = padded = 0
    for batch in epoch(sampler):
        real += (src[batch] + 1).sum() + (tgt[batch] + 1).sum()
        padded += len(batch) * ((src[batch].max() + 1) + (tgt[batch].max() + 1))
    assert sampler.padding_efficiency() == pytest.approx(real / padded)
    assert 0.8 < sampler.padding_efficiency() <= 1
    assert TokenBatchSampler([], [], 100, seed=0).padding_efficiency() == 1.0


def test_lengths_padded_to_a_multiple_fit_the_budget_and_meet_few_shapes():
    src, tgt = lengths(3000)
    exact = TokenBatchSampler(src, tgt, 600, seed=1)
    padded = TokenBatchSampler(src, tgt, 600, seed=1, length_multiple=8)
    shapes, real, computed = set(), 0, 0
    batches = epoch(padded)
    for batch in batches:
        source, target = (-(-(side[batch].max() + 1) // 8) * 8 for side in (src, tgt))
        assert len(batch) * max(source, target) <= 600  # the padded lengths are counted
        shapes.add((len(batch), source, target))
        real += (src[batch] + 1).sum() + (tgt[batch] + 1).sum()
        computed += len(batch) * (source + target)
    exact_shapes = {(len(b), src[b].max() + 1, tgt[b].max() + 1) for b in epoch(exact)}
    assert len(shapes) < len(exact_shapes) / 2
    assert sorted(i for batch in batches for i in batch) == list(range(len(src)))
    assert padded.padding_efficiency() == pytest.approx(real / computed)
    assert padded.padding_efficiency() < exact.padding_efficiency()


def test_resuming_with_another_length_multiple_goes_on_from_the_same_fraction():
    # A run resumed in another precision pads its batches differently.
    src, tgt = lengths(600)
    before = TokenBatchSampler(src, tgt, 400, seed=2, length_multiple=8)
    iterator = iter(before)
    for _ in range(before.num_batches // 2):
        next(iterator)
    after = TokenBatchSampler(src, tgt, 400, seed=2)
    after.load_state_dict(before.state_dict())
    assert after.position == 0
    assert after.consumed / after.num_batches == pytest.approx(0.5, abs=2 / before.num_batches)
