"""Checkpoint files: atomic writes, rotation, random states, averaging."""

import dataclasses
import os
import random

import numpy as np
import pytest
import torch

from transformer_nmt.config import PRESETS
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.cli import main
from transformer_nmt.model_file import load_for_inference, model_payload, save_model_file
from transformer_nmt.training.checkpoint import (LAST, average_checkpoints, check_average_output,
                                              checkpoints_to_average, numbered_checkpoints,
                                              read_newest_checkpoint, rng_states, save_numbered,
                                              set_rng_states)

from integrity_fixtures import flip_bytes_in_a_weight


TINY = PRESETS["tiny"].model


def tiny_model(seed, **changes):
    torch.manual_seed(seed)
    return Transformer(dataclasses.replace(TINY, **changes), vocab_size=64)


def vocab_bytes(data_dir):
    return (data_dir / "spm.model").read_bytes()


def test_save_numbered_links_last_and_keeps_the_newest(tmp_path):
    for step in (10, 20, 30, 40):
        save_numbered(tmp_path, {"step": step}, step, keep_last=2)
    assert [step for step, _ in numbered_checkpoints(tmp_path)] == [30, 40]
    assert torch.load(tmp_path / LAST, weights_only=True) == {"step": 40}
    assert os.path.samefile(tmp_path / LAST, tmp_path / "checkpoint_40.pt")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_30.pt", "checkpoint_40.pt", LAST]


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies(tmp_path, tiny_data, capsys):
    for step in (1, 2, 3):
        payload = model_payload(tiny_model(step), vocab_bytes(tiny_data)) | {"step": step}
        save_numbered(tmp_path, payload, step, keep_last=0)
    # checkpoint_last.pt is a hard link to checkpoint_3.pt: both have the flipped bytes.
    flip_bytes_in_a_weight(tmp_path / "checkpoint_3.pt")
    assert read_newest_checkpoint(tmp_path)["step"] == 2
    err = capsys.readouterr().err
    assert f"skipping {tmp_path / LAST}: {tmp_path / LAST}: damaged model file: its weights " \
           "do not match the checksum" in err
    assert f"resuming from {tmp_path / 'checkpoint_2.pt'}, the newest checkpoint that " \
           "reads and verifies" in err
    for step in (1, 2):
        flip_bytes_in_a_weight(tmp_path / f"checkpoint_{step}.pt")
    with pytest.raises(UserError, match=f"{LAST}: damaged model file"):
        read_newest_checkpoint(tmp_path)


def test_rng_states_round_trip():
    states = rng_states()
    draws = (random.random(), np.random.rand(), torch.rand(1))
    set_rng_states(states)
    assert (random.random(), np.random.rand()) == draws[:2]
    assert torch.equal(torch.rand(1), draws[2])


def test_average_is_the_mean_and_loads_for_inference(tmp_path, tiny_data):
    models = [tiny_model(seed) for seed in (1, 2, 3)]
    paths = []
    for step, model in enumerate(models, 1):
        payload = model_payload(model, vocab_bytes(tiny_data)) | {"step": step,
                                                                  "optimizer": {"big": 1}}
        paths.append(save_numbered(tmp_path, payload, step, keep_last=0))
    averaged = average_checkpoints(checkpoints_to_average([tmp_path], last=2))
    assert "optimizer" not in averaged
    assert [entry["step"] for entry in averaged["averaged_from"]] == [2, 3]
    name = "encoder_layers.0.ffn.linear1.weight"
    expected = (models[1].state_dict()[name] + models[2].state_dict()[name]) / 2
    torch.testing.assert_close(averaged["model"][name], expected)
    save_model_file(averaged, tmp_path / "avg.pt")
    loaded = load_for_inference(tmp_path / "avg.pt")
    torch.testing.assert_close(loaded.model.state_dict()[name], expected)
    assert len(loaded.vocab) == 64


def test_average_refuses_other_architectures(tmp_path, tiny_data):
    first = model_payload(tiny_model(1), vocab_bytes(tiny_data))
    other = model_payload(tiny_model(1, d_ff=128), vocab_bytes(tiny_data))
    save_model_file(first, tmp_path / "a.pt")
    save_model_file(other, tmp_path / "b.pt")
    with pytest.raises(UserError, match="different architectures.*d_ff: 64 -> 128"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_what_to_average(tmp_path):
    with pytest.raises(UserError, match="no checkpoint_<step>.pt"):
        checkpoints_to_average([tmp_path], last=5)
    for step in (1, 2):
        save_numbered(tmp_path, {"step": step}, step, keep_last=0)
    with pytest.raises(UserError, match="is a run directory: set last to how many of its "
                                        "newest checkpoints to average"):
        checkpoints_to_average([tmp_path], last=None)
    with pytest.raises(UserError, match=r"holds 2 numbered checkpoint\(s\), fewer than last=5; "
                                        r"lower last, or train with a higher keep_last"):
        checkpoints_to_average([tmp_path], last=5)
    files = [tmp_path / "checkpoint_1.pt", tmp_path / "checkpoint_2.pt"]
    assert checkpoints_to_average(files, last=None) == files
    assert checkpoints_to_average(files, last=1) == files[1:]


def test_average_output_may_not_replace_an_input_or_take_a_checkpoints_name(tmp_path):
    files = [tmp_path / "checkpoint_1.pt", tmp_path / "checkpoint_2.pt"]
    for path in files:
        path.write_bytes(b"x")
    with pytest.raises(UserError, match="is one of the checkpoints being averaged"):
        check_average_output(tmp_path / "." / "checkpoint_2.pt", files)
    for name in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_7.pt"):
        with pytest.raises(UserError, match="has a checkpoint's name"):
            check_average_output(tmp_path / name, files)
    check_average_output(tmp_path / "average.pt", files)


def test_nmt_average_leaves_its_inputs_alone(tmp_path, tiny_data, capsys):
    for step in (1, 2):
        save_model_file(model_payload(tiny_model(step), vocab_bytes(tiny_data)) | {"step": step},
                        tmp_path / f"checkpoint_{step}.pt")
    before = (tmp_path / "checkpoint_2.pt").read_bytes()
    assert main(["average", str(tmp_path), "--last", "2",
                 "--out", str(tmp_path / "checkpoint_2.pt")]) == 2
    assert "is one of the checkpoints being averaged" in capsys.readouterr().err
    assert (tmp_path / "checkpoint_2.pt").read_bytes() == before


def test_an_average_keeps_the_languages_its_checkpoints_record(tmp_path, tiny_data):
    for step in (1, 2):
        payload = model_payload(tiny_model(step), vocab_bytes(tiny_data), ("en", "de"))
        save_model_file(payload | {"step": step}, tmp_path / f"checkpoint_{step}.pt")
    averaged = average_checkpoints([tmp_path / "checkpoint_1.pt", tmp_path / "checkpoint_2.pt"])
    assert (averaged["src_lang"], averaged["tgt_lang"]) == ("en", "de")


def validated_run(tmp_path, tiny_data, values, metric="bleu"):
    """Numbered checkpoints at steps 1.. whose recorded validation is `values` of
    `metric` (None: a step without validation)."""
    for step, value in enumerate(values, 1):
        payload = model_payload(tiny_model(step), vocab_bytes(tiny_data)) | {"step": step}
        if value is not None:
            payload["validation"] = {"step": step, "metric": metric, "value": value}
        save_numbered(tmp_path, payload, step, keep_last=0)
    return [path for _, path in numbered_checkpoints(tmp_path)]


@pytest.mark.parametrize("metric, values, chosen", [
    ("bleu", [10.0, 14.0, None, 12.0, 13.0], [2, 5]),
    ("loss", [3.0, 2.0, None, 2.5, 1.5], [2, 5]),
    ("chrf", [40.0, 39.0, 41.0, None, 38.0], [1, 3]),
])
def test_best_k_are_ranked_by_their_recorded_validation(tmp_path, tiny_data, metric, values,
                                                        chosen):
    paths = validated_run(tmp_path, tiny_data, values, metric)
    best = checkpoints_to_average([tmp_path], last=None, best=2)
    assert best == [paths[step - 1] for step in chosen]
    assert checkpoints_to_average(paths, last=None, best=2) == best
    averaged = average_checkpoints(best)
    assert [entry["step"] for entry in averaged["averaged_from"]] == chosen


def test_best_k_needs_enough_validated_checkpoints_of_one_metric(tmp_path, tiny_data):
    validated_run(tmp_path, tiny_data, [10.0, None, None])
    with pytest.raises(UserError, match="only 1 of the 3 checkpoint.s. record a validation"):
        checkpoints_to_average([tmp_path], last=None, best=2)
    with pytest.raises(UserError, match="not both"):
        checkpoints_to_average([tmp_path], last=1, best=1)
    other = tmp_path / "other"
    other.mkdir()
    files = validated_run(other, tiny_data, [1.0], "loss")
    with pytest.raises(UserError, match="different metrics .bleu, loss."):
        checkpoints_to_average([tmp_path / "checkpoint_1.pt", *files], last=None, best=1)


def test_nmt_average_best(tmp_path, tiny_data, capsys):
    validated_run(tmp_path, tiny_data, [10.0, 14.0, 12.0])
    assert main(["average", str(tmp_path), "--best", "2", "--out",
                 str(tmp_path / "best.pt")]) == 0
    assert "checkpoint_2.pt, checkpoint_3.pt" in capsys.readouterr().out
    assert main(["average", str(tmp_path), "--best", "0", "--out",
                 str(tmp_path / "best.pt")]) == 2
    assert "--best must be at least 1" in capsys.readouterr().err
