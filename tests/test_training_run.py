"""training/run.py: --set assignments and overrides, and the decision to start,
resume or refuse a run directory (plan_run), without training anything."""

from __future__ import annotations

import json
import shutil

import pytest

from transformer_nmt.config import ModelConfig, TrainConfig, get_preset
from transformer_nmt.errors import UserError
from transformer_nmt.training.batch_size import BatchPlan, plan_batch
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.run import (CONFIG_FILE, apply_overrides, parse_assignment,
                                       plan_run, write_run_config)

from train_fixtures import tiny_overrides


@pytest.mark.parametrize("text, assignment", [
    ("dropout=0.2", ("dropout", "0.2")),
    (" max-tokens = 400 ", ("max_tokens", "400")),
    ("name=a=b", ("name", "a=b")),
    ("valid_bleu=", ("valid_bleu", "")),
])
def test_assignments(text, assignment):
    assert parse_assignment(text) == assignment


@pytest.mark.parametrize("text", ["dropout", "=3", " =3", ""])
def test_an_assignment_needs_a_field_and_an_equals_sign(text):
    with pytest.raises(UserError, match="a setting is FIELD=VALUE"):
        parse_assignment(text)


def test_overrides_convert_strings_to_each_fields_type_and_later_ones_win():
    model, train = apply_overrides(ModelConfig(), TrainConfig(), [
        ("d_model", "256"), ("pre_norm", "true"), ("dropout", "0.25"), ("positional", "learned"),
        ("compile", "0"), ("valid_bleu", "YES"), ("warmup_steps", "100"), ("lr_scale", "2"),
        ("max_time", "1h30m"), ("heads", 4), ("dropout", "0.2")])
    assert (model.d_model, model.pre_norm, model.dropout, model.positional, model.heads) \
        == (256, True, 0.2, "learned", 4)
    assert type(model.d_model) is int and type(model.pre_norm) is bool
    assert (train.compile, train.valid_bleu, train.warmup_steps, train.lr_scale, train.max_time) \
        == (False, True, 100, 2.0, 5400.0)
    assert type(train.lr_scale) is float
    assert apply_overrides(ModelConfig(), TrainConfig(), []) == (ModelConfig(), TrainConfig())


@pytest.mark.parametrize("value, expected", [
    ("true", True), ("1", True), ("yes", True), ("on", True),
    ("false", False), ("0", False), ("no", False), ("Off", False),
])
def test_booleans_read_as_on_a_command_line(value, expected):
    assert apply_overrides(ModelConfig(), TrainConfig(), [("pre_norm", value)])[0].pre_norm \
        is expected


def test_an_unknown_field_is_refused_with_every_known_one_listed():
    with pytest.raises(UserError) as error:
        apply_overrides(ModelConfig(), TrainConfig(), [("dropout", "0.2"), ("nope", "1")])
    message = str(error.value)
    assert message.startswith("unknown setting 'nope'; model settings: ")
    model_part, train_part = message.split("; training settings: ")
    for name in ModelConfig.__dataclass_fields__:
        assert name in model_part
    for name in TrainConfig.__dataclass_fields__:
        assert name in train_part


@pytest.mark.parametrize("field, value, message", [
    ("d_model", "6.5", "d_model must be an int, not '6.5'"),
    ("max_steps", "many", "max_steps must be an int, not 'many'"),
    ("dropout", "high", "dropout must be a float, not 'high'"),
    ("pre_norm", "maybe", "pre_norm must be a bool, not 'maybe'"),
    ("max_time", "soon", "cannot read duration 'soon'"),
    ("dropout", "1.5", "dropout must be in [0, 1), not 1.5"),
    ("warmup_steps", "0", "warmup_steps must be at least 1, not 0"),
])
def test_values_that_do_not_fit_the_field_are_user_errors(field, value, message):
    with pytest.raises(UserError) as error:
        apply_overrides(ModelConfig(), TrainConfig(), [(field, value)])
    assert str(error.value).startswith(message)


# plan_run: what `nmt train` decides before it writes anything.

TINY_SETTINGS = [("max_tokens", "96"), ("precision", "fp32"), ("max_steps", "3")]


def plan(tiny_data, run_dir, overrides=(), preset="tiny", resume=None, data="given"):
    return plan_run(out=None if resume else run_dir, resume=resume,
                    data=tiny_data if data == "given" else data, preset=preset,
                    config_file=None, overrides=[*TINY_SETTINGS, *overrides])


@pytest.fixture
def existing_run(tiny_data, tmp_path):
    """A run directory as a first training session leaves it: config.json and a last
    checkpoint (a placeholder: plan_run only chooses it, never reads it)."""
    run_dir = tmp_path / "run"
    first = plan(tiny_data, run_dir)
    assert first.resume_from is None and not run_dir.exists()
    write_run_config(run_dir, first.record)
    (run_dir / LAST).write_bytes(b"")
    return run_dir


def test_a_new_run_records_its_configuration_and_data(tiny_data, tmp_path):
    new = plan(tiny_data, tmp_path / "run", [("dropout", "0.2")])
    tiny = get_preset("tiny")
    assert new.preset == "tiny" and new.resume_from is None
    assert new.model.dropout == 0.2 and new.model.d_model == tiny.model.d_model
    assert new.train.max_tokens == 96 and new.train.warmup_steps == tiny.train.warmup_steps
    assert new.record["data"]["digest"] == new.data_digest and len(new.data_digest) == 64
    assert new.record["data"]["vocab_size"] == 64
    assert new.record["model"]["dropout"] == 0.2 and new.record["sessions"] == []


def test_the_same_run_resumes_from_its_last_checkpoint_and_may_change_when_to_stop(
        tiny_data, existing_run):
    again = plan(tiny_data, existing_run, [("max_steps", "10"), ("log_every", "7"),
                                           ("max_time", "2h")])
    assert again.resume_from == existing_run / LAST
    assert (again.train.max_steps, again.train.log_every, again.train.max_time) == (10, 7, 7200)
    resumed = plan(tiny_data, existing_run, [("max_steps", "11")], preset=None,
                   resume=existing_run, data=None)
    assert resumed.resume_from == existing_run / LAST and resumed.data_dir == tiny_data.resolve()
    assert resumed.train.max_steps == 11 and resumed.preset == "tiny"


def test_a_changed_configuration_is_refused_naming_each_difference(tiny_data, existing_run):
    before = (existing_run / CONFIG_FILE).read_bytes()
    with pytest.raises(UserError) as error:
        plan(tiny_data, existing_run, [("label_smoothing", "0"), ("d_ff", "48")])
    assert str(error.value) == (
        f"{existing_run} holds a run with another configuration (d_ff: 64 -> 48; "
        "label_smoothing: 0.1 -> 0.0); continue it without these changes, or train into a "
        "new run directory")
    with pytest.raises(UserError, match=r"another configuration \(preset 'tiny' -> 'small'; "):
        plan(tiny_data, existing_run, preset="small")
    with pytest.raises(UserError, match=r"another configuration \(seed: 1 -> 2\)"):
        plan(tiny_data, existing_run, [("seed", "2")], preset=None, resume=existing_run,
             data=None)
    assert (existing_run / CONFIG_FILE).read_bytes() == before


def test_a_run_is_refused_on_other_data(tiny_data, existing_run, tmp_path):
    other = tmp_path / "other-data"
    shutil.copytree(tiny_data, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["filters"]["max_len"] += 1
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="was trained on other data .* resume with the same "
                                        "prepared data, or train into a new run directory"):
        plan(other, existing_run)


def test_directories_that_hold_no_run_are_never_resumed_or_written_into(tiny_data, tmp_path,
                                                                        existing_run):
    with pytest.raises(UserError, match="holds no run to resume"):
        plan(tiny_data, None, resume=tmp_path / "nothing", data=None)
    with pytest.raises(UserError, match="name different run directories"):
        plan_run(out=tmp_path / "elsewhere", resume=existing_run, data=tiny_data, preset=None,
                 config_file=None, overrides=[])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="is not empty and holds no transformer-nmt run"):
        plan(tiny_data, foreign)

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / CONFIG_FILE).write_text("{not json")
    with pytest.raises(UserError, match="unreadable run configuration"):
        plan(tiny_data, broken)
    record = json.loads((existing_run / CONFIG_FILE).read_text())
    (broken / CONFIG_FILE).write_text(json.dumps({**record, "format": "something-else"}))
    with pytest.raises(UserError, match="not a transformer-nmt-run file; continue it with "
                                        "the release that wrote it, or train into a new"):
        plan(tiny_data, broken)
    (broken / CONFIG_FILE).write_text(json.dumps({**record, "version": 99}))
    with pytest.raises(UserError, match=r"transformer-nmt-run version 99 is not supported "
                                        r"by this release \(it reads version 1\)"):
        plan(tiny_data, broken)


# What a resumed run may change about its batch: how each process makes up its share,
# while the global batch stays; runs from before the global batch keep their batches.

def start_batch_run(tiny_data, run_dir, **changes):
    """Record a run in `run_dir` as `nmt train` would before its first step."""
    plan = plan_run(out=run_dir, resume=None, data=tiny_data, preset="tiny", config_file=None,
                    overrides=tiny_overrides(**changes))
    plan.record["sessions"].append({"world_size": 1})
    write_run_config(run_dir, plan.record)
    return plan


def resume_batch_run(run_dir, **changes):
    return plan_run(out=None, resume=run_dir, data=None, preset=None, config_file=None,
                    overrides=list(changes.items()))


def test_a_memory_cap_may_change_while_the_global_batch_is_batch_tokens(tiny_data, tmp_path):
    start_batch_run(tiny_data, tmp_path / "run", batch_tokens=384)
    plan = resume_batch_run(tmp_path / "run", max_tokens=96)
    assert (plan.train.batch_tokens, plan.train.max_tokens) == (384, 96)
    assert resume_batch_run(tmp_path / "run", update_freq=2).train.update_freq == 2
    with pytest.raises(UserError, match="batch_tokens: 384 -> 768"):
        resume_batch_run(tmp_path / "run", batch_tokens=768)


def test_a_batch_fixed_per_process_must_stay(tiny_data, tmp_path):
    start_batch_run(tiny_data, tmp_path / "run", max_tokens=96, update_freq=2)
    with pytest.raises(UserError, match="max_tokens: 96 -> 48"):
        resume_batch_run(tmp_path / "run", max_tokens=48)
    # Dropping update_freq would make the global batch batch_tokens, another batch.
    with pytest.raises(UserError, match="update_freq: 2 -> 0"):
        resume_batch_run(tmp_path / "run", update_freq=0)


def test_a_run_from_before_global_batches_keeps_its_batches(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    start_batch_run(tiny_data, run_dir)
    record = json.loads((run_dir / CONFIG_FILE).read_text())
    del record["train"]["batch_tokens"]
    record["train"].update(max_tokens=96, update_freq=2)
    record["sessions"] = [{"world_size": 2}]
    write_run_config(run_dir, record)
    cfg = resume_batch_run(run_dir).train
    assert (cfg.batch_tokens, cfg.max_tokens, cfg.update_freq) == (384, 96, 0)
    # On its 2 processes: 2 batches of at most 96 tokens each, as before.
    assert plan_batch(cfg.batch_tokens, cfg.max_tokens, cfg.update_freq, 2) == BatchPlan(
        96, 2, 384, False)
