"""Why a translation is degenerate (decode/quality/degenerate.py): every pattern, and ordinary
translations that must not be flagged."""

from __future__ import annotations

import pytest

from transformer_nmt.decode.quality.degenerate import (COPIES_SOURCE, ONLY_SYMBOLS, REASONS, REPEATS,
                                               TOO_LONG, TOO_SHORT, degenerate_reasons,
                                               length_reason, longest_run, words)


def pieces(text: str) -> list[str]:
    """Subword pieces as sentencepiece spells them: one per word here, ▁ first, with
    punctuation split off."""
    found = []
    for word in text.split():
        core = word.rstrip(".,;:!?")
        found += ["\u2581" + core] if core else []
        found += list(word[len(core):])
    return found


def reasons(source: str, output: str) -> list[str]:
    return degenerate_reasons(pieces(source), pieces(output))


@pytest.mark.parametrize("source, output", [
    ("Peace be with you.", "Friede sei mit euch."),
    ("And God saw the light, that it was good.", "Und Gott sah das Licht, daß es gut war."),
    # Names pass through unchanged, and lists of them are common.
    ("Adam, Seth, Enosh,", "Adam, Seth, Enos,"),
    ("Dan, Joseph, and Benjamin, Naphtali, Gad, and Asher.",
     "Dan, Joseph und Benjamin, Naphtali, Gad und Aser."),
    # A source that repeats itself may be translated so.
    ("O earth, earth, earth, hear the word of Yahweh.",
     "O Land, Land, Land, höre das Wort Jehovas!"),
    ("Holy, holy, holy, holy is the Lord.", "Heilig, heilig, heilig, heilig ist der Herr."),
    # Three in a row is within the bound.
    ("He laughed.", "Er lachte: ha ha ha."),
    # A quoted English slogan shares many words with its source, not 80% of them.
    ('A sign that says "workers say stop black deaths in custody".',
     'Ein Schild mit der Aufschrift "workers say stop black deaths in custody".'),
    ("Amen.", "Amen."),
    ("Two men are playing soccer on a field.", "Zwei Männer spielen Fußball."),
    ("3:16", "3:16"),
    ("", ""),
])
def test_ordinary_translations_are_not_flagged(source, output):
    assert reasons(source, output) == []


@pytest.mark.parametrize("source, output", [
    ("The grace of the Lord be with you all.", "Der Herr, der Herr, der Herr, der Herr, mit dir."),
    ("If I am poured out", "wenn wenn wenn wenn ich"),
    ("WENDY", "WENDY WENDY WENDY WENDY WENDY"),
    ("that I may know him", "und seine Brüder und seine Brüder und seine Brüder"),
    # The source's own run allows as many, not more.
    ("holy, holy, holy", "heilig, heilig, heilig, heilig"),
])
def test_a_token_or_ngram_repeated_beyond_the_bound_repeats(source, output):
    assert REPEATS in reasons(source, output)


def test_longest_run_counts_back_to_back_occurrences():
    assert longest_run([], 1) == 0
    assert longest_run(list("ab"), 3) == 0
    assert longest_run(list("abc"), 1) == 1
    assert longest_run(list("xaaab"), 1) == 3
    assert longest_run(list("ababab"), 2) == 3
    assert longest_run(list("abcab"), 2) == 1


def test_an_output_far_longer_or_shorter_than_its_source():
    assert length_reason(10, 30) is None and length_reason(10, 31) == TOO_LONG
    assert length_reason(1, 12) is None and length_reason(1, 13) == TOO_LONG
    assert length_reason(30, 9) is None and length_reason(30, 8) == TOO_SHORT
    assert length_reason(2, 0) is None  # a name may be dropped; symbols-only says the rest
    source = " ".join(f"word{i}" for i in range(6))
    assert TOO_LONG in reasons(source, " ".join(f"Wort{i}" for i in range(23)))
    assert TOO_SHORT in reasons(" ".join(f"w{i}" for i in range(30)), "Ein Satz hier.")


def test_an_untranslated_copy_of_the_source():
    assert reasons("and he said to them, go in peace", "and he said to them, go in peace") \
        == [COPIES_SOURCE]
    assert COPIES_SOURCE in reasons("Peace be with you.", "Friede be with you.")
    # Two lowercase words are too few to tell a copy from shared names or numbers.
    assert COPIES_SOURCE not in reasons("in Jerusalem", "in Jerusalem")


def test_an_output_of_only_punctuation_or_symbols():
    assert reasons("Yes.", ". . , ;") == [ONLY_SYMBOLS]
    assert reasons("Yes.", "") == [ONLY_SYMBOLS]
    assert reasons("The king came.", "") == [TOO_SHORT, ONLY_SYMBOLS]
    assert ONLY_SYMBOLS not in reasons("...", "...")


def test_reasons_come_in_the_documented_order():
    output = "Der " + "Herr " * 40
    assert reasons("The Lord.", output) == [REPEATS, TOO_LONG]
    assert REASONS == (REPEATS, TOO_LONG, TOO_SHORT, COPIES_SOURCE, ONLY_SYMBOLS)


def test_words_join_pieces_and_drop_punctuation():
    assert words(["\u2581Ha", "us", ",", "\u2581der", "\u2581„", "Herr", "“", "."]) == \
        ["Haus", "der", "Herr"]
