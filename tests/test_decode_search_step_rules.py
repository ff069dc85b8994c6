"""The step processors every search applies to a step's log-probabilities
(decode/search/step_rules.py), one by one on hand-made steps, and in the order a search gets them."""

from __future__ import annotations

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.step_rules import (
    ForceEos,
    ForcePrefix,
    NoRepeatNgram,
    Step,
    apply_processors,
    fit_prefixes,
    prefix_tensor,
    step_processors,
)

BOS, EOS, VOCAB = 2, 3, 8
NEG = float("-inf")


def log_probs(rows: int) -> torch.Tensor:
    """(rows, VOCAB) distinct finite log-probabilities, so that moved values show."""
    return torch.log_softmax(torch.arange(rows * VOCAB, dtype=torch.float32).view(rows, VOCAB)
                             .sin(), -1)


def step(tokens: list[list[int]], width: int = 1, at_limit: list[bool] | None = None,
         sentences: list[int] | None = None) -> Step:
    rows = len(tokens)
    return Step(len(tokens[0]) - 1, torch.tensor(tokens),
                torch.tensor(sentences if sentences is not None else range(rows // width)),
                width, torch.tensor(at_limit or [False] * rows))


def test_force_eos_leaves_only_eos_with_its_own_score_at_the_limit():
    scores = log_probs(3)
    before = scores.clone()
    ForceEos(EOS)(scores, step([[BOS, 4], [BOS, 5], [BOS, 6]], at_limit=[False, True, False]))
    assert torch.equal(scores[[0, 2]], before[[0, 2]])
    expected = torch.full((VOCAB,), NEG)
    expected[EOS] = before[1, EOS]
    assert torch.equal(scores[1], expected)


def test_no_repeat_bigram_bans_what_followed_the_last_token_before():
    scores = log_probs(2)
    before = scores.clone()
    # Row 0 ends in 5, which 6 and 7 followed earlier; row 1's last token is new.
    NoRepeatNgram(2)(scores, step([[BOS, 5, 6, 5, 7, 5], [BOS, 4, 5, 6, 7, 1]]))
    banned = {(0, 6), (0, 7), (0, BOS), (1, BOS)}  # windows that do not repeat point at BOS
    for row in range(2):
        for token in range(VOCAB):
            want = NEG if (row, token) in banned else before[row, token]
            assert scores[row, token] == want, (row, token)


def test_no_repeat_trigram_needs_both_context_tokens_to_match():
    scores = log_probs(1)
    before = scores.clone()
    # The last two tokens (4, 5) occurred before followed by 6; (5, 4) followed by 5 does
    # not match the context, and neither does (1, 5) followed by 7.
    NoRepeatNgram(3)(scores, step([[BOS, 4, 5, 6, 5, 4, 1, 5, 7, 4, 5]]))
    assert scores[0, 6] == NEG
    assert scores[0, 5] == before[0, 5] and scores[0, 7] == before[0, 7]


def test_no_repeat_ngram_does_nothing_before_an_n_gram_exists():
    scores = log_probs(1)
    before = scores.clone()
    NoRepeatNgram(4)(scores, step([[BOS, 5, 5]]))
    assert torch.equal(scores, before)


def test_a_prefix_is_forced_with_the_models_score_whatever_later_rules_ban():
    prefixes = prefix_tensor([[5, 5], [], [6]], torch.device("cpu"))
    assert prefixes.tolist() == [[5, 5], [-1, -1], [6, -1]]
    # Step 1, beams of two per sentence, sentences 0 and 2 still searched: each row of
    # sentence 0 has 5 forced, though no-repeat bigrams bans 5 after 5.
    tokens = [[BOS, 5], [BOS, 5], [BOS, 6], [BOS, 6]]
    current = step(tokens, width=2, sentences=[0, 2])
    scores = log_probs(4)
    model = scores.clone()
    apply_processors([ForcePrefix(prefixes), NoRepeatNgram(2), ForceEos(EOS)], scores, current)
    for row in (0, 1):
        expected = torch.full((VOCAB,), NEG)
        expected[5] = model[row, 5]
        assert torch.equal(scores[row], expected)
    # Sentence 2's prefix (6) has ended: free search, its one bigram repeats nothing.
    for row in (2, 3):
        assert torch.equal(scores[row, BOS + 1:], model[row, BOS + 1:])


def test_a_prefix_at_the_limit_still_wins_over_eos():
    prefixes = prefix_tensor([[7]], torch.device("cpu"))
    scores = log_probs(1)
    model = scores.clone()
    apply_processors([ForcePrefix(prefixes), ForceEos(EOS)], scores,
                     step([[BOS]], at_limit=[True]))
    assert scores[0, 7] == model[0, 7] and scores[0, EOS] == NEG


def test_no_prefix_at_all_gives_none():
    cpu = torch.device("cpu")
    assert prefix_tensor(None, cpu) is None
    assert prefix_tensor([], cpu) is None
    assert prefix_tensor([[], []], cpu) is None


def test_limits_grow_to_fit_each_prefix():
    limits = torch.tensor([1, 5, 0])
    assert torch.equal(fit_prefixes(limits, None), limits)
    prefixes = prefix_tensor([[4, 4, 4], [4], []], torch.device("cpu"))
    assert fit_prefixes(limits, prefixes).tolist() == [3, 5, 0]


def test_a_search_gets_its_own_rules_first_then_prefix_no_repeat_and_eos():
    own = [NoRepeatNgram(5)]
    prefixes = prefix_tensor([[4]], torch.device("cpu"))
    rules = step_processors(DecodeConfig(no_repeat_ngram=3), EOS, prefixes, own)
    assert [type(rule) for rule in rules] == [NoRepeatNgram, ForcePrefix, NoRepeatNgram, ForceEos]
    assert rules[0] is own[0] and rules[2].n == 3 and rules[3].eos == EOS
    assert [type(rule) for rule in step_processors(DecodeConfig(), EOS, None)] == [ForceEos]
