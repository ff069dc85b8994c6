"""`nmt train`, `nmt average` and `nmt plot` (cli/train.py) end to end through
transformer_nmt.cli.main, and a real process stopped by a signal."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from transformer_nmt.cli import main
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.model_file import load_for_inference, read_model_file

from train_fixtures import TINY


def nmt(capsys, *args):
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def train_args(data, out, *extra):
    return ["train", "--data", data, "--out", out, *TINY, *extra]


def config(run_dir):
    return json.loads((run_dir / "config.json").read_text())


def test_help_explains_the_settings(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    for flag in ("--resume", "--set FIELD=VALUE", "--max-time", "--batch-tokens", "--update-freq",
                 "--save-every-minutes", "--keep-last", "--precision", "torchrun",
                 "--init-from MODEL.pt", "--lr-peak", "--valid-metric {loss,bleu,chrf}",
                 "--patience N", "--valid-beam K", "--valid-sentences N",
                 "--collective-timeout SECONDS"):
        assert flag in text


def test_train_rerun_and_extend(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    code, out, _ = nmt(capsys, *train_args(tiny_data, run, "--max-steps", "3",
                                           "--max-time", "1h30m", "--set", "dropout=0.2"))
    assert code == 0 and "trained 3 steps" in out and "training cost" in out
    recorded = config(run)
    assert recorded["preset"] == "tiny" and recorded["model"]["dropout"] == 0.2
    assert recorded["train"]["max_time"] == 5400 and recorded["train"]["max_steps"] == 3
    assert recorded["sessions"][0]["command"].startswith("nmt train --data")
    assert (run / "metrics.jsonl").exists() and list((run / "tensorboard").iterdir())

    code, out, _ = nmt(capsys, *train_args(tiny_data, run, "--max-steps", "3",
                                           "--max-time", "1h30m", "--set", "dropout=0.2"))
    assert code == 0 and "nothing to do" in out
    assert read_model_file(run / LAST)["step"] == 3

    code, out, _ = nmt(capsys, "train", "--resume", run, "--max-steps", "4")
    assert code == 0 and "trained 4 steps" in out
    assert len(config(run)["sessions"]) == 2


def test_runs_that_must_not_be_continued_are_refused(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert nmt(capsys, *train_args(tiny_data, run, "--max-steps", "1"))[0] == 0
    code, _, err = nmt(capsys, *train_args(tiny_data, run, "--max-steps", "2",
                                           "--set", "label_smoothing=0", "--warmup", "9"))
    assert code == 2
    assert "another configuration (label_smoothing: 0.1 -> 0.0; warmup_steps: 50 -> 9)" in err

    other_data = tmp_path / "other-data"
    shutil.copytree(tiny_data, other_data)
    manifest = json.loads((other_data / "manifest.json").read_text())
    manifest["filters"]["max_len"] += 1
    (other_data / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = nmt(capsys, *train_args(other_data, run, "--max-steps", "2"))
    assert code == 2 and "was trained on other data" in err

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    code, _, err = nmt(capsys, *train_args(tiny_data, foreign))
    assert code == 2 and "holds no transformer-nmt run" in err
    assert os.listdir(foreign) == ["notes.txt"]

    code, _, err = nmt(capsys, "train", "--resume", tmp_path / "nothing")
    assert code == 2 and "no run to resume" in err


@pytest.mark.parametrize("args, message", [
    (["--set", "nope=1"], "unknown setting 'nope'"),
    (["--set", "dropout=high"], "dropout must be a float"),
    (["--max-time", "soon"], "cannot read duration 'soon'"),
    (["--precision", "fp16", "--device", "cpu"], "fp16 needs a CUDA GPU"),
    (["--batch-tokens", "0"], "batch_tokens must be at least 1"),
    (["--update-freq", "-1"], "update_freq must be a number >= 0"),
    (["--set", "dropout=1.5"], "dropout must be in [0, 1), not 1.5"),
    (["--set", "dropout=-0.5"], "dropout must be in [0, 1), not -0.5"),
    (["--set", "attention_dropout=-0.1"], "attention_dropout must be in [0, 1), not -0.1"),
    (["--collective-timeout", "0"], "--collective-timeout must be a number of seconds above 0"),
])
def test_bad_settings_are_one_line_errors(tiny_data, tmp_path, capsys, args, message):
    code, _, err = nmt(capsys, *train_args(tiny_data, tmp_path / "run", *args))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    # Refused before anything is written: no run directory to poison a later resume.
    assert not (tmp_path / "run").exists()


def test_config_file_and_preset_precedence(tiny_data, tmp_path, capsys):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"preset": "tiny", "model": {"d_ff": 48},
                                    "train": {"warmup_steps": 7, "max_steps": 1}}))
    run = tmp_path / "run"
    code, _, _ = nmt(capsys, "train", "--data", tiny_data, "--out", run, "--config", settings,
                     "--set", "warmup_steps=8", "--precision", "fp32",
                     "--save-every-minutes", "0", "--max-bad-steps", "3")
    assert code == 0
    recorded = config(run)
    assert recorded["preset"] == "tiny" and recorded["model"]["d_ff"] == 48
    assert recorded["train"]["warmup_steps"] == 8 and recorded["train"]["max_steps"] == 1
    assert recorded["train"]["max_bad_steps"] == 3


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_a_step_with_a_checkpoint(tiny_data, tmp_path, signal_number):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "transformer_nmt.cli", *map(str, train_args(
        tiny_data, run, "--max-steps", "100000"))]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and '"train"' in metrics.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal_number)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert f"stopped by {signal.Signals(signal_number).name}" in out
    assert f"continue with: nmt train --resume {run}" in out
    step = read_model_file(run / LAST)["step"]
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert step >= 1 and max(steps) == step


def test_average_and_plot(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert nmt(capsys, *train_args(tiny_data, run, "--max-steps", "3", "--save-every", "1",
                                   "--valid-every", "1"))[0] == 0
    model = tmp_path / "model.pt"
    code, out, _ = nmt(capsys, "average", run, "--last", "2", "--out", model)
    assert code == 0 and "checkpoint_2.pt, checkpoint_3.pt" in out
    loaded = load_for_inference(model)
    assert loaded.payload_meta["averaged_from"][0]["step"] == 2
    code, _, err = nmt(capsys, "average", run, "--last", "9", "--out", model)
    assert code == 2 and "fewer than last=9" in err

    code, out, _ = nmt(capsys, "plot", run)
    assert code == 0 and (run / "curves.png").read_bytes()[:4] == b"\x89PNG"


def start_training(tiny_data, run, *extra):
    """`nmt train` in its own process, returned once its first checkpoint exists."""
    command = [sys.executable, "-m", "transformer_nmt.cli", *map(str, train_args(
        tiny_data, run, *extra))]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + 60
    while not (run / LAST).exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(process.communicate())
        time.sleep(0.02)
    return process


def weights(path):
    return read_model_file(path)["model"]


RESUMED_STEPS = 60
"""Past an epoch of tiny_data (about 40 steps), so that a resumed run crosses one."""


@pytest.fixture(scope="module")
def straight_weights(tiny_data, tmp_path_factory):
    """The weights after RESUMED_STEPS steps of a run nothing stopped (once per module)."""
    straight = tmp_path_factory.mktemp("straight") / "run"
    assert main([str(arg) for arg in train_args(tiny_data, straight, "--max-steps",
                                                 RESUMED_STEPS)]) == 0
    return weights(straight / LAST)


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGTERM", "SIGKILL"])
def test_a_run_stopped_by_a_signal_resumes_exactly(tiny_data, tmp_path, capsys, signal_number,
                                                   straight_weights):
    stopped = tmp_path / "stopped"
    process = start_training(tiny_data, stopped, "--max-steps", 100_000, "--save-every", 1)
    process.send_signal(signal_number)
    process.communicate(timeout=60)
    assert read_model_file(stopped / LAST)["step"] < RESUMED_STEPS
    assert nmt(capsys, "train", "--resume", stopped, "--max-steps", RESUMED_STEPS)[0] == 0
    resumed = weights(stopped / LAST)
    assert all(torch.equal(straight_weights[name], resumed[name]) for name in straight_weights)


def test_a_second_training_into_the_same_directory_is_refused(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    first = start_training(tiny_data, run, "--max-steps", 100_000, "--save-every", 1)
    try:
        code, _, err = nmt(capsys, *train_args(tiny_data, run, "--max-steps", 100_000))
        assert code == 2
        assert f"{run} is being trained by another process (PID {first.pid})" in err
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    step = read_model_file(run / LAST)["step"]
    assert nmt(capsys, "train", "--resume", run, "--max-steps", step + 1)[0] == 0


def test_a_damaged_last_checkpoint_falls_back_to_the_newest_readable_one(tiny_data, tmp_path,
                                                                        capsys):
    run = tmp_path / "run"
    assert nmt(capsys, *train_args(tiny_data, run, "--max-steps", 3, "--save-every", 1))[0] == 0
    # checkpoint_last.pt is a hard link to checkpoint_3.pt: damaging one damages both.
    with open(run / "checkpoint_3.pt", "r+b") as handle:
        handle.write(b"\0" * 64)
    code, out, err = nmt(capsys, "train", "--resume", run, "--max-steps", 4)
    assert code == 0, err
    assert f"skipping {run / LAST}: {run / LAST}: not a readable transformer-nmt" in err
    assert f"resuming from {run / 'checkpoint_2.pt'}" in err
    assert read_model_file(run / LAST)["step"] == 4


def test_early_stopping_by_chrf_then_average_the_best(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = nmt(capsys, *train_args(tiny_data, run, "--max-steps", "12",
                                             "--valid-every", "2", "--save-every", "2",
                                             "--valid-metric", "chrf", "--valid-beam", "2",
                                             "--valid-sentences", "6", "--patience", "100"))
    assert code == 0 and "best validation chrf" in out
    valid = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "valid"]
    assert [r["step"] for r in valid] == [2, 4, 6, 8, 10, 12]
    assert all(r["metric"] == "chrf" and 0 <= r["chrf"] <= 100 for r in valid)
    best = max(valid, key=lambda r: r["chrf"])
    assert read_model_file(run / "checkpoint_best.pt")["validation"]["value"] == best["chrf"]
    code, out, _ = nmt(capsys, "average", run, "--best", "3", "--out", tmp_path / "best3.pt")
    assert code == 0 and f"checkpoint_{best['step']}.pt" in out
    assert config(run)["train"]["valid_beam"] == 2


def test_precision_auto_says_what_it_chose_and_why(tiny_data, tmp_path, capsys, monkeypatch):
    from transformer_nmt import runtime

    monkeypatch.setattr(runtime, "bf16_supported", lambda device: True)
    monkeypatch.setattr(runtime, "measure_matmul_rates",
                        lambda device, shape: runtime.MatmulRates(fp32=1e11, bf16=0.5e11))
    code, _, err = nmt(capsys, *train_args(tiny_data, tmp_path / "run", "--max-steps", "1",
                                           "--precision", "auto"))
    assert code == 0
    assert "precision auto: fp32 (bf16 products ran 0.50x as fast as fp32" in err
    assert config(tmp_path / "run")["sessions"][0]["precision"] == "fp32"
