"""The model file: written atomically, read as data only, refused in one line when foreign,
damaged or malicious, through every command that loads one."""

import importlib.util
import os
import re
import shutil
from dataclasses import replace

import pytest
import torch

from transformer_nmt.checksum import CHECKSUM_KEY, payload_checksum
from transformer_nmt.cli import main
from transformer_nmt.data.manifest import SPM_MODEL
from transformer_nmt.errors import UserError
from transformer_nmt import model_file as model_file_module
from transformer_nmt.config import get_preset
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import (count_parameters, load_for_inference,
                                        read_model_file, save_model_file)
from transformer_nmt.training.checkpoint import LAST

from decode_fixtures import save_marian_like_model
from import_fixtures import imported_after
from integrity_fixtures import cut_after_pieces, flip_bytes_in_a_weight
from train_fixtures import TINY


class _RunsACommand:
    """Unpickling this runs a shell command: what a malicious model file would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant(path, marker, payload=None):
    """Write a file with the right format tags whose unpickling would create `marker`."""
    payload = dict(payload or {"format": "transformer-nmt", "version": 1})
    payload["trap"] = _RunsACommand(marker)
    torch.save(payload, path)


def test_a_written_model_loads_back_identical(tiny_model_file):
    loaded = load_for_inference(tiny_model_file)
    payload = read_model_file(tiny_model_file)
    for name, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, payload["model"][name])
    assert len(loaded.vocab) == 64


def test_a_file_from_before_the_newer_architecture_fields_loads_with_the_papers(
        tiny_model_file, tmp_path, capsys):
    """Files written before activation and logits_bias existed lack them in model_config:
    they are the paper's ReLU and no bias, and the model decodes as it did."""
    payload = read_model_file(tiny_model_file)
    for name in ("activation", "logits_bias"):
        del payload["model_config"][name]
    torch.save(payload, tmp_path / "old.pt")
    old, current = load_for_inference(tmp_path / "old.pt"), load_for_inference(tiny_model_file)
    assert (old.model.cfg.activation, old.model.cfg.logits_bias) == ("relu", False)
    assert old.model.cfg == current.model.cfg and old.model.logits_bias is None
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    assert torch.equal(old.model(src, tgt), current.model(src, tgt))
    assert main(["info", str(tmp_path / "old.pt")]) == 0
    assert "relu FFN, tied embeddings: all\n" in capsys.readouterr().out


def test_the_logits_bias_and_new_fields_survive_saving_and_loading(tiny_data, tmp_path, capsys):
    model = save_marian_like_model(tmp_path / "model.pt", (tiny_data / SPM_MODEL).read_bytes(),
                                   64, activation="gelu")
    loaded = load_for_inference(tmp_path / "model.pt").model
    assert loaded.cfg == model.cfg and torch.equal(loaded.logits_bias, model.logits_bias)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    assert main(["info", str(tmp_path / "model.pt")]) == 0
    assert ("sinusoidal-halves positions up to 256, post-norm, gelu FFN, tied embeddings: all, "
            "logits bias\n") in capsys.readouterr().out


def test_fairseqs_fields_survive_saving_and_loading(tiny_data, tmp_path, capsys):
    """Unscaled embeddings and a learned position table per stack (fairseq's models)."""
    model = save_marian_like_model(tmp_path / "model.pt", (tiny_data / SPM_MODEL).read_bytes(),
                                   64, positional="learned", tie_positions=False,
                                   scale_embeddings=False)
    loaded = load_for_inference(tmp_path / "model.pt").model
    assert loaded.cfg == model.cfg
    assert torch.equal(loaded.src_positions.weight, model.src_positions.weight)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    assert main(["info", str(tmp_path / "model.pt")]) == 0
    assert ("learned positions (a table per stack) up to 256, post-norm, swish FFN, tied "
            "embeddings: all, logits bias, unscaled embeddings\n") in capsys.readouterr().out


def test_missing_fields_are_a_damaged_file_not_a_key_error(tmp_path):
    torch.save({"format": "transformer-nmt", "version": 1, "model": {}}, tmp_path / "forged.pt")
    with pytest.raises(UserError, match=r"forged.pt: damaged model file \(no model_config, "
                                        r"vocab_size, pad_id, vocab\)"):
        read_model_file(tmp_path / "forged.pt")


def test_a_malicious_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    plant(tmp_path / "evil.pt", marker)
    with pytest.raises(UserError, match="evil.pt: not a readable transformer-nmt model file"):
        read_model_file(tmp_path / "evil.pt")
    assert not marker.exists()


def test_every_command_that_loads_a_model_refuses_a_malicious_one(tmp_path, tiny_data, capsys):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    plant(evil, marker)
    text = tmp_path / "in.txt"
    text.write_text("a house\n", encoding="utf-8")
    commands = [
        ["translate", "--model", str(evil), "--input", str(text)],
        ["evaluate", "--model", str(evil), "--data", str(tiny_data)],
        ["average", str(evil), str(evil), "--out", str(tmp_path / "avg.pt")],
        ["attention", "--model", str(evil), "--src", "a house", "--out", str(tmp_path / "att")],
    ]
    for command in commands:
        assert main(command) == 2, command
        assert "not a readable transformer-nmt model file" in capsys.readouterr().err
    assert not marker.exists()


def test_resume_refuses_a_malicious_checkpoint(tmp_path, tiny_data, capsys):
    run = tmp_path / "run"
    assert main(["train", "--data", str(tiny_data), "--out", str(run), *TINY,
                 "--max-steps", "1"]) == 0
    marker = tmp_path / "ran"
    for checkpoint in run.glob("checkpoint_*.pt"):
        checkpoint.unlink()
        plant(checkpoint, marker)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--max-steps", "2"]) == 2
    assert "not a readable transformer-nmt model file" in capsys.readouterr().err
    assert not marker.exists()
    assert (run / LAST).exists()


def test_a_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint_1.pt"
    save_model_file({"format": "old"}, path)

    def broken_save(obj, handle):
        handle.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(model_file_module.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_model_file({"format": "new"}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"format": "old"}
    assert os.listdir(tmp_path) == ["checkpoint_1.pt"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_saved_files_get_the_users_usual_permissions(tmp_path, umask):
    previous = os.umask(umask)
    try:
        save_model_file({"format": "x"}, tmp_path / "model.pt")
    finally:
        os.umask(previous)
    assert (tmp_path / "model.pt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_read_model_file_refuses_foreign_files(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="not a transformer-nmt file"):
        read_model_file(tmp_path / "other.pt")


def test_weights_that_do_not_fit_the_architecture_are_a_damaged_file(tmp_path, tiny_model_file):
    payload = read_model_file(tiny_model_file)
    payload["model_config"] = {**payload["model_config"], "d_ff": 128}
    torch.save(payload, tmp_path / "mismatched.pt")
    with pytest.raises(UserError, match="mismatched.pt: damaged model file: its weights do not "
                                        "fit its architecture"):
        load_for_inference(tmp_path / "mismatched.pt")


def test_every_saved_model_carries_a_checksum_of_its_weights(tiny_model_file):
    payload = read_model_file(tiny_model_file)
    assert payload[CHECKSUM_KEY] == payload_checksum(payload)


def _without(key):
    def damage(path):
        payload = torch.load(path, weights_only=True)
        del payload[key]
        torch.save(payload, path)
    return damage


def _truncated_vocabulary(path):
    payload = torch.load(path, weights_only=True)
    payload["vocab"] = cut_after_pieces(payload["vocab"], 30)
    torch.save(payload, path)


def _vocab_size(size):
    def damage(path):
        payload = torch.load(path, weights_only=True)
        payload["vocab_size"] = size
        torch.save(payload, path)
    return damage


def reading_commands(model, tmp_path):
    """Every command line that reads a model file, reading `model`."""
    text = tmp_path / "in.txt"
    text.write_text("a house\n", encoding="utf-8")
    commands = [["translate", "--model", str(model), "--input", str(text)],
                ["info", str(model)],
                ["average", str(model), "--out", str(tmp_path / "avg.pt")]]
    if importlib.util.find_spec("safetensors"):
        commands.append(["export", "--model", str(model), "--to", "safetensors",
                         str(tmp_path / "st")])
    if importlib.util.find_spec("ctranslate2"):
        commands.append(["export", "--model", str(model), "--to", "ctranslate2",
                         str(tmp_path / "ct2")])
    return commands


@pytest.mark.parametrize("damage, message", [
    (flip_bytes_in_a_weight, "damaged model file: its weights do not match the checksum"),
    (_without("pad_id"), r"damaged model file \(no pad_id\)"),
    (_without("vocab_size"), r"damaged model file \(no vocab_size\)"),
    (_vocab_size(65), "vocab_size 65 and pad_id 0, but its vocabulary has 64 pieces"),
    (_truncated_vocabulary, "its vocabulary: incomplete sentencepiece model: it ends after "
                            "30 pieces"),
], ids=["flipped-weight", "no-pad-id", "no-vocab-size", "wrong-vocab-size",
        "truncated-vocabulary"])
def test_every_command_refuses_a_damaged_model_in_one_line(tiny_model_file, tmp_path, capsys,
                                                           damage, message):
    damaged = tmp_path / "damaged.pt"
    shutil.copy(tiny_model_file, damaged)
    damage(damaged)
    for command in reading_commands(damaged, tmp_path):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, (command, err)
        assert f"{damaged}: " in err and re.search(message, err), (command, err)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["damaged.pt", "in.txt"]


def test_a_file_from_before_checksums_loads_and_gets_one_when_saved_again(tiny_model_file,
                                                                         tmp_path, capsys):
    payload = read_model_file(tiny_model_file)
    del payload[CHECKSUM_KEY]
    torch.save(payload, tmp_path / "old.pt")
    assert CHECKSUM_KEY not in load_for_inference(tmp_path / "old.pt").payload_meta
    assert main(["info", str(tmp_path / "old.pt")]) == 0
    assert "checksum        none (written before" in capsys.readouterr().out
    # Any writer re-saving a model, whatever it added (a calibration), gets a fresh one.
    payload["calibration"] = {"temperature": 1.25}
    save_model_file(payload, tmp_path / "calibrated.pt")
    assert read_model_file(tmp_path / "calibrated.pt")[CHECKSUM_KEY] == payload_checksum(payload)
    payload["calibration"] = {"temperature": 1.5}
    payload[CHECKSUM_KEY] = read_model_file(tmp_path / "calibrated.pt")[CHECKSUM_KEY]
    torch.save(payload, tmp_path / "recalibrated.pt")
    with pytest.raises(UserError, match="do not match the checksum"):
        read_model_file(tmp_path / "recalibrated.pt")


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": "none", "logits_bias": True},
                                     {"tie_embeddings": "decoder", "pre_norm": True},
                                     {"positional": "learned", "tie_positions": False}])
def test_parameters_are_counted_as_a_built_model_has_them(changes):
    config = replace(get_preset("tiny").model, **changes)
    built = Transformer(config, 64)
    assert count_parameters(config, 64) == sum(p.numel() for p in built.parameters())


def test_counting_parameters_imports_no_compiler():
    """PyTorch's Python implementations of meta ops import torch._dynamo, seconds of a
    command's start (nmt serve, nmt info)."""
    code = ("from transformer_nmt.config import get_preset\n"
            "from transformer_nmt.model_file import count_parameters\n"
            "count_parameters(get_preset('big').model, 37000)")
    assert imported_after(code, ["torch", "torch._dynamo"]) == ["torch"]
