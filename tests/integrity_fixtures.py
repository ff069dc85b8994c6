"""Damage as it happens to files on disks and in transfers: bytes flipped inside a model's
weights, a sentencepiece model cut short at a protobuf field boundary."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path


def _flip(path: Path, offset: int, count: int = 4) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        original = handle.read(count)
        handle.seek(offset)
        handle.write(bytes(byte ^ 0xFF for byte in original))


def flip_bytes_in_a_weight(model_file: Path) -> None:
    """Flip four bytes in the middle of the largest tensor's data of a torch.save file,
    in place: the zip archive (whose entries torch stores uncompressed and does not check)
    still reads, only a weight has changed."""
    with zipfile.ZipFile(model_file) as archive:
        entry = max((info for info in archive.infolist() if "/data/" in info.filename),
                    key=lambda info: info.file_size)
    with open(model_file, "rb") as handle:
        handle.seek(entry.header_offset)
        header = handle.read(30)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    data_start = entry.header_offset + 30 + name_length + extra_length
    _flip(model_file, data_start + entry.file_size // 2)


def flip_bytes_in_safetensors(weights: Path) -> None:
    """Flip four bytes in the middle of a model.safetensors file's tensor data, in place."""
    with open(weights, "rb") as handle:
        header_length = struct.unpack("<Q", handle.read(8))[0]
    data_start = 8 + header_length
    _flip(weights, data_start + (weights.stat().st_size - data_start) // 2)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def proto_fields(model: bytes) -> list[tuple[int, bytes]]:
    """(field number, the field's bytes with its key) of each top-level field of a
    serialized sentencepiece model, in order: pieces (1) first, then trainer_spec (2) and
    normalizer_spec (3), each length-delimited."""
    fields, position = [], 0
    while position < len(model):
        key, start = _varint(model, position)
        assert key & 7 == 2, "every field of a ModelProto is length-delimited"
        length, data_start = _varint(model, start)
        fields.append((key >> 3, model[position:data_start + length]))
        position = data_start + length
    return fields


def cut_after_pieces(model: bytes, pieces: int) -> bytes:
    """A serialized sentencepiece model cut at the field boundary after its first `pieces`
    pieces, as a truncated download would leave it."""
    return b"".join(field for _, field in proto_fields(model)[:pieces])
