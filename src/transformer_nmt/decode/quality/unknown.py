"""A source the model's vocabulary cannot read: most of its characters fall in unknown
pieces (the vocabulary's unk id), so that whatever the model writes for it is invented,
not translated. Such a translation gets confidence 0 with UNKNOWN_SOURCE as its reason,
calibrated model or not: the verdict needs only the source and its ids.

The rule counts characters, not pieces: sentencepiece collapses a run of unknown
characters into one unknown piece, so that 18,900 characters of Japanese given to a
German model are two pieces, a space and one unk, and a Japanese sentence holding a
Latin brand name has more known pieces (the name's) than unknown ones, though most of
what it says is unknown. Characters measure how much of the text the model cannot see.
"""

from __future__ import annotations

from typing import Any, Sequence

from transformer_nmt.data.words import WORD_START

UNKNOWN_SHARE = 0.5
"""A source is unreadable when more than this share of its characters (spaces aside) fall
in unknown pieces. Up to half, the model sees most of the sentence, and a name in another
script or an emoji does not keep it from translating the rest; beyond, most of the
meaning is hidden from it."""
UNKNOWN_SOURCE = ("most of the source is unknown to the model's vocabulary (another "
                  "language or script?)")
"""The confidence reason of a translation of an unreadable source, worded as the other
reasons are (decode/quality/confidence.py)."""


def unknown_share(text: str, ids: Sequence[int], vocab: Any) -> float:
    """The share of `text`'s characters (spaces aside) that fall in unknown pieces, where
    `ids` are its whole encoding by `vocab` (data/vocab.py's or data/bpe_vocab.py's).

    The pieces record no position in the text, so the unknown characters are those the
    known pieces do not spell; a target-language token (>>fra<<) is left out of both
    counts, being no part of the text to translate."""
    if vocab.unk_id not in ids:
        return 0.0
    language = set(vocab.language_tokens.values())
    characters = sum(not character.isspace() for character in text) - sum(
        len(vocab.piece(token)) for token in ids if token in language)
    known = sum(len(piece.replace(WORD_START, ""))
                for token, piece in zip(ids, vocab.marked_pieces(ids))
                if token != vocab.unk_id and token not in language)
    # Normalization may spell a character as two known ones (the ligature ﬁ as f, i).
    return max(characters - known, 0) / characters if characters > 0 else 0.0


def unreadable(text: str, ids: Sequence[int], vocab: Any) -> bool:
    """Whether more than UNKNOWN_SHARE of `text` falls in unknown pieces of `vocab`
    (`ids`: its whole encoding)."""
    return unknown_share(text, ids, vocab) > UNKNOWN_SHARE


def mark_unreadable(translations: Sequence[Sequence[Any]], flags: Sequence[bool]) -> None:
    """Give every Translation of translations[i] confidence 0 with UNKNOWN_SOURCE as its
    first reason where flags[i] says its source is unreadable: whatever its confidence
    was, the model did not see what it was asked to translate. The reasons found before
    (a degenerate output's) follow, being true as well."""
    for found, flag in zip(translations, flags):
        if flag:
            for translation in found:
                translation.confidence = 0.0
                translation.confidence_reasons = [UNKNOWN_SOURCE, *(
                    reason for reason in translation.confidence_reasons
                    if reason != UNKNOWN_SOURCE)]


def is_unreadable(translation: Any) -> bool:
    """Whether `translation` (a Translation) is of a source its model could not read."""
    return UNKNOWN_SOURCE in translation.confidence_reasons
