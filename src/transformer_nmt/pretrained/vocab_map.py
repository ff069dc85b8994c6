"""An imported model's vocabulary as this project's own: one sentencepiece model whose ids
are the model's, with the special ids every part of this project relies on.

Toolkits that keep an id map beside their sentencepiece models (Marian's vocab.json) put
their specials elsewhere: OPUS-MT has </s> at 0, <unk> at 1, <pad> last, and no <s> (its
decoder starts from <pad>). The import reorders the ids to pad 0, unk 1, bos 2, eos 3,
then the others in their order (`IdOrder`), and moves the rows of the embeddings and of
the output layer the same way; bos is a second copy of the decoder's start token, which
no search emits. The sentencepiece model is the source side's, its pieces replaced by the
id map's: those the source model does not know (target-language pieces) are marked
unused, so that encoding a source text never produces them while decoding still spells
them out. A multilingual model's target-language tokens (>>fra<<) are user-defined pieces,
which sentencepiece never splits (data/vocab.py reads a source's leading one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from google.protobuf.message import DecodeError
from sentencepiece import sentencepiece_model_pb2

from transformer_nmt.data.vocab import BOS_ID, EOS_ID, LANGUAGE_TOKEN, PAD_ID, UNK_ID, Vocab
from transformer_nmt.errors import UserError

Piece = sentencepiece_model_pb2.ModelProto.SentencePiece


COPY_BIAS = -1e4
"""The logits bias of our bos where it is a second copy of one of the model's specials
(Marian's <pad>, fairseq's </s>): its logit would otherwise count twice in the softmax,
halving an ending's probability under fairseq's models. No probability is left to it,
and the bias is finite so that label smoothing in fine-tuning stays finite (in float16
too)."""


@dataclass(frozen=True)
class IdOrder:
    """Where each of our ids comes from in the imported model."""

    source_ids: list[int]
    """source_ids[ours] is the imported model's id of our id `ours` (bos and pad share
    the decoder's start token's)."""

    def rows(self, table):
        """`table` (source vocab, ...) with its rows in our order (our vocab, ...)."""
        return table[self.source_ids]

    def logits_bias(self, theirs):
        """Our logits bias (our vocab,) from the model's (its vocab,), COPY_BIAS on a bos
        that copies another special."""
        bias = self.rows(theirs).clone()
        if self.source_ids[BOS_ID] in (self.source_ids[i] for i in (PAD_ID, UNK_ID, EOS_ID)):
            bias[BOS_ID] = COPY_BIAS
        return bias


def mapped_vocab(source_spm: bytes, pieces: Sequence[str], specials: dict[str, int],
                 source: str) -> tuple[Vocab, IdOrder]:
    """Our Vocab for a model whose id map is `pieces` (pieces[id]) and whose specials are
    `specials` (ids of "pad", "unk", "eos" and "start", the decoder's first input), with
    the source side's sentencepiece model `source_spm`; and the id order that moves the
    model's tables into it. `source` names the files in errors."""
    pad, unk, eos, start = (specials[name] for name in ("pad", "unk", "eos", "start"))
    if len({pad, unk, eos}) < 3:
        raise UserError(f"{source}: pad, unk and eos must be three different ids, not "
                        f"{pad}, {unk} and {eos}")
    firsts = (pad, unk, start, eos)
    order = list(firsts) + [i for i in range(len(pieces)) if i not in firsts]
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(source_spm)
    except DecodeError as error:
        raise UserError(f"{source}: not a sentencepiece model ({error})") from None
    known = {piece.piece: (piece.score, piece.type) for piece in proto.pieces}
    # A start token of its own (fairseq's <s>) keeps its piece; one that is another
    # special's (Marian's <pad>) needs a name of its own, since pieces are unique.
    start_piece = pieces[start] if start not in (pad, unk, eos) else next(
        name for name in ("<s>", "<decoder-start>", "<start>") if name not in set(pieces))
    del proto.pieces[:]
    for ours, theirs in enumerate(order):
        piece = proto.pieces.add()
        if ours == BOS_ID:
            piece.piece, piece.type = start_piece, Piece.CONTROL
        elif ours in (PAD_ID, EOS_ID):
            piece.piece, piece.type = pieces[theirs], Piece.CONTROL
        elif ours == UNK_ID:
            piece.piece, piece.type = pieces[theirs], Piece.UNKNOWN
        elif LANGUAGE_TOKEN.fullmatch(pieces[theirs]):
            piece.piece, piece.type = pieces[theirs], Piece.USER_DEFINED
        else:
            score, kind = known.get(pieces[theirs], (0.0, Piece.UNUSED))
            piece.piece, piece.score = pieces[theirs], score
            # The source model's own specials (its <s>, </s>) are text to nobody.
            piece.type = Piece.UNUSED if kind in (Piece.CONTROL, Piece.UNKNOWN) else kind
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece = pieces[pad], pieces[unk]
    spec.bos_piece, spec.eos_piece = start_piece, pieces[eos]
    spec.vocab_size = len(order)
    return Vocab.from_bytes(proto.SerializeToString(), source), IdOrder(order)
