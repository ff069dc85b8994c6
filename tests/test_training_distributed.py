"""Data parallelism: the batch of an update is global. 2 CPU processes over gloo, each
deriving its half of every update, train the same model as 1 process that accumulates
both halves, a run goes on with another number of processes on the same batch, what
rank 0 reads reaches every process, errors included, and a process killed ends the others
with one line, its checkpoints whole."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.binarize import load_split
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import read_model_file
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.distributed import Distributed, Heartbeat, init_distributed
from transformer_nmt.training.session import train

from train_fixtures import TINY, tiny_overrides

# dropout 0: the processes' dropout streams cannot match one process's. adam_eps well
# above rounding noise: see test_train_trainer.tiny_trainer.
SETTINGS = {"dropout": 0.0, "adam_eps": 1e-4, "batch_tokens": 320}
HALF = 160
"""Each of two processes' share of an update."""


def two_processes(*args, settings=()):
    """`nmt train ARGS` under torchrun on 2 CPU processes, (field, value) `settings` as --set."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "transformer_nmt.cli", "train", *map(str, args)]
    for name, value in settings:
        command += ["--set", f"{name}={value}"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=180,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert finished.returncode == 0, finished.stderr[-3000:]
    return finished


def records(run_dir, event="train"):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["event"] == event]


def sessions(run_dir):
    return json.loads((run_dir / "config.json").read_text())["sessions"]


def test_single_process_collectives_are_identities():
    context = init_distributed("cpu")
    assert context.is_main and not context.enabled and context.world_size == 1
    assert context.any(True, False) == [True, False]
    assert context.broadcast({"a": 1}) == {"a": 1}
    assert context.gather(3) == [3]
    tensor = torch.ones(2)
    assert context.all_reduce_sum(tensor) is tensor and tensor.tolist() == [1.0, 1.0]


# "none": the pre-softmax projection is a weight of its own, which the training loss uses
# outside the model's forward (training/loss.py); DDP must still synchronize its gradient.
@pytest.mark.parametrize("tie_embeddings", ["all", "none"])
def test_two_processes_train_like_one_on_the_same_global_batch(tiny_data, tmp_path,
                                                               tie_embeddings):
    settings = dict(SETTINGS, tie_embeddings=tie_embeddings)
    data = load_split(tiny_data, "train")
    batches = TokenBatchSampler(data.src_lengths, data.tgt_lengths, HALF, seed=1).num_batches
    assert batches % 2 == 1  # so that rank 1 runs out first and pads with an empty batch
    # Past the end of the first epoch, into the second.
    steps = math.ceil(batches / 2) + 2
    one = tmp_path / "one"
    # Capped at half the batch, one process accumulates the two halves that two take.
    train(out=one, data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_tokens=HALF, max_steps=steps, **settings))
    two = tmp_path / "two"
    # Neither max_tokens nor update_freq given: each process derives its half.
    finished = two_processes("--data", tiny_data, "--out", two, "--preset", "tiny",
                             "--max-steps", steps, settings=tiny_overrides(**settings))
    assert "on 2 cpu process(es)" in finished.stdout
    assert ("batch: 320 tokens per side per update = 2 process(es) x 1 accumulated x 160 "
            "tokens") in finished.stderr
    assert sessions(one)[0]["batch"] == {"per_batch_tokens": HALF, "update_freq": 2,
                                         "global_tokens": 320, "explicit": False}
    a, b = read_model_file(one / LAST), read_model_file(two / LAST)
    assert a["step"] == b["step"] == steps and b["world_size"] == 2 and len(b["rng"]) == 2
    assert a["epoch"] == b["epoch"] > 1
    assert a["progress"]["tgt_tokens"] == b["progress"]["tgt_tokens"]
    per_step = [[r["step_tgt_tokens"] for r in records(run)] for run in (one, two)]
    assert per_step[0] == per_step[1] and len(per_step[0]) == steps
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=1e-4, atol=1e-5)


def test_a_run_goes_on_with_two_processes_on_the_same_global_batch(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    train(out=run_dir, data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_steps=3, **SETTINGS))
    epoch_before = read_model_file(run_dir / LAST)["epoch"]
    finished = two_processes("--resume", run_dir, "--max-steps", 6)
    assert "batches of 320 tokens before, 160 now" in finished.stderr
    assert [session["batch"]["per_batch_tokens"] for session in sessions(run_dir)] == [320, HALF]
    assert {session["batch"]["global_tokens"] for session in sessions(run_dir)} == {320}
    assert [r["step"] for r in records(run_dir)] == list(range(1, 7))
    checkpoint = read_model_file(run_dir / LAST)
    assert checkpoint["step"] == 6 and checkpoint["epoch"] > epoch_before


def test_only_rank_0_reads_and_every_process_gets_its_value_or_its_error(monkeypatch):
    sent = []

    def broadcast(self, value):  # rank 0 sends first; the others receive what it sent
        if self.is_main:
            sent.append(value)
        return sent[-1]

    monkeypatch.setattr(Distributed, "broadcast", broadcast)
    main, other = (Distributed(rank, 2, rank, torch.device("cpu")) for rank in (0, 1))
    assert main.main_reads(lambda: {"step": 7}) == {"step": 7}
    assert other.main_reads(lambda: pytest.fail("only rank 0 reads")) == {"step": 7}

    def damaged():
        raise UserError("checkpoint_7.pt: damaged")

    for context in (main, other):
        with pytest.raises(UserError, match="checkpoint_7.pt: damaged"):
            context.main_reads(damaged)


def test_the_ranks_whose_heartbeat_stands_still_are_named():
    store = dist.HashStore()
    beats = [Heartbeat(store, rank, interval=0.1) for rank in (0, 2)]  # rank 1 is dead
    try:
        context = Distributed(0, 3, 0, torch.device("cpu"), store, beats[0])
        error = context.lost_process_error("the run in RUN")
        assert str(error).startswith("rank 0 lost contact with rank 1 of 3, which stopped or "
                                     "hangs") and "resume the run in RUN" in str(error)
        # Every other process beating: the failure was something else, raised as it was.
        beats.append(Heartbeat(store, 1, interval=0.1))
        assert context.lost_process_error("the run in RUN") is None
    finally:
        for beat in beats:
            beat.stop()


def rank_pid(launcher_pid, rank):
    """The PID of torchrun's worker of `rank` (its children's environments say)."""
    children = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True,
                              text=True).stdout.split()
    for pid in children:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            if f"RANK={rank}".encode() in environ.read().split(b"\0"):
                return int(pid)
    raise AssertionError(f"no worker of rank {rank} among {children}")


# Slow: 7-10 s on 2 shared cores (torchrun and two processes start, train to a checkpoint,
# the survivor watches the heartbeats, the run resumes); the naming itself is tested above.
@pytest.mark.slow
def test_a_killed_process_ends_the_other_with_one_line_and_whole_checkpoints(tiny_data,
                                                                            tmp_path):
    # A short timeout, still above what two processes' start and a checkpoint take here.
    run_dir, logs, timeout = tmp_path / "run", tmp_path / "logs", 3
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "--log-dir", str(logs), "--redirects", "3",
               "-m", "transformer_nmt.cli", "train", "--data", str(tiny_data), "--out",
               str(run_dir), *TINY, "--max-steps", "100000", "--save-every", "2",
               "--collective-timeout", str(timeout)]
    # The system allocator: no second start of every process with tcmalloc preloaded.
    env = dict(os.environ, OMP_NUM_THREADS="1", NMT_ALLOCATOR="system")
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as launcher:
        deadline = time.monotonic() + 120
        while not list(run_dir.glob("checkpoint_*.pt")):
            assert launcher.poll() is None and time.monotonic() < deadline, \
                launcher.communicate()[1][-3000:]
            time.sleep(0.05)
        os.kill(rank_pid(launcher.pid, 1), signal.SIGKILL)
        killed = time.monotonic()
        _, launcher_errors = launcher.communicate(timeout=timeout + 60)
    # Not a timing threshold: the survivor finds out at once (its connections close), or
    # after the timeout, then watches the heartbeats for a moment; the slack is generous.
    assert time.monotonic() - killed < timeout + 30
    assert launcher.returncode != 0
    # torchrun's summary: rank 0 ended by itself with a UserError's status, not its SIGTERM.
    assert re.search(r"rank\s*: 0 \(local_rank: 0\)\s*exitcode\s*: 2\b", launcher_errors), \
        launcher_errors[-3000:]
    [rank_0_errors] = logs.glob("**/attempt_0/0/stderr.log")
    text = rank_0_errors.read_text()
    assert "Traceback" not in text and "[rank0]" not in text
    errors = [line for line in text.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        "nmt train: error: rank 0 lost contact with rank 1 of 2, which stopped or hangs"), text
    assert f"resume the run in {run_dir}" in errors[0]
    # Every checkpoint on disk is whole, and the run resumes from the last.
    steps = [read_model_file(path)["step"] for path in sorted(run_dir.glob("*.pt"))]
    last = read_model_file(run_dir / LAST)["step"]
    assert last == max(steps) and last % 2 == 0
    with pytest.warns(UserWarning, match="resuming with 2 processes before, 1 now"):
        assert train(resume=run_dir, progress=False,
                     overrides=[("max_steps", last + 1)]).step == last + 1
