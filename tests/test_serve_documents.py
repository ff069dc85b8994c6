"""Documents cut into sentences and put back together (serve/documents.py)."""

from __future__ import annotations

import pytest

from transformer_nmt.serve.documents import split_document


def words(text: str) -> int:
    return len(text.split())


def test_paragraphs_lines_and_surrounding_whitespace_are_kept():
    text = "  First sentence here. Second one!\n\nA new paragraph?\r\nLast line.  \n"
    document = split_document(text, "en", words, 100)
    assert document.sentences == ["First sentence here.", "Second one!", "A new paragraph?",
                                  "Last line."]
    assert document.join(document.sentences) == text
    assert document.join([s.upper() for s in document.sentences]) == text.upper()


def test_abbreviations_do_not_end_sentences():
    document = split_document("Mr. Smith paid $3.50 at 3 p.m. today. He left.", "en",
                              words, 100)
    assert document.sentences == ["Mr. Smith paid $3.50 at 3 p.m. today.", "He left."]


@pytest.mark.parametrize("text", ["", "   ", "\n\n", " \t\n "])
def test_blank_text_has_no_sentences_and_keeps_its_whitespace(text):
    document = split_document(text, "en", words, 100)
    assert document.sentences == []
    assert document.join([]) == text


def test_a_sentence_too_long_for_the_model_is_split_never_truncated():
    sentence = " ".join(f"w{i}" for i in range(50)) + "."
    document = split_document(sentence, "en", words, 8)
    assert len(document.sentences) > 1
    assert all(words(chunk) <= 8 for chunk in document.sentences)
    assert document.join(document.sentences) == sentence


def test_one_word_too_long_is_split_between_characters():
    word = "x" * 40
    document = split_document(word, "en", len, 16)
    assert all(len(chunk) <= 16 for chunk in document.sentences)
    assert document.join(document.sentences) == word


def test_an_unknown_language_code_falls_back_to_general_rules():
    document = split_document("One. Two.", "zz", words, 100)
    assert document.sentences == ["One.", "Two."]
