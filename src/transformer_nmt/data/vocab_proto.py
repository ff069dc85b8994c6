"""What a serialized sentencepiece model declares about itself: how many pieces it holds,
the vocabulary size it was trained for, and whether its trainer and normalizer
specifications are there.

sentencepiece loads a model cut short at a field boundary (a file truncated after some of
its pieces) as a smaller vocabulary that looks valid; these declarations tell a truncated
model from a complete one. sentencepiece's own protobuf classes need the protobuf package,
which transformer-nmt does not depend on, so the few fields read here are decoded from the
protobuf wire format directly (field numbers from sentencepiece_model.proto).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

_PIECES, _TRAINER_SPEC, _NORMALIZER_SPEC = 1, 2, 3
"""Fields of ModelProto."""
_VOCAB_SIZE, _HARD_VOCAB_LIMIT = 4, 33
"""Fields of TrainerSpec."""
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
"""Protobuf wire types (3 and 4, groups, are not used by sentencepiece)."""


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


def _varint(data: bytes, position: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `position`."""
    value = shift = 0
    while position < len(data) and shift < 64:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    raise ValueError("a varint is cut short")


def _fields(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(field number, varint value, start, end) of each field of one message; start and end
    delimit a length-delimited field's bytes. ValueError for data that is cut short."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        value, start = 0, position
        if wire_type == _VARINT:
            value, position = _varint(data, position)
        elif wire_type == _LENGTH_DELIMITED:
            length, start = _varint(data, position)
            position = start + length
        elif wire_type in (_FIXED64, _FIXED32):
            position += 8 if wire_type == _FIXED64 else 4
        else:
            raise ValueError(f"field {number} has wire type {wire_type}")
        if position > len(data):
            raise ValueError(f"field {number} is cut short")
        yield number, value, start, position


def read_declaration(model: bytes) -> Declaration:
    """The declaration of a serialized sentencepiece ModelProto; ValueError when the bytes
    are not a well-formed protobuf message."""
    pieces = 0
    trainer_spec = normalizer_spec = None
    for number, _, start, end in _fields(model):
        if number == _PIECES:
            pieces += 1
        elif number == _TRAINER_SPEC:
            trainer_spec = model[start:end]
        elif number == _NORMALIZER_SPEC:
            normalizer_spec = model[start:end]
    vocab_size, hard_limit = None, True
    if trainer_spec is not None:
        # A trainer_spec without vocab_size means the proto's default, 8000.
        vocab_size = 8000
        for number, value, _, _ in _fields(trainer_spec):
            if number == _VOCAB_SIZE:
                vocab_size = value
            elif number == _HARD_VOCAB_LIMIT:
                hard_limit = bool(value)
    return Declaration(pieces, trainer_spec is not None, normalizer_spec is not None,
                       vocab_size, hard_limit)
