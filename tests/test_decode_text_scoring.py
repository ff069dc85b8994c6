"""Scoring given translations (transformer_nmt.decode.text.scoring). (`nmt score`:
tests/test_cli_score.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from decode_fixtures import SHORT, sentences
from transformer_nmt.decode.text.scoring import score_ids, score_lines
from transformer_nmt.decode.search.base import length_penalty
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError

DECODE = replace(SHORT, beam=3, nbest=3, max_len_b=8, alpha=0.6)


def translator_for(model_file, **fields) -> Translator:
    return Translator.from_file(model_file, TranslatorOptions(
        decode=DECODE, **{"precision": "fp32", "engine": "torch", **fields}))


def test_the_score_of_beam_searchs_output_is_the_score_it_reported(model_file):
    translator = translator_for(model_file, batch_size=3)
    lines = sentences(7, seed=11)
    found = list(translator.translate_nbest(lines))
    sources = translator.source_ids(lines)
    for rank in range(3):
        scored = score_ids(translator, sources, [hyps[rank].tokens for hyps in found])
        for hyps, pair in zip(found, scored):
            assert pair.score == pytest.approx(hyps[rank].score, abs=1e-4)
            assert pair.log_prob == pytest.approx(sum(pair.token_scores))
            assert len(pair.token_scores) == len(pair.tokens) + 1


def test_unnormalized_with_alpha_0_and_normalized_otherwise(model_file):
    translator = translator_for(model_file)
    [pair] = score_lines(translator, ["the house is small"], ["a dog runs"])
    assert pair.score == pytest.approx(pair.log_prob / length_penalty(len(pair.tokens) + 1, 0.6))
    raw = Translator.from_file(model_file, TranslatorOptions(decode=replace(DECODE, alpha=0.0),
                                                               precision="fp32"))
    [same] = score_lines(raw, ["the house is small"], ["a dog runs"])
    assert same.score == pytest.approx(pair.log_prob, abs=1e-5)


def test_batching_does_not_change_scores(model_file):
    sources, targets = sentences(9, seed=1), sentences(9, seed=2)
    one = list(score_lines(translator_for(model_file, batch_size=1), sources, targets))
    many = list(score_lines(translator_for(model_file, batch_size=4), sources, targets,
                            buffer_size=5))
    assert [pair.score for pair in one] == pytest.approx([pair.score for pair in many], abs=1e-4)


def test_files_of_different_lengths_and_too_long_targets_are_user_errors(model_file):
    translator = translator_for(model_file)
    with pytest.raises(UserError, match="tgt.txt has fewer lines"):
        list(score_lines(translator, ["a", "b"], ["a"], "src.txt", "tgt.txt"))
    with pytest.raises(UserError, match="tgt.txt line 2 has"):
        list(score_lines(translator, ["a", "b"], ["a", "the house " * 300], "src.txt",
                         "tgt.txt"))
