"""The one sentence splitter (data/sentences.py): texts, paragraphs and sentences cut for
the model and put back together, an overlong sentence halved, never truncated."""

from __future__ import annotations

import pytest

from transformer_nmt.data.sentences import (Fitting, sentences_of, split_paragraph,
                                            split_sentence, split_text)


def words(limit: int) -> Fitting:
    """A model whose tokens are whitespace-separated words."""
    return Fitting(str.split, limit)


def test_paragraphs_lines_and_surrounding_whitespace_are_kept():
    text = "  First sentence here. Second one!\n\nA new paragraph?\r\nLast line.  \n"
    document = split_text(text, "en", words(100))
    assert document.sentences == ["First sentence here.", "Second one!", "A new paragraph?",
                                  "Last line."]
    assert document.join(document.sentences) == text
    assert document.join([s.upper() for s in document.sentences]) == text.upper()


def test_abbreviations_do_not_end_sentences():
    document = split_text("Mr. Smith paid $3.50 at 3 p.m. today. He left.", "en",
                          words(100))
    assert document.sentences == ["Mr. Smith paid $3.50 at 3 p.m. today.", "He left."]


@pytest.mark.parametrize("text", ["", "   ", "\n\n", " \t\n "])
def test_blank_text_has_no_sentences_and_keeps_its_whitespace(text):
    for document in (split_text(text, "en", words(100)),
                     split_paragraph(text, "en", words(100))):
        assert document.sentences == []
        assert document.join([]) == text


def test_a_sentence_too_long_for_the_model_is_split_never_truncated():
    sentence = " ".join(f"w{i}" for i in range(50)) + "."
    document = split_text(sentence, "en", words(8))
    assert len(document.sentences) > 1
    assert all(len(chunk.split()) <= 8 for chunk in document.sentences)
    assert document.join(document.sentences) == sentence


def test_one_word_too_long_is_split_between_characters():
    word = "x" * 40
    document = split_text(word, "en", Fitting(list, 16))
    assert all(len(chunk) <= 16 for chunk in document.sentences)
    assert document.join(document.sentences) == word


def test_an_unknown_language_code_falls_back_to_general_rules():
    document = split_text("One. Two.", "zz", words(100))
    assert document.sentences == ["One.", "Two."]


def test_a_texts_line_breaks_cut_but_a_paragraphs_are_only_whitespace():
    text = "A heading\nThe dog runs. The cat sleeps."
    assert split_text(text, "en", words(100)).sentences == \
        ["A heading", "The dog runs.", "The cat sleeps."]
    # A format's wrapping (HTML source lines) is not a sentence end.
    assert split_paragraph(text, "en", words(100)).sentences == \
        ["A heading\nThe dog runs.", "The cat sleeps."]


def test_a_paragraph_is_cut_as_its_sentences_each_by_the_length_rule():
    paragraph = "Short one. " + " ".join(f"w{i}" for i in range(30)) + ". Last."
    whole = split_paragraph(paragraph, "en", words(8)).sentences
    one_by_one = [chunk for sentence in sentences_of(paragraph, "en")
                  for chunk in split_sentence(sentence, words(8)).sentences]
    assert whole == one_by_one
    assert " ".join(whole).split() == paragraph.split()  # no word lost


def test_sentences_of_a_paragraph_are_stripped():
    assert sentences_of("The dog runs. The cat sleeps. ", "en") == \
        ["The dog runs.", "The cat sleeps."]
    assert sentences_of("   ", "en") == []


def test_a_sentence_cut_already_is_only_fitted():
    sentence = "Mr. Smith left. He came back."  # not cut again at its full stop
    assert split_sentence(sentence, words(100)).sentences == [sentence]
    assert split_sentence(" padded ", words(100)).join(["x"]) == " x "
