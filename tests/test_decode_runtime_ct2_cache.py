"""A model's CTranslate2 form (decode/runtime/ct2_cache.py): converted once into the
cache directory and reused, converted anew for other weights or another storage type,
its vocabulary the token ids."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from transformer_nmt.config import get_preset
from transformer_nmt.decode.runtime.ct2_cache import MODEL_FILE, converted_model, model_key
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.model.transformer import Transformer

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

VOCAB = 32
SPECIAL = SpecialIds(0, 1, 2)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "ctranslate2"


def _model(seed: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(get_preset("tiny").model, VOCAB)


def test_a_model_is_converted_once_and_reused(cache):
    model = _model(0)
    first = converted_model(model, {}, SPECIAL, 3, VOCAB, "float32")
    written = (first / MODEL_FILE).stat().st_mtime_ns
    again = converted_model(model, {}, SPECIAL, 3, VOCAB, "float32")
    assert again == first and (again / MODEL_FILE).stat().st_mtime_ns == written
    assert [path.name for path in cache.iterdir()] == [first.name]  # no temporaries left
    vocabulary = json.loads((first / "shared_vocabulary.json").read_text())
    assert vocabulary == [str(i) for i in range(VOCAB)]


def test_other_weights_or_storage_are_converted_anew(cache):
    model, other = _model(0), _model(1)
    paths = {converted_model(model, {}, SPECIAL, 3, VOCAB, "float32"),
             converted_model(model, {}, SPECIAL, 3, VOCAB, "int8"),
             converted_model(other, {}, SPECIAL, 3, VOCAB, "float32")}
    assert len(paths) == 3
    assert all((path / MODEL_FILE).exists() for path in paths)


def test_the_key_is_the_recorded_checksum_where_the_file_has_one():
    model = _model(0)
    assert model_key(model, {"checksum": "sha256:abc"}) == "abc"
    assert model_key(model, {}) == model_key(_model(0), {}) != model_key(_model(1), {})


def test_the_same_weights_in_another_shape_are_converted_anew(cache):
    """Sinusoidal positions are no weights: models that differ only in their table's
    length share a checksum, and each gets its own conversion (a shared one refused the
    longer model's positions)."""
    short = Transformer(replace(get_preset("tiny").model, max_positions=64), VOCAB)
    long = Transformer(replace(get_preset("tiny").model, max_positions=256), VOCAB)
    long.load_state_dict(short.state_dict(), strict=False)
    assert model_key(short, {}) == model_key(long, {})
    assert (converted_model(short, {}, SPECIAL, 3, VOCAB, "float32")
            != converted_model(long, {}, SPECIAL, 3, VOCAB, "float32"))
