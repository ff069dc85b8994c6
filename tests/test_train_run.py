"""What a resumed run may change about its batch (train/run.py): how each process makes up
its share, while the global batch stays; and runs from before the global batch resume on
the very batches they were cut into."""

import json

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.train.batch_size import BatchPlan, plan_batch
from transformer_nmt.train.run import CONFIG_FILE, plan_run, write_run_config

from train_fixtures import tiny_data, tiny_overrides  # noqa: F401  (tiny_data is a fixture)


def start(tiny_data, run_dir, **changes):
    """Record a run in `run_dir` as `nmt train` would before its first step."""
    plan = plan_run(out=run_dir, resume=None, data=tiny_data, preset="tiny", config_file=None,
                    overrides=tiny_overrides(**changes))
    plan.record["sessions"].append({"world_size": 1})
    write_run_config(run_dir, plan.record)
    return plan


def resume(run_dir, **changes):
    return plan_run(out=None, resume=run_dir, data=None, preset=None, config_file=None,
                    overrides=list(changes.items()))


def test_a_memory_cap_may_change_while_the_global_batch_is_batch_tokens(tiny_data, tmp_path):
    start(tiny_data, tmp_path / "run", batch_tokens=384)
    plan = resume(tmp_path / "run", max_tokens=96)
    assert (plan.train.batch_tokens, plan.train.max_tokens) == (384, 96)
    assert resume(tmp_path / "run", update_freq=2).train.update_freq == 2
    with pytest.raises(UserError, match="batch_tokens: 384 -> 768"):
        resume(tmp_path / "run", batch_tokens=768)


def test_a_batch_fixed_per_process_must_stay(tiny_data, tmp_path):
    start(tiny_data, tmp_path / "run", max_tokens=96, update_freq=2)
    with pytest.raises(UserError, match="max_tokens: 96 -> 48"):
        resume(tmp_path / "run", max_tokens=48)
    # Dropping update_freq would make the global batch batch_tokens, another batch.
    with pytest.raises(UserError, match="update_freq: 2 -> 0"):
        resume(tmp_path / "run", update_freq=0)


def test_a_run_from_before_global_batches_keeps_its_batches(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    start(tiny_data, run_dir)
    record = json.loads((run_dir / CONFIG_FILE).read_text())
    del record["train"]["batch_tokens"]
    record["train"].update(max_tokens=96, update_freq=2)
    record["sessions"] = [{"world_size": 2}]
    write_run_config(run_dir, record)
    cfg = resume(run_dir).train
    assert (cfg.batch_tokens, cfg.max_tokens, cfg.update_freq) == (384, 96, 0)
    # On its 2 processes: 2 batches of at most 96 tokens each, as before.
    assert plan_batch(cfg.batch_tokens, cfg.max_tokens, cfg.update_freq, 2) == BatchPlan(
        96, 2, 384, False)
