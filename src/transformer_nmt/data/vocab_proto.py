"""What a serialized sentencepiece model declares about itself: how many pieces it holds,
the vocabulary size it was trained for, and whether its trainer and normalizer
specifications are there.

sentencepiece loads a model cut short at a field boundary (a file truncated after some of
its pieces) as a smaller vocabulary that looks valid; these declarations tell a truncated
model from a complete one. They are read with sentencepiece's own protobuf classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError
from sentencepiece import sentencepiece_model_pb2


@dataclass(frozen=True)
class Declaration:
    """What a sentencepiece model's proto says about its own completeness."""

    pieces: int
    """Pieces the model holds."""
    has_trainer_spec: bool
    has_normalizer_spec: bool
    vocab_size: int | None
    """The size it was trained for (the trainer_spec's vocab_size); None without a trainer_spec."""
    hard_vocab_limit: bool
    """Whether training had to reach vocab_size exactly (sentencepiece's default)."""


def read_declaration(model: bytes) -> Declaration:
    """The declaration of a serialized sentencepiece ModelProto; ValueError when the bytes
    are not a well-formed protobuf message (cut inside a field, say)."""
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model)
    except DecodeError as error:
        raise ValueError(f"not a protobuf message: {error}") from None
    has_trainer_spec = proto.HasField("trainer_spec")
    # An absent trainer_spec's fields read as the proto's defaults (vocab_size 8000).
    return Declaration(len(proto.pieces), has_trainer_spec, proto.HasField("normalizer_spec"),
                       proto.trainer_spec.vocab_size if has_trainer_spec else None,
                       proto.trainer_spec.hard_vocab_limit)
