"""Which sentencepiece pieces form which words: the one rule behind word alignments, the
web page's word groups, the degenerate-output guard's words and the paragraph offsets of
documents.

A word is what `str.split()` finds in the text the pieces spell, so that a word index
from pieces (an alignment) and one from the decoded text (documents, the page, a client)
name the same word:

- a piece that begins with the mark ▁ starts a word, any other joins the word before it
  (the first piece with text starts one too);
- a lone ▁ (the mark with nothing after it, before a character that has no piece with
  the mark, "▁" "«") belongs to the word that the next piece starts; followed by
  another word start, a special piece or nothing, it spells only a space and belongs to
  no word, as the space belongs to no word of the text;
- pad, BOS and EOS, and a multilingual model's target-language token (>>fra<<), are not
  text: they belong to no word, and the words around them are counted as if they were
  not there, so a source's word 0 is its own first word with or without the token;
- the unknown piece stands for characters the vocabulary lacks, which are text: it is
  part of the word it is in, as those characters are of the source's text. (Decoded, it
  shows as sentencepiece's " ⁇ ", spaces included, so a translation with one inside a
  word has a text word more there; the text's characters are lost either way.)

Plain text (a paragraph, a translation's decoded text) is cut into words by `text_words`,
the same decision seen from the text: whitespace separates words.

A different question has its own rule here: whether a piece *continues* a word
(`continues_word`), which constrained search asks to end a required phrase where a word
ends. Punctuation joins the word before it for alignments (a period is no word of its
own in the text), but does not make a phrase's last word another word, so only a piece
with a letter or digit continues one.
"""

from __future__ import annotations

from typing import Any, Sequence

from transformer_nmt.data.vocab import LANGUAGE_TOKEN

WORD_START = "\u2581"
"""sentencepiece's mark of a piece that starts a word (it stands for the space before)."""
SPECIAL_PIECES = frozenset({"<pad>", "<s>", "</s>"})
"""Pieces that are not text and so belong to no word (with the target-language tokens)."""
UNKNOWN_PIECE = "<unk>"
"""The piece of characters the vocabulary lacks: text, but which text is unknown."""


def is_text(piece: str) -> bool:
    """Whether `piece` spells text: not pad, BOS, EOS or a target-language token."""
    return piece not in SPECIAL_PIECES and LANGUAGE_TOKEN.fullmatch(piece) is None


def starts_word(piece: str) -> bool:
    """Whether `piece` begins with the word-start mark ▁ (a lone ▁ included)."""
    return piece.startswith(WORD_START)


def piece_text(piece: str) -> str:
    """The characters `piece` adds to its word: the mark ▁ left out, none for a piece
    that is not text."""
    return piece.replace(WORD_START, "") if is_text(piece) else ""


def word_index(pieces: Sequence[str]) -> list[int | None]:
    """The 0-based word of each piece, None for a piece of no word (see the module's
    rule: specials, target-language tokens, a lone ▁ that only spells a space)."""
    index: list[int | None] = [None] * len(pieces)
    word, new_word, lone_mark = -1, True, None
    for position, piece in enumerate(pieces):
        if not is_text(piece):
            continue
        text = piece_text(piece)
        if starts_word(piece):
            new_word, lone_mark = True, (None if text else position)
        if not text:
            continue
        if new_word:
            word, new_word = word + 1, False
            if lone_mark is not None:  # "▁" "«": the mark is this word's space
                index[lone_mark], lone_mark = word, None
        index[position] = word
    return index


def word_groups(pieces: Sequence[str]) -> list[dict[str, Any]]:
    """The words of `pieces`, each {'text': the word, 'pieces': indices of its pieces},
    as the server sends them with an attention map."""
    words: list[dict[str, Any]] = []
    for position, (piece, word) in enumerate(zip(pieces, word_index(pieces))):
        if word is None:
            continue
        if word == len(words):
            words.append({"text": "", "pieces": []})
        words[word]["text"] += piece_text(piece)
        words[word]["pieces"].append(position)
    return words


def piece_words(pieces: Sequence[str]) -> list[str]:
    """The words that `pieces` spell, in order: `text_words` of their decoded text."""
    return [word["text"] for word in word_groups(pieces)]


def text_words(text: str) -> list[str]:
    """The words of plain text: what whitespace separates."""
    return text.split()


def continues_word(piece: str) -> bool:
    """Whether `piece` makes the word before it another word: no mark ▁, and a letter
    or digit (punctuation after a word leaves it whole; specials never continue one, nor
    the unknown piece, whose characters could as well be punctuation)."""
    return (is_text(piece) and piece != UNKNOWN_PIECE and not starts_word(piece)
            and any(character.isalnum() for character in piece))
