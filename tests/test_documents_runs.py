"""A paragraph's translation shared out among its runs: by word alignment, in proportion
without one, whole into the first run when neither is possible; spaces where they were."""

from __future__ import annotations

import pytest

from document_fixtures import Fake
from transformer_nmt.documents.runs import Run, distribute, translate_paragraphs

RUNS = ["The ", "big", " house"]


def test_each_target_word_goes_to_the_run_of_its_aligned_source_word():
    aligned = Fake("Der Hund des Mannes", [(0, 0), (1, 1), (2, 2), (3, 2), (4, 3)])
    assert distribute(["The ", "dog", " of the ", "man"], aligned) == \
        ["Der ", "Hund", " des ", "Mannes"]
    assert distribute(RUNS, Fake("Das große Haus", [(0, 0), (1, 1), (2, 2)])) == \
        ["Das ", "große", " Haus"]


def test_a_word_aligned_back_to_an_earlier_run_keeps_its_place_in_the_sentence():
    reordered = Fake("la maison grande", [(0, 0), (2, 1), (1, 2)])
    assert distribute(RUNS, reordered) == ["la ", "", "maison grande"]


def test_unaligned_words_go_with_the_word_before_them():
    assert distribute(RUNS, Fake("Das sehr große Haus", [(0, 0), (1, 2), (2, 3)])) == \
        ["Das sehr ", "große", " Haus"]


def test_without_an_alignment_words_are_shared_in_proportion_to_the_source():
    assert distribute(RUNS, "Das große Haus") == ["Das ", "große", " Haus"]
    assert distribute(["A long first run of words ", "end"], "eins zwei drei vier fünf sechs") \
        == ["eins zwei drei vier fünf ", "sechs"]


def test_one_word_takes_the_first_runs_formatting_and_no_text_is_lost():
    assert distribute(RUNS, "大房子") == ["大房子", "", ""]
    assert distribute(RUNS, Fake("大房子", [(0, 0), (2, 0)])) == ["大房子", "", ""]


def test_whitespace_around_the_paragraph_and_only_whitespace_runs_stay():
    assert distribute(["  ", "The ", "big", " house. ", "\n"], "Das große Haus.") == \
        ["  ", "Das ", "große", " Haus. ", "\n"]
    assert distribute([" ", "\t"], "x") == [" ", "\t"]


def test_paragraphs_without_letters_are_not_sent_and_a_short_answer_is_an_error():
    texts = [["The ", "dog"], ["42 "], ["- 7 -"]]
    runs = [[Run(lambda p=p, i=i: texts[p][i], lambda t, p=p, i=i: texts[p].__setitem__(i, t))
             for i in range(len(texts[p]))] for p in range(len(texts))]
    sent = []

    def translate(sources):
        sent.extend(sources)
        return [source.upper() for source in sources]

    translate_paragraphs(runs, translate)
    assert sent == ["The dog"] and texts == [["THE ", "DOG"], ["42 "], ["- 7 -"]]
    with pytest.raises(ValueError, match="0 results for 1 texts"):
        translate_paragraphs(runs, lambda sources: [])
