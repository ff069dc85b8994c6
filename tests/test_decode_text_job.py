"""One call's lines around the search (decode/text/job.py): prefixes and constraints as target
ids, the lines a search gets, and a translation's pieces, on a tiny BPE vocabulary."""

from __future__ import annotations

import logging

import pytest

from decode_fixtures import sentences
from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import normalize
from transformer_nmt.data.vocab import Vocab, train_vocab
from transformer_nmt.decode.text.job import (
    CallSettings,
    Translation,
    TranslationJob,
    TranslationRequest,
    constraint_ids,
    join_jobs,
    prefix_ids,
)
from transformer_nmt.errors import UserError


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> Vocab:
    directory = tmp_path_factory.mktemp("job-vocab")
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(sentences(300)) + "\n", encoding="utf-8")
    return train_vocab([corpus], directory / "spm", 60, threads=1)


def job(ids, prefixes=None, constraints=None) -> TranslationJob:
    return TranslationJob(CallSettings(DecodeConfig(), alignments=False, token_scores=False),
                          ids, prefixes, constraints, list(range(len(ids))))


def test_only_lines_with_source_tokens_are_searched():
    assert job([[5, 6], [], [7], []]).searched == [0, 2]


def test_pick_hands_the_chosen_lines_over_in_the_order_asked():
    lines = job([[5], [6], [7]], prefixes=[[9], [], [8, 8]], constraints=[[], [[4]], [[5, 5]]])
    assert lines.pick([2, 0]) == ([[7], [5]], [[8, 8], [9]], [2, 0], [[[5, 5]], []])
    assert job([[5], [6]]).pick([1]) == ([[6]], None, [1], None)


def test_in_order_puts_each_searched_line_in_its_place_and_empties_between():
    lines = job([[5], [], [7]])
    found = [[Translation("a", -1.0, [3])]], [[Translation("b", -2.0, [4])]]
    ordered = lines.in_order({2: found[1][0], 0: found[0][0]})
    assert [[t.text for t in line] for line in ordered] == [["a"], [""], ["b"]]
    assert ordered[1][0].tokens == [] and ordered[1][0].alignment is None


def test_joined_jobs_keep_their_lines_in_order_and_give_none_to_those_without():
    joined, starts = join_jobs([job([[5], [6]]), job([[7]], prefixes=[[9]],
                                                     constraints=[[[4]]])])
    assert starts == [0, 2] and joined.ids == [[5], [6], [7]] and joined.numbers == [0, 1, 0]
    assert joined.prefixes == [[], [], [9]] and joined.constraints == [[], [], [[4]]]
    plain, _ = join_jobs([job([[5]]), job([[6]])])
    assert plain.prefixes is None and plain.constraints is None


def test_no_prefix_on_any_line_gives_none(vocab):
    assert prefix_ids(vocab, [TranslationRequest("the house"), TranslationRequest("a dog")],
                      10) is None


def test_prefixes_are_the_target_ids_of_normalized_text_cut_to_the_longest_output(vocab):
    requests = [TranslationRequest("the cat", prefix="the  green garden"),
                TranslationRequest("a dog"),
                TranslationRequest("old trees", prefix="children play")]
    found = prefix_ids(vocab, requests, 3)
    garden = vocab.target.encode(normalize("the  green garden"))
    assert len(garden) > 3  # so that the cut shows
    assert found == [garden[:3], [], vocab.target.encode("children play")[:3]]


def test_constraints_are_target_ids_per_phrase_empty_ones_dropped(vocab):
    requests = [TranslationRequest("the cat", constraints=("warm roof", "")),
                TranslationRequest("a dog")]
    found = constraint_ids(vocab, requests, DecodeConfig(), [0, 1], 50)
    assert found == [[vocab.target.encode("warm roof")], []]
    assert constraint_ids(vocab, [TranslationRequest("a dog")], DecodeConfig(), [0], 50) is None


def test_constraints_refuse_sampling(vocab):
    with pytest.raises(UserError, match="beam search"):
        constraint_ids(vocab, [TranslationRequest("a", constraints=("dog",))],
                       DecodeConfig(sampling=True), [0], 50)


def test_constraints_that_cannot_fit_are_warned_about_by_line_number(vocab, caplog):
    phrase = "children play near old trees"
    needed = len(vocab.target.encode(phrase))
    requests = [TranslationRequest("a dog"), TranslationRequest("x", constraints=(phrase,))]
    with caplog.at_level(logging.WARNING, logger="transformer_nmt.decode.text.job"):
        found = constraint_ids(vocab, requests, DecodeConfig(), [6, 7], needed - 1)
    assert found[1] == [vocab.target.encode(phrase)]  # kept: the search misses some, not hangs
    assert len(caplog.records) == 1
    assert f"input line 8 need {needed} subword tokens" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="transformer_nmt.decode.text.job"):
        constraint_ids(vocab, requests, DecodeConfig(), [6, 7], needed)
    assert caplog.records == []


def test_a_translations_pieces_are_its_tokens_in_the_vocabulary(vocab):
    tokens = vocab.encode("the green garden")
    translation = Translation("the green garden", -1.0, tokens)
    assert translation.pieces(vocab) == vocab.pieces("the green garden")
    assert "".join(translation.pieces(vocab)).replace("▁", " ").strip() == "the green garden"
