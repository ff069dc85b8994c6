"""A model's CTranslate2 form, converted once and kept: in the cache directory
(transformer_nmt.runtime.cache_dir), under the checksum of the model's weights and of its
shape's settings (two models may share weights and differ in, say, their positions' table),
the weights' storage type, the decoder layer its attention output reads and the checksum of
its vocabulary map where it has one, so that a model changed, quantized otherwise, read at
another layer or given another shortlist is converted anew.

Its vocabulary is the token ids themselves written as decimal strings ('0', '1', ...):
the runtime hands CTranslate2 our ids and reads ids back, whatever the pieces are (an
imported model's joined vocabularies may spell two ids alike)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from torch import nn

from transformer_nmt.checksum import CHECKSUM_KEY, weights_checksum
from transformer_nmt.decode.attention.probe import probe_layer
from transformer_nmt.decode.runtime.ct2_spec import convert
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.files import temporary_directory
from transformer_nmt.runtime import cache_dir

MODEL_FILE = "model.bin"
"""CTranslate2's weights file: a directory holding it is a finished conversion."""


def model_key(model: nn.Module, meta: dict) -> str:
    """The hex digest of `model`'s weights: the one its model file recorded (verified when
    read), else computed now (a model built in memory)."""
    checksum = meta.get(CHECKSUM_KEY) or weights_checksum(model.state_dict())
    return checksum.split(":", 1)[-1]


def settings_key(model: nn.Module, special: SpecialIds, unk: int, vocab_size: int) -> str:
    """A short digest of what the conversion reads besides the weights: the model's
    settings (its ModelConfig), the special ids and the vocabulary's size."""
    settings = {"model": dataclasses.asdict(model.cfg), "special": dataclasses.asdict(special),
                "unk": unk, "vocab_size": vocab_size}
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def converted_model(model: nn.Module, meta: dict, special: SpecialIds, unk: int,
                    vocab_size: int, storage: str, vmap: str | None = None) -> Path:
    """The directory of `model` (a Transformer; `meta` its file's payload without the
    weights) as a CTranslate2 model whose weights are stored as `storage`, with `vmap`
    (a vocabulary map's text in token ids, transformer_nmt.decode.runtime.vmap) where
    given, converted now unless an earlier call kept it. Built aside and renamed into
    place, so that a reader never sees half a model and two processes converting at once
    both succeed."""
    layer = probe_layer(model.cfg.decoder_layers)
    name = (f"{model_key(model, meta)[:32]}-{settings_key(model, special, unk, vocab_size)}"
            f"-{storage}-layer{layer}")
    if vmap is not None:  # another map, another conversion
        name += f"-vmap{hashlib.sha256(vmap.encode('utf-8')).hexdigest()[:16]}"
    target = cache_dir() / "ctranslate2" / name
    if (target / MODEL_FILE).exists():
        return target
    with temporary_directory(target) as building:
        convert(model, [str(i) for i in range(vocab_size)], special.bos, special.eos, unk,
                str(building), storage, vmap)
        try:
            os.rename(building, target)
        except OSError:
            if not (target / MODEL_FILE).exists():  # not another process's finished one
                raise
    return target
