"""The safetensors model directory (model_dir.py): tied tensors stored once and restored,
and a damaged directory, or an export record of another version, refused in one line by
every reader of model files."""

from __future__ import annotations

import json

import pytest
import torch

from transformer_nmt.cli import main
from transformer_nmt.errors import UserError
from transformer_nmt.model_dir import EXPORT_FORMAT_VERSION, EXPORT_VERSION_KEY, split_tied
from transformer_nmt.model_file import read_model_file

from integrity_fixtures import cut_after_pieces, flip_bytes_in_safetensors

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
    (lambda out: flip_bytes_in_safetensors(out / "model.safetensors"),
     "exported: damaged model file: its weights do not match the checksum"),
    (lambda out: rewrite_config(out, lambda config: config.pop("pad_id")),
     "exported: damaged model file \\(no pad_id\\)"),
    (lambda out: (out / "spm.model").write_bytes(
        cut_after_pieces((out / "spm.model").read_bytes(), 20)),
     "exported: its vocabulary: incomplete sentencepiece model"),
])
def test_a_damaged_directory_is_refused_in_one_line(trained_model_file, tmp_path, damage,
                                                    message):
    out = export_safetensors(trained_model_file, tmp_path / "exported")
    damage(out)
    with pytest.raises(UserError, match=message) as caught:
        read_model_file(out)
    assert "\n" not in str(caught.value)




def rewrite_config(out, change) -> None:
    config = json.loads((out / "config.json").read_text())
    change(config)
    (out / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("version", [EXPORT_FORMAT_VERSION + 1, "1.0", None])
def test_an_export_record_of_a_newer_or_unknown_version_is_refused_in_one_line(
        trained_model_file, tmp_path, capsys, version):
    out = export_safetensors(trained_model_file, tmp_path / "exported")
    rewrite_config(out, lambda config: config.update({EXPORT_VERSION_KEY: version}))
    with pytest.raises(UserError, match=f"transformer-nmt export version {version} is not "
                       "supported by this release") as caught:
        read_model_file(out)
    assert "\n" not in str(caught.value)
    source = tmp_path / "source.txt"
    source.write_text("a b c\n")
    assert main(["translate", "--model", str(out), "--input", str(source)]) == 2
    error = capsys.readouterr().err
    assert f"config.json: transformer-nmt export version {version}" in error
    assert "Traceback" not in error


def test_an_export_from_before_records_had_a_version_reads_as_version_1(trained_model_file,
                                                                        tmp_path):
    out = export_safetensors(trained_model_file, tmp_path / "exported")
    assert json.loads((out / "config.json").read_text())[EXPORT_VERSION_KEY] == 1
    rewrite_config(out, lambda config: config.pop(EXPORT_VERSION_KEY))
    payload = read_model_file(out)
    assert payload["model"] and EXPORT_VERSION_KEY not in payload
