"""Fine-tuning (training/init_from.py, `nmt train --init-from`): a model trained on one task
adapts to another, the run records its starting model, resumes exactly from its own
checkpoints, and refuses data of another vocabulary or settings of another architecture."""

import json

import pytest
import torch

from transformer_nmt.cli import main
from transformer_nmt.config import TrainConfig
from transformer_nmt.data.binarize import load_split
from transformer_nmt.model_file import build_model, read_model_file, vocab_source
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.distributed import Distributed
from transformer_nmt.training.init_from import FINETUNE_LR_PEAK, FINETUNE_WARMUP, file_sha256
from transformer_nmt.training.session import train
from transformer_nmt.training.trainer import Trainer
from transformer_nmt.training.validation import validation_batches

from train_fixtures import TINY, make_copy_task_data, tiny_overrides

FINETUNE = dict(warmup_steps=5, lr_peak=3e-3)
"""A fine-tuning rate for the tiny model (d_model 32) that moves it within a few steps."""


@pytest.fixture(scope="module")
def pretrained(tiny_data, tmp_path_factory):
    """A tiny model trained 60 steps on the reversal task, as a checkpoint."""
    out = tmp_path_factory.mktemp("pretrain") / "run"
    train(out=out, data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_steps=60))
    return out / LAST


@pytest.fixture(scope="module")
def copy_data(pretrained, tmp_path_factory):
    """The copy task, encoded with the pretrained model's vocabulary."""
    return make_copy_task_data(tmp_path_factory.mktemp("copy"), vocab_source(pretrained))


def valid_nll(model_path, data_dir):
    """Validation NLL per token of a model file on a data directory."""
    model = build_model(read_model_file(model_path))
    trainer = Trainer(model, TrainConfig(), Distributed(0, 1, 0, torch.device("cpu")), "fp32")
    return trainer.evaluate(validation_batches(load_split(data_dir, "valid"), 96,
                                               model.cfg.max_positions, seed=1))["nll"]


def finetune(out, data, init, **changes):
    return train(out=out, data=data, init_from=init, progress=False,
                 overrides=tiny_overrides(**FINETUNE | changes))


def test_fine_tuning_lowers_the_new_domains_validation_loss(pretrained, copy_data, tmp_path):
    before = valid_nll(pretrained, copy_data)
    summary = finetune(tmp_path / "ft", copy_data, pretrained, max_steps=30)
    assert summary.step == 30
    after = valid_nll(tmp_path / "ft" / LAST, copy_data)
    assert after < before - 0.1


def test_the_run_starts_afresh_from_the_models_weights_and_records_it(pretrained, copy_data,
                                                                      tmp_path):
    finetune(tmp_path / "ft", copy_data, pretrained, max_steps=1, dropout=0.0,
             lr_peak=1e-30, warmup_steps=1)
    start, tuned = read_model_file(pretrained), read_model_file(tmp_path / "ft" / LAST)
    # A rate of 1e-30 leaves the weights as they were: they are the pretrained ones.
    assert all(torch.allclose(start["model"][name], tuned["model"][name])
               for name in start["model"])
    assert tuned["step"] == 1 and tuned["trainer"]["step"] == 1
    assert tuned["model_config"] == start["model_config"] | {"dropout": 0.0}
    recorded = {"file": str(pretrained.resolve()), "sha256": file_sha256(pretrained),
                "step": 60, "preset": "tiny", "vocab_sha256": tuned["init_from"]["vocab_sha256"]}
    assert tuned["init_from"] == recorded
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["init_from"] == recorded and config["train"]["init_from"] == recorded["file"]


def test_fine_tuning_defaults_and_settable_schedule(pretrained, copy_data, tmp_path):
    train(out=tmp_path / "default", data=copy_data, init_from=pretrained, progress=False,
          overrides=tiny_overrides(max_steps=1))
    regime = json.loads((tmp_path / "default" / "config.json").read_text())["train"]
    assert (regime["warmup_steps"], regime["lr_peak"]) == (FINETUNE_WARMUP, FINETUNE_LR_PEAK)
    assert read_model_file(tmp_path / "default" / LAST)["trainer"]["optimizer"][
        "param_groups"][0]["lr"] == pytest.approx(FINETUNE_LR_PEAK / FINETUNE_WARMUP)
    finetune(tmp_path / "set", copy_data, pretrained, max_steps=1, warmup_steps=4,
             lr_peak=0.02)
    assert read_model_file(tmp_path / "set" / LAST)["trainer"]["optimizer"][
        "param_groups"][0]["lr"] == pytest.approx(0.02 / 4)


def test_a_fine_tuning_run_resumes_exactly(pretrained, copy_data, tmp_path):
    # Dropout is on and 12 steps of 4 accumulated batches cross an epoch end.
    settings = dict(batch_tokens=384, max_tokens=96, max_steps=12)
    finetune(tmp_path / "straight", copy_data, pretrained, **settings)
    stopped = finetune(tmp_path / "resumed", copy_data, pretrained, **settings | {"max_steps": 5})
    assert stopped.step == 5
    # The same command again with a higher limit continues the run's own checkpoint.
    resumed = finetune(tmp_path / "resumed", copy_data, pretrained, **settings)
    assert resumed.step == 12
    a = read_model_file(tmp_path / "straight" / LAST)
    b = read_model_file(tmp_path / "resumed" / LAST)
    assert all(torch.equal(a["model"][name], b["model"][name]) for name in a["model"])
    optimizer_a = a["trainer"]["optimizer"]["state"]
    optimizer_b = b["trainer"]["optimizer"]["state"]
    assert all(torch.equal(optimizer_a[k]["exp_avg_sq"], optimizer_b[k]["exp_avg_sq"])
               for k in optimizer_a)
    # --resume with the run directory alone continues it too.
    again = train(resume=tmp_path / "resumed", overrides=[("max_steps", 13)], progress=False)
    assert again.step == 13


def nmt(capsys, *args):
    code = main([str(arg) for arg in args])
    return code, capsys.readouterr().err.strip()


def test_data_of_another_vocabulary_is_refused_naming_both(model_file, copy_data, tmp_path,
                                                           capsys):
    # model_file's vocabulary has 60 pieces, learned from other text than copy_data's 64.
    code, err = nmt(capsys, "train", "--data", copy_data, "--out", tmp_path / "ft", *TINY,
                    "--init-from", model_file)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{copy_data} was encoded with another vocabulary than {model_file}" in err
    assert "--vocab" in err
    assert not (tmp_path / "ft").exists()


@pytest.mark.parametrize("settings, change", [
    (["--set", "d_model=64"], "d_model: 32 -> 64"),
    (["--preset", "small"], "d_ff: 64 -> 1024"),
])
def test_another_architecture_is_refused_naming_the_model(pretrained, copy_data, tmp_path,
                                                          capsys, settings, change):
    args = [arg for arg in TINY if arg not in ("--preset", "tiny")]
    code, err = nmt(capsys, "train", "--data", copy_data, "--out", tmp_path / "ft", *args,
                    *settings, "--init-from", pretrained)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{pretrained.resolve()} has another architecture" in err and change in err
    assert not (tmp_path / "ft").exists()


def test_dropout_may_change_and_a_missing_model_is_one_line(pretrained, copy_data, tmp_path,
                                                             capsys):
    args = [arg for arg in TINY if arg not in ("--preset", "tiny")]
    code, _ = nmt(capsys, "train", "--data", copy_data, "--out", tmp_path / "ft", *args,
                  "--set", "dropout=0.3", "--max-steps", "1", "--init-from", pretrained)
    assert code == 0
    code, err = nmt(capsys, "train", "--data", copy_data, "--out", tmp_path / "ft2", *TINY,
                    "--init-from", tmp_path / "missing.pt")
    assert code == 2 and "missing.pt: no such model file" in err


def test_help_states_the_fine_tuning_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--init-from MODEL.pt" in text and "500 steps" in text and "1e-4" in text


def test_an_average_records_its_newest_step_and_keeps_the_regime(pretrained, copy_data,
                                                                  tmp_path, capsys):
    code, _ = nmt(capsys, "average", pretrained, "--out", tmp_path / "average.pt")
    assert code == 0
    averaged = read_model_file(tmp_path / "average.pt")
    assert averaged["preset"] == "tiny" and averaged["train_config"]["batch_tokens"] == 96
    finetune(tmp_path / "ft", copy_data, tmp_path / "average.pt", max_steps=1)
    assert read_model_file(tmp_path / "ft" / LAST)["init_from"]["step"] == 60
