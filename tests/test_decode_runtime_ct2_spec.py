"""Our Transformer as a CTranslate2 specification (decode/runtime/ct2_spec.py): what
CTranslate2 cannot run said before any work, the weights, vocabulary and special tokens
the specification holds, and a conversion with a vocabulary map leaving the map beside the
model and nothing aside. (CTranslate2 decoding the converted model as we do:
tests/test_export_ctranslate2.py, tests/test_decode_runtime_ct2_cache.py.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from torch import nn

from transformer_nmt.config import get_preset
from transformer_nmt.decode.runtime.ct2_spec import (config_unsupported_reason, convert,
                                                     model_spec, unsupported_reason)
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer

TINY = get_preset("tiny").model
VOCAB = 12
PIECES = ["<pad>", "<unk>", "<s>", "</s>", *(f"▁w{i}" for i in range(VOCAB - 4))]

pytestmark = pytest.mark.usefixtures("keep_torch_threads")


def test_what_ctranslate2_cannot_run_is_said_before_any_work():
    assert config_unsupported_reason(TINY) is None
    assert unsupported_reason(Transformer(TINY, VOCAB)) is None
    assert "d_k = 16 but d_v = 8" in config_unsupported_reason(replace(TINY, d_k=16, d_v=8))
    assert unsupported_reason(nn.Linear(2, 2)) == ("it is not one Transformer (an ensemble "
                                                   "decodes in PyTorch)")


def test_the_specification_holds_the_weights_vocabulary_and_special_tokens():
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    model = Transformer(TINY, VOCAB).eval()
    spec = model_spec(model, PIECES, bos=2, eos=3, unk=1)
    assert np.array_equal(spec.encoder.embeddings[0].weight,
                          model.src_embed.weight.detach().numpy())
    assert np.array_equal(spec.decoder.projection.weight,
                          model.projection_weight.detach().numpy())
    assert len(spec.encoder.layer) == TINY.encoder_layers
    config = spec.config
    assert (config.bos_token, config.eos_token, config.unk_token) == ("<s>", "</s>", "<unk>")
    assert config.decoder_start_token == "<s>" and config.add_source_eos
    with pytest.raises(UserError, match="cannot run on CTranslate2: .*d_v = 8"):
        model_spec(Transformer(replace(TINY, d_k=16, d_v=8), VOCAB), PIECES, 2, 3, 1)


def test_a_conversion_with_a_vocabulary_map_leaves_it_beside_the_model(tmp_path):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    vmap = "\t▁w0 ▁w1\n▁w2\t▁w3\n"
    convert(Transformer(TINY, VOCAB).eval(), PIECES, 2, 3, 1, str(tmp_path / "ct2"),
            "float32", vmap=vmap)
    assert (tmp_path / "ct2" / "model.bin").is_file()
    assert (tmp_path / "ct2" / "vmap.txt").read_text(encoding="utf-8") == vmap
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2"]  # nothing aside
