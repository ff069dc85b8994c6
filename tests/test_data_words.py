"""Which subword pieces form which words (data/words.py): the one rule of alignments, the
page's word groups, the degenerate guard's words and documents' word counts."""

from __future__ import annotations

import pytest

from transformer_nmt.data.words import (continues_word, is_text, piece_text, piece_words,
                                        starts_word, text_words, word_groups, word_index)


def test_a_piece_with_the_word_mark_starts_a_word_and_others_join_it():
    pieces = ["▁the", "▁gar", "den", "s", "▁is", ".", "</s>"]
    assert word_index(pieces) == [0, 1, 1, 1, 2, 2, None]
    assert word_groups(pieces) == [{"text": "the", "pieces": [0]},
                                   {"text": "gardens", "pieces": [1, 2, 3]},
                                   {"text": "is.", "pieces": [4, 5]}]


def test_the_first_piece_with_text_starts_a_word_without_the_mark():
    assert word_index(["den", "▁a"]) == [0, 1]
    assert word_index(["<s>", "den", "s"]) == [None, 0, 0]


def test_a_lone_mark_belongs_to_the_word_it_starts_or_to_none():
    # "▁" "«": sentencepiece's word start before a character without a marked piece
    assert word_groups(["▁a", "▁", "«", "b", "»"]) == [
        {"text": "a", "pieces": [0]}, {"text": "«b»", "pieces": [1, 2, 3, 4]}]
    # Followed by a word start or by nothing, it spells only a space: no word.
    assert word_index(["▁a", "▁", "▁b", "▁"]) == [0, None, 1, None]
    assert word_index(["▁", "▁", "ab"]) == [None, 0, 0]


def test_specials_belong_to_no_word_and_words_around_them_count_as_without():
    assert word_groups(["<s>", "den", "▁", "▁", "ab", "<pad>", "</s>"]) == [
        {"text": "den", "pieces": [1]}, {"text": "ab", "pieces": [3, 4]}]
    assert word_groups(["</s>"]) == []
    assert word_index(["▁a", "</s>", "b"]) == [0, None, 0]


def test_a_target_language_token_is_no_word_and_the_unknown_piece_is_text():
    assert word_index([">>fra<<", "▁the", "▁house"]) == [None, 0, 1]
    assert word_index([">>zho_Hans<<", "▁a"]) == [None, 0]
    assert not is_text(">>fra<<") and not is_text("</s>") and is_text("<unk>")
    assert piece_words(["▁a", "<unk>", "b", "▁", "<unk>"]) == ["a<unk>b", "<unk>"]


def test_punctuation_pieces_join_the_word_before_as_the_text_does():
    pieces = ["▁Hello", ",", "▁world", "!"]
    assert piece_words(pieces) == ["Hello,", "world!"] == text_words("Hello, world!")


def test_empty_input_has_no_words():
    assert word_index([]) == [] and word_groups([]) == [] and piece_words([]) == []
    assert text_words("") == [] and text_words("  \t ") == []


def test_piece_text_and_word_starts():
    assert piece_text("▁Haus") == "Haus" and piece_text("▁") == "" and piece_text("<s>") == ""
    assert starts_word("▁") and starts_word("▁a") and not starts_word("a")


@pytest.mark.parametrize("piece, continues", [
    ("s", True), ("9", True), ("ü", True), ("▁a", False), ("▁", False), (".", False),
    ("»", False), ("</s>", False), ("<pad>", False), ("<unk>", False), (">>fra<<", False)])
def test_only_a_letter_or_digit_without_the_mark_continues_a_word(piece, continues):
    assert continues_word(piece) is continues
