"""The confidence's features, defined once: each step's quantities, the sums over a
hypothesis's steps by either path (a whole pass's positions, or one step at a time as a
search goes), their reduction, and the features of the output's ids alone."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_nmt.decode.search.features import (ATTENDED, FEATURES, STATE_FEATURES,
                                                         StepSums, all_features,
                                                         copied_tokens, heads_averaged,
                                                         repeated_bigrams, token_entropy)


def test_the_state_features_are_features_in_the_order_hypotheses_carry_them():
    assert set(STATE_FEATURES) <= set(FEATURES)
    values = all_features([1.0, 2.0, 3.0, 4.0], [5, 6], [7, 8])
    assert [values[FEATURES.index(name)] for name in STATE_FEATURES] == [1.0, 2.0, 3.0, 4.0]


def test_a_distribution_s_entropy_ignores_tokens_of_probability_0():
    uniform = torch.full((2, 3, 4), math.log(1 / 4))
    uniform[..., 0] = float("-inf")  # a PAD the model never generates
    uniform[..., 1:] = math.log(1 / 3)
    assert torch.allclose(token_entropy(uniform), torch.full((2, 3), math.log(3)))


def test_a_pass_and_a_search_sum_the_same_steps_to_the_same_features():
    generator = torch.Generator().manual_seed(0)
    rows, positions, src_len = 3, 6, 5
    log_p = -torch.rand(rows, positions, generator=generator) * 4
    entropy = torch.rand(rows, positions, generator=generator)
    attention = heads_averaged(torch.rand(rows, 2, positions, src_len, generator=generator) / 4)
    steps, sources = [6, 2, 4], [4, 0, 2]
    whole = StepSums.over_positions(log_p, entropy, attention, steps, sources)
    stepwise = StepSums.empty(rows, src_len, log_p.device)
    for step in range(positions):
        # A row past its end adds nothing: log P 0 (above every token's) and no attention.
        going = torch.tensor([step < length for length in steps])
        stepwise = stepwise.then(log_p[:, step] * going, entropy[:, step] * going,
                                 attention[:, step] * going[:, None])
    features = whole.features(torch.tensor(steps), torch.tensor(sources))
    torch.testing.assert_close(features, stepwise.features(torch.tensor(steps),
                                                           torch.tensor(sources)))
    for row, (length, source) in enumerate(zip(steps, sources)):
        mean_log_prob, min_log_prob, mean_entropy, unattended = features[row].tolist()
        assert mean_log_prob == pytest.approx(float(log_p[row, :length].mean()))
        assert min_log_prob == pytest.approx(float(log_p[row, :length].min()))
        assert mean_entropy == pytest.approx(float(entropy[row, :length].mean()))
        received = attention[row, :length, :source].sum(0)
        assert unattended == pytest.approx(float(received.lt(ATTENDED).float().mean())
                                           if source else 0.0)


def test_only_the_source_s_own_tokens_count_as_unattended():
    sums = StepSums.empty(2, 4, torch.device("cpu"))
    sums.received = torch.tensor([[1.0, 0.1, 0.0, 0.0], [0.6, 0.7, 0.2, 0.0]])
    features = sums.features(torch.tensor([3, 3]), torch.tensor([2, 3]))
    assert features[:, STATE_FEATURES.index("unattended_source")].tolist() == pytest.approx(
        [1 / 2, 1 / 3])


def test_repetition_and_copying_of_hand_made_outputs():
    assert repeated_bigrams([5, 5, 5, 5, 5]) == 3 / 4  # (5, 5) four times: three repeats
    assert repeated_bigrams([1, 2, 3, 1, 2]) == 1 / 4
    assert repeated_bigrams([1, 2, 3, 4]) == repeated_bigrams([7]) == repeated_bigrams([]) == 0
    assert copied_tokens([1, 2, 3, 4], [4, 9, 1]) == 2 / 4
    assert copied_tokens([], [1, 2]) == 0


def test_the_length_ratio_counts_eos_on_both_sides():
    values = dict(zip(FEATURES, all_features([0.0] * 4, [5, 6, 7], [8])))
    assert values["log_length_ratio"] == pytest.approx(math.log(4 / 2))
    assert values["log_length_ratio_squared"] == pytest.approx(math.log(2) ** 2)
