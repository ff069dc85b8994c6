"""What a serialized sentencepiece model declares about itself (data/vocab_proto.py), read
with sentencepiece's protobuf classes."""

from __future__ import annotations

import pytest

from transformer_nmt.data.manifest import SPM_MODEL
from transformer_nmt.data.vocab_proto import read_declaration

from integrity_fixtures import cut_after_pieces, proto_fields


def test_a_complete_model_declares_its_pieces_size_and_specifications(tiny_data):
    declared = read_declaration((tiny_data / SPM_MODEL).read_bytes())
    assert (declared.pieces, declared.vocab_size) == (64, 64)
    assert declared.has_trainer_spec and declared.has_normalizer_spec
    assert declared.hard_vocab_limit


def test_a_model_cut_after_its_pieces_declares_no_size(tiny_data):
    declared = read_declaration(cut_after_pieces((tiny_data / SPM_MODEL).read_bytes(), 40))
    assert declared.pieces == 40 and declared.vocab_size is None
    assert not declared.has_trainer_spec and not declared.has_normalizer_spec


def test_bytes_cut_inside_a_field_are_not_a_message(tiny_data):
    model = (tiny_data / SPM_MODEL).read_bytes()
    inside_a_piece = len(proto_fields(model)[0][1]) + 3
    with pytest.raises(ValueError, match="not a protobuf message"):
        read_declaration(model[:inside_a_piece])
    with pytest.raises(ValueError, match="not a protobuf message"):
        read_declaration(b"\x0b")
