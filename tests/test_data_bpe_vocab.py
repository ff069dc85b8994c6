"""Moses tokenization and BPE as a vocabulary (data/bpe_vocab.py), on codes and pieces
made by hand: subword-nmt's and fastBPE's codes read alike, a sentence cut into pieces
and joined back, words marked as data/words.py reads them, and what is stored read back
or refused in one line. (A real fairseq model's: tests/test_pretrained_fairseq_bpe.py.)"""

from __future__ import annotations

import pytest

from transformer_nmt.data.bpe_vocab import BpeVocab, is_bpe_vocab, merges_of
from transformer_nmt.errors import UserError

pytest.importorskip("subword_nmt", reason="the pretrained extra is not installed")

MERGES = ["t h", "th e</w>", "h o", "u s", "us e</w>", "i s</w>"]
CODES = "#version: 0.2\n" + "\n".join(MERGES) + "\n"
PIECES = ["<pad>", "<unk>", "<s>", "</s>", "the", "ho@@", "use", "is", "."]


def vocab(language: str = "en", known: list[bool] | None = None) -> BpeVocab:
    return BpeVocab(PIECES, known or [True] * len(PIECES), CODES, language)


def test_subword_nmt_and_fastbpe_codes_are_the_same_merges():
    assert merges_of(CODES, "codes") == CODES
    fastbpe = "".join(f"{merge} {count}\n" for count, merge in enumerate(MERGES, 10))
    assert merges_of(fastbpe, "codes") == CODES


@pytest.mark.parametrize("codes, says", [
    ("#version: 0.1\nt h\n", "codes: BPE codes of version 0.1"),
    ("t h\nwrong\n", "codes, line 2: 'wrong' is not a merge"),
    ("#version: 0.2\n", "codes: no merges"),
])
def test_codes_that_cannot_be_read_are_one_line_naming_where(codes, says):
    with pytest.raises(UserError, match=says):
        merges_of(codes, "codes")


def test_a_sentence_is_cut_into_pieces_and_joined_back():
    english = vocab()
    ids = english.encode("the house is.")
    assert [english.piece(i) for i in ids] == ["the", "ho@@", "use", "is", "."]
    assert english.decode([english.bos_id, *ids, english.eos_id]) == "the house is."
    assert english.marked_pieces(ids) == ["▁the", "▁ho", "use", "▁is", "."]
    assert english.encode("a house") == [english.unk_id, 5, 6]  # no piece for "a"


def test_a_piece_this_side_does_not_have_is_unknown():
    without_is = vocab(known=[piece != "is" for piece in PIECES])
    assert without_is.encode("the house is") == [4, 5, 6, without_is.unk_id]


def test_what_is_stored_is_read_back_and_damage_is_refused():
    english, german = vocab(), vocab("de")
    stored = english.to_bytes()
    assert is_bpe_vocab(stored) and not is_bpe_vocab(b"\n\x07spm")
    again = BpeVocab.from_bytes(stored, "m.pt", german.to_bytes())
    assert (again.pieces_list, again.language, again.codes) == (PIECES, "en", CODES)
    assert again.target.language == "de" and again.target_bytes() == german.to_bytes()
    assert BpeVocab.from_bytes(stored).target_bytes() is None  # one side serves both
    with pytest.raises(UserError, match="m.pt: damaged BPE vocabulary"):
        BpeVocab.from_bytes(stored[:-5], "m.pt")
    other = BpeVocab([*PIECES[:-1], "!"], [True] * len(PIECES), CODES, "de").to_bytes()
    with pytest.raises(UserError, match="m.pt: its source and target sides do not hold"):
        BpeVocab.from_bytes(stored, "m.pt", other)
