"""The safetensors model directory (model_dir.py): tied tensors stored once and restored,
and a damaged directory refused in one line by every reader of model files."""

from __future__ import annotations

import pytest
import torch

from transformer_nmt.errors import UserError
from transformer_nmt.model_dir import split_tied
from transformer_nmt.model_file import read_model_file

pytest.importorskip("safetensors", reason="the safetensors extra is not installed")

from transformer_nmt.export.safetensors import export_safetensors  # noqa: E402


def test_names_sharing_a_tensor_are_stored_once():
    shared = torch.randn(4, 3)
    other = torch.randn(4, 3)
    stored, tied = split_tied({"a": shared, "b": other, "c": shared, "d": shared[1:]})
    assert list(stored) == ["a", "b", "d"] and tied == {"c": "a"}


@pytest.mark.parametrize("damage, message", [
    (lambda out: (out / "model.safetensors").write_bytes(b"\x00" * 20), "not a readable safetensors"),
    (lambda out: (out / "spm.model").unlink(), "damaged model directory \\(no spm.model\\)"),
    (lambda out: (out / "config.json").write_text("{"), "not valid JSON"),
    (lambda out: (out / "config.json").write_text('{"format": "other"}'),
     "not a transformer-nmt-safetensors file"),
])
def test_a_damaged_directory_is_refused_in_one_line(trained_model_file, tmp_path, damage,
                                                    message):
    out = export_safetensors(trained_model_file, tmp_path / "exported")
    damage(out)
    with pytest.raises(UserError, match=message) as caught:
        read_model_file(out)
    assert "\n" not in str(caught.value)


