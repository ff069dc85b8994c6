"""The text pipeline of fairseq's WMT models as a vocabulary: Moses tokenization
(sacremoses), BPE with subword-nmt's codes (fastBPE writes the same merges, with counts),
and a fixed list of pieces, with this project's special ids.

A sentence is tokenized by Moses for its language (aggressive dash splits and escaping as
fairseq's `--tokenizer moses` does), cut into pieces by the BPE merges, and each piece
looked up in the list (<unk> where this side does not have it); a translation is the
reverse: pieces joined by spaces, the separator's joins undone ("@@ "), and Moses's
detokenizer for the language. A piece ending with the separator continues into the next
one: words start after a piece without it, not at a ▁ mark as in sentencepiece's pieces,
and `marked_pieces` writes them with the mark, so that data/words.py's one rule of words
(alignments, the page, the guard, constraints) reads both kinds alike.

Stored as JSON bytes (the `vocab` and `target_vocab` of a model file, each side with its
own Moses language and the pieces it has), so that a model file stays self-contained and
its reading runs no code; `subword_nmt` (the `pretrained` extra) applies the merges.
"""

from __future__ import annotations

import functools
import io
import json
from typing import Any, Iterable, Sequence

from sacremoses import MosesDetokenizer, MosesTokenizer

from transformer_nmt.data.vocab import (BOS_ID, EOS_ID, LANGUAGE_TOKEN, PAD_ID, UNK_ID,
                                        available_cores)
from transformer_nmt.data.words import WORD_START
from transformer_nmt.errors import UserError

FORMAT = "transformer-nmt-bpe-vocab"
VERSION = 1
MAGIC = b'{"format": "' + FORMAT.encode() + b'"'
"""How the stored JSON of such a vocabulary begins (json.dumps writes `format` first)."""
SEPARATOR = "@@"
"""subword-nmt's and fastBPE's mark of a piece that continues into the next."""


def is_bpe_vocab(model: bytes) -> bool:
    """Whether stored vocabulary bytes are this kind (else a sentencepiece model)."""
    return model.startswith(MAGIC)


def merges_of(codes: str, where: str) -> str:
    """BPE codes as subword-nmt reads them (a `#version: 0.2` line, then "left right"
    per merge), from subword-nmt's own file or fastBPE's ("left right count" lines, the
    same merges in version 0.2's spelling); a UserError naming `where` otherwise."""
    lines = codes.splitlines()
    if lines and lines[0].startswith("#version:"):
        if lines[0].split()[-1] not in ("0.2", "0.2.0"):
            raise UserError(f"{where}: BPE codes of version {lines[0].split()[-1]}; "
                            "version 0.2 (subword-nmt 0.2 and later, fastBPE) is read")
        lines = lines[1:]
    merges = []
    for number, line in enumerate(lines, 1):
        fields = line.split(" ")
        if len(fields) == 3 and fields[2].isdigit():
            fields = fields[:2]
        if len(fields) != 2 or not all(fields):
            raise UserError(f"{where}, line {number}: {line!r} is not a merge ('left right' "
                            "or fastBPE's 'left right count')")
        merges.append(" ".join(fields))
    if not merges:
        raise UserError(f"{where}: no merges; give the BPE codes the model was trained with")
    return "#version: 0.2\n" + "\n".join(merges) + "\n"


class BpeVocab:
    """Moses tokenization and BPE into a fixed list of pieces; the interface of
    data/vocab.py's Vocab (encode, decode, pieces, the special ids, `target`)."""

    def __init__(self, pieces: Sequence[str], known: Sequence[bool], codes: str,
                 language: str, target: "BpeVocab | None" = None) -> None:
        self.pieces_list = list(pieces)
        """pieces_list[id]: the piece of each id (our specials first)."""
        self.known = list(known)
        """known[id]: whether this side's text may be cut into the piece."""
        self.codes = codes
        self.language = language
        """The language Moses tokenizes (this side's text) by."""
        self.index = {piece: i for i, piece in enumerate(self.pieces_list)
                      if self.known[i] and i not in (PAD_ID, BOS_ID, EOS_ID, UNK_ID)}
        self.target: BpeVocab = self if target is None else target
        """The vocabulary that encodes target text (its Moses language and pieces)."""
        self.language_tokens: dict[str, int] = {}
        """None: target-language tokens are sentencepiece models' (data/vocab.py)."""
        self.threads = available_cores()
        self._tools: Any = None

    @classmethod
    def from_bytes(cls, model: bytes, source: str = "embedded vocabulary",
                   target: bytes | None = None) -> "BpeVocab":
        """The vocabulary stored by `to_bytes` (and its target side's, where given); a
        one-line UserError naming `source` unless each is complete and both hold the same
        pieces."""
        fields = _read(model, source)
        if target is None:
            return cls(*fields)
        target_fields = _read(target, f"{source} (target side)")
        if target_fields[0] != fields[0]:
            raise UserError(f"{source}: its source and target sides do not hold the same "
                            "pieces at the same ids; import the model again")
        return cls(*fields, target=cls(*target_fields))

    def to_bytes(self) -> bytes:
        """This side's JSON: the pieces, which of them it has, the merges, its language."""
        return json.dumps({"format": FORMAT, "version": VERSION, "pieces": self.pieces_list,
                           "known": [int(flag) for flag in self.known], "codes": self.codes,
                           "language": self.language}, ensure_ascii=False).encode("utf-8")

    def target_bytes(self) -> bytes | None:
        """The target side's JSON, or None when one side serves both."""
        return None if self.target is self else self.target.to_bytes()

    def __len__(self) -> int:
        return len(self.pieces_list)

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def encode(self, text: str) -> list[int]:
        """Token ids of one sentence, without BOS or EOS."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str], threads: int | None = None
                     ) -> list[list[int]]:
        """Token ids of each sentence: Moses tokens, BPE pieces, ids (<unk> for a piece
        this side does not have). `threads` is accepted for Vocab's signature."""
        tokenizer, bpe, _ = self._loaded()
        found = []
        for text in texts:
            tokens = tokenizer.tokenize(text, aggressive_dash_splits=True, return_str=True,
                                        escape=True)
            found.append([self.index.get(piece, UNK_ID)
                          for piece in bpe.process_line(tokens).split()])
        return found

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a sequence of ids (a translation: the target's Moses language detokenizes
        it); pad, bos and eos are skipped wherever they are."""
        *_, detokenizer = self.target._loaded()
        pieces = " ".join(self.pieces_list[int(i)] for i in ids
                          if int(i) not in (PAD_ID, BOS_ID, EOS_ID))
        joined = (pieces + " ").replace(SEPARATOR + " ", "").rstrip()
        return detokenizer.detokenize(joined.split())

    def pieces(self, text: str) -> list[str]:
        """The BPE pieces of one sentence, as strings."""
        return [self.piece(i) for i in self.encode(text)]

    def piece(self, token_id: int) -> str:
        """The piece of one id (ending with @@ where it continues into the next)."""
        return self.pieces_list[int(token_id)]

    def score(self, token_id: int) -> float:
        """0: BPE ranks merges, not pieces."""
        return 0.0

    def marked_pieces(self, ids: Iterable[int]) -> list[str]:
        """The pieces of `ids` as data/words.py reads them, words being those of the text
        they spell: ▁ before each piece that begins a Moses token which begins a word of
        the detokenized text (punctuation Moses split off a word joins it again), the @@
        left out. Specials stay as they are."""
        ids = [int(i) for i in ids]
        pieces = [self.piece(i) for i in ids]
        text = [not (i in (PAD_ID, BOS_ID, EOS_ID) or LANGUAGE_TOKEN.fullmatch(piece))
                for i, piece in zip(ids, pieces)]
        tokens: list[list[int]] = []  # the positions of each Moses token's pieces
        for position, piece in enumerate(pieces):
            if not text[position]:
                continue
            if not tokens or not pieces[tokens[-1][-1]].endswith(SEPARATOR):
                tokens.append([])
            tokens[-1].append(position)
        surfaces = ["".join(pieces[p].removesuffix(SEPARATOR) for p in token)
                    for token in tokens]
        marked = list(pieces)
        for token, starts in zip(tokens, self._starts_word(surfaces)):
            for position in token:
                marked[position] = pieces[position].removesuffix(SEPARATOR)
            if starts:
                marked[token[0]] = WORD_START + marked[token[0]]
        return marked

    def _starts_word(self, tokens: list[str]) -> list[bool]:
        """For each Moses token, whether it begins a word of their detokenized text (the
        first does; one whose surface is not found there is taken to begin one)."""
        if len(tokens) < 2:  # the first begins a word: nothing to detokenize
            return [True] * len(tokens)
        *_, detokenizer = self._loaded()
        text = detokenizer.detokenize(tokens)
        starts, position = [], 0
        for token in tokens:
            surface = _surface(detokenizer, token)
            found = text.find(surface, position) if surface else -1
            starts.append(found <= 0 or text[found - 1].isspace())
            if found >= 0:
                position = found + len(surface)
        return starts

    def _loaded(self) -> Any:
        """(Moses tokenizer, subword-nmt's BPE, Moses detokenizer), made on first use."""
        if self._tools is None:
            try:
                from subword_nmt.apply_bpe import BPE
            except ImportError:
                raise UserError("this model's vocabulary is Moses and BPE, which needs "
                                "subword-nmt: pip install 'transformer-nmt[pretrained]'"
                                ) from None
            self._tools = (MosesTokenizer(self.language), BPE(io.StringIO(self.codes)),
                           MosesDetokenizer(self.language))
        return self._tools


@functools.lru_cache(maxsize=65536)
def _surface(detokenizer: Any, token: str) -> str:
    """What one Moses token reads as in text (its escapes undone): detokenized alone."""
    return detokenizer.detokenize([token])


def _read(model: bytes, source: str) -> tuple[list[str], list[bool], str, str]:
    """(pieces, known, codes, language) of a stored side; a UserError naming `source`."""
    try:
        data = json.loads(model.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{source}: damaged BPE vocabulary ({error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{source}: not a BPE vocabulary of transformer-nmt")
    if data.get("version") != VERSION:
        raise UserError(f"{source}: BPE vocabulary version {data.get('version')}, this "
                        f"release reads {VERSION}; upgrade transformer-nmt")
    pieces, known = data.get("pieces"), data.get("known")
    if not (isinstance(pieces, list) and all(isinstance(p, str) for p in pieces)
            and isinstance(known, list) and len(known) == len(pieces) > EOS_ID
            and isinstance(data.get("codes"), str) and isinstance(data.get("language"), str)
            and len(set(pieces)) == len(pieces)):
        raise UserError(f"{source}: damaged BPE vocabulary (its pieces, codes or language "
                        "are missing or malformed); import the model again")
    return pieces, [bool(flag) for flag in known], data["codes"], data["language"]
