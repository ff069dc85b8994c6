"""An imported model's vocabulary as this project's own: sentencepiece models whose ids
are the model's, with the special ids every part of this project relies on.

Toolkits that keep an id map beside their sentencepiece models (Marian's vocab.json) put
their specials elsewhere: OPUS-MT has </s> at 0, <unk> at 1, <pad> last, and no <s> (its
decoder starts from <pad>). The import reorders the ids to pad 0, unk 1, bos 2, eos 3,
then the others in their order (`IdOrder`), and moves the rows of the embeddings and of
the output layer the same way; bos is a second copy of the decoder's start token, which
no search emits. The sentencepiece model is the source side's, its pieces replaced by the
id map's: those the source model does not know (target-language pieces) are marked
unused, so that encoding a source text never produces them while decoding still spells
them out. Where the target side has a sentencepiece model of its own, a second one over
the same pieces encodes target text (data/vocab.py's `Vocab.target`). A multilingual
model's target-language tokens (>>fra<<) are user-defined pieces, which sentencepiece
never splits (data/vocab.py reads a source's leading one).

Separate source and target vocabularies (two id maps) become one id space: the target's
pieces in its order, then the pieces only the source has. Each side's table gets a zero
row for the pieces it does not have, and the logits bias leaves source-only pieces no
probability, so that the log-probabilities over the target's own pieces are exactly the
model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from google.protobuf.message import DecodeError
from sentencepiece import sentencepiece_model_pb2
from torch import Tensor

from transformer_nmt.data.bpe_vocab import BpeVocab
from transformer_nmt.data.vocab import BOS_ID, EOS_ID, LANGUAGE_TOKEN, PAD_ID, UNK_ID, Vocab
from transformer_nmt.errors import UserError

Piece = sentencepiece_model_pb2.ModelProto.SentencePiece


COPY_BIAS = -1e4
"""The logits bias of a piece the model must never emit: our bos where it is a second copy
of one of the model's specials (Marian's <pad>, fairseq's </s>), whose logit would
otherwise count twice in the softmax, halving an ending's probability under fairseq's
models; and a piece only the source side has. No probability is left to it, and the bias
is finite so that label smoothing in fine-tuning stays finite (in float16 too)."""
ABSENT = -1
"""An `IdOrder` entry for one of our ids that the side's table has no row for."""


@dataclass(frozen=True)
class IdOrder:
    """Where each of our ids comes from in one side's tables of the imported model."""

    their_ids: list[int]
    """their_ids[ours] is the imported model's id of our id `ours` (bos and pad share
    the decoder's start token's), or ABSENT where this side has no such piece."""

    def rows(self, table: Tensor) -> Tensor:
        """`table` (its vocab, ...) with its rows in our order (our vocab, ...), zeros
        for the pieces this side does not have."""
        index = torch.tensor(self.their_ids)
        rows = table[index.clamp(min=0)]
        rows[index == ABSENT] = 0
        return rows

    def logits_bias(self, theirs: Tensor) -> Tensor:
        """Our logits bias (our vocab,) from the model's (its vocab,): COPY_BIAS on a bos
        that copies another special and on the pieces the target side does not have."""
        bias = self.rows(theirs).clone()
        bias[torch.tensor(self.their_ids) == ABSENT] = COPY_BIAS
        if self.their_ids[BOS_ID] in (self.their_ids[i] for i in (PAD_ID, UNK_ID, EOS_ID)):
            bias[BOS_ID] = COPY_BIAS
        return bias


@dataclass(frozen=True)
class Side:
    """One side's vocabulary in the imported model."""

    spm: bytes
    """Its sentencepiece model, serialized."""
    pieces: Sequence[str]
    """Its id map: pieces[id]."""
    specials: dict[str, int]
    """The ids of its "pad", "unk" and "eos" (and, on the target side, of "start", the
    decoder's first input)."""


@dataclass(frozen=True)
class ImportedVocab:
    """Our vocabulary of an imported model, and the orders that move its tables into it."""

    vocab: Vocab | BpeVocab
    source: IdOrder
    """The rows of the encoder's embeddings."""
    target: IdOrder
    """The rows of the decoder's embeddings, the output layer and the logits bias."""


def mapped_vocab(source: Side, target: Side, where: str) -> ImportedVocab:
    """Our vocabulary of a model whose source and target sides are `source` and `target`
    (the same id map for a shared vocabulary, each with its own sentencepiece model or
    the same one); `where` names the files in errors."""
    pieces, source_ids, order = joint_ids(source, target, where)
    source_proto = _proto(source.spm, pieces, [i != ABSENT for i in source_ids], where)
    target_proto = _proto(target.spm, pieces, [i != ABSENT for i in order], where)
    vocab = Vocab.from_bytes(source_proto, where,
                             None if target_proto == source_proto else target_proto)
    return ImportedVocab(vocab, IdOrder(source_ids), IdOrder(order))


def joint_ids(source: Side, target: Side, where: str
              ) -> tuple[list[str], list[int], list[int]]:
    """(our pieces, the source side's id of each or ABSENT, the target side's id of each
    or ABSENT): our specials first, then the target's pieces in its order, then those only
    the source has. `Side.spm` is not read."""
    pad, unk, eos, start = (target.specials[name] for name in ("pad", "unk", "eos", "start"))
    if len({pad, unk, eos}) < 3:
        raise UserError(f"{where}: pad, unk and eos must be three different ids, not "
                        f"{pad}, {unk} and {eos}")
    firsts = (pad, unk, start, eos)
    order = list(firsts) + [i for i in range(len(target.pieces)) if i not in firsts]
    pieces = [target.pieces[i] for i in order]
    shared = list(source.pieces) == list(target.pieces)
    if shared:
        source_ids = order
    else:
        own = {name: source.specials[name] for name in ("pad", "unk", "eos")}
        theirs = {piece: i for i, piece in enumerate(source.pieces) if i not in own.values()}
        known = set(pieces)
        only_source = [piece for piece in theirs if piece not in known]
        source_ids = [own["pad"], own["unk"], ABSENT, own["eos"]] + [
            theirs.get(piece, ABSENT) for piece in pieces[4:]] + [
            theirs[piece] for piece in only_source]
        order = order + [ABSENT] * len(only_source)
        pieces += only_source
    # A start token of its own (fairseq's <s>) keeps its piece; one that is another
    # special's (Marian's <pad>) needs a name of its own, since pieces are unique.
    start_piece = pieces[BOS_ID] if start not in (pad, unk, eos) else next(
        name for name in ("<s>", "<decoder-start>", "<start>") if name not in set(pieces))
    pieces[BOS_ID] = start_piece
    return pieces, source_ids, order


def _proto(spm_model: bytes, pieces: list[str], on_side: list[bool], where: str) -> bytes:
    """The serialized sentencepiece model `spm_model` with its pieces replaced by ours
    (`pieces`, specials first), keeping its scores; pieces it does not know, or that are
    not on its side (`on_side[id]` False), marked unused so that it never produces them."""
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(spm_model)
    except DecodeError as error:
        raise UserError(f"{where}: not a sentencepiece model ({error})") from None
    known = {piece.piece: (piece.score, piece.type) for piece in proto.pieces}
    del proto.pieces[:]
    for ours, name in enumerate(pieces):
        piece = proto.pieces.add()
        piece.piece = name
        if ours in (PAD_ID, BOS_ID, EOS_ID):
            piece.type = Piece.CONTROL
        elif ours == UNK_ID:
            piece.type = Piece.UNKNOWN
        elif not on_side[ours]:
            piece.type = Piece.UNUSED
        elif LANGUAGE_TOKEN.fullmatch(name):
            piece.type = Piece.USER_DEFINED
        else:
            score, kind = known.get(name, (0.0, Piece.UNUSED))
            piece.score = score
            # The sentencepiece model's own specials (its <s>, </s>) are text to nobody.
            piece.type = Piece.UNUSED if kind in (Piece.CONTROL, Piece.UNKNOWN) else kind
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece = pieces[PAD_ID], pieces[UNK_ID]
    spec.bos_piece, spec.eos_piece = pieces[BOS_ID], pieces[EOS_ID]
    spec.vocab_size = len(pieces)
    return proto.SerializeToString()


def mapped_bpe_vocab(source: Side, target: Side, codes: str, languages: tuple[str, str],
                     where: str) -> ImportedVocab:
    """Our Moses and BPE vocabulary (data/bpe_vocab.py) of a model whose sides' id maps are
    `source` and `target`, cut by the merges `codes`, tokenized in `languages` (source,
    target); `where` names the files in errors."""
    pieces, source_ids, order = joint_ids(source, target, where)
    target_side = BpeVocab(pieces, [i != ABSENT for i in order], codes, languages[1])
    vocab = BpeVocab(pieces, [i != ABSENT for i in source_ids], codes, languages[0],
                     target=target_side)
    return ImportedVocab(vocab, IdOrder(source_ids), IdOrder(order))
