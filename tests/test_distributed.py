"""Data parallelism: 2 CPU processes over gloo train the same model as 1 process that
accumulates 2 batches per step."""

import math
import os
import subprocess
import sys

import pytest
import torch

from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.binarize import load_split
from transformer_nmt.train.checkpoint import LAST
from transformer_nmt.model_file import read_model_file
from transformer_nmt.train.distributed import init_distributed
from transformer_nmt.train.session import train

from train_fixtures import tiny_data, tiny_overrides  # noqa: F401  (tiny_data is a fixture)

# dropout 0: the processes' dropout streams cannot match one process's. adam_eps well
# above rounding noise: see test_train_trainer.tiny_trainer.
SETTINGS = {"dropout": 0.0, "adam_eps": 1e-4, "max_tokens": 160}


def test_single_process_collectives_are_identities():
    context = init_distributed("cpu")
    assert context.is_main and not context.enabled and context.world_size == 1
    assert context.any(True, False) == [True, False]
    assert context.broadcast({"a": 1}) == {"a": 1}
    assert context.gather(3) == [3]
    tensor = torch.ones(2)
    assert context.all_reduce_sum(tensor) is tensor and tensor.tolist() == [1.0, 1.0]


# "none": the pre-softmax projection is a weight of its own, which the training loss uses
# outside the model's forward (train/loss.py); DDP must still synchronize its gradient.
@pytest.mark.parametrize("tie_embeddings", ["all", "none"])
def test_two_processes_train_like_one_with_twice_the_update_freq(tiny_data, tmp_path,
                                                                 tie_embeddings):
    settings = dict(SETTINGS, tie_embeddings=tie_embeddings)
    data = load_split(tiny_data, "train")
    batches = TokenBatchSampler(data.src_lengths, data.tgt_lengths, SETTINGS["max_tokens"],
                                seed=1).num_batches
    assert batches % 2 == 1  # so that rank 1 runs out first and pads with an empty batch
    # Past the end of the first epoch, into the second.
    steps = math.ceil(batches / 2) + 2
    one = tmp_path / "one"
    train(out=one, data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(update_freq=2, max_steps=steps, **settings))
    two = tmp_path / "two"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "transformer_nmt.cli", "train", "--data",
               str(tiny_data), "--out", str(two), "--preset", "tiny", "--max-steps", str(steps),
               "--update-freq", "1"]
    for name, value in tiny_overrides(**settings):
        command += ["--set", f"{name}={value}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    finished = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "on 2 cpu process(es)" in finished.stdout
    a, b = read_model_file(one / LAST), read_model_file(two / LAST)
    assert a["step"] == b["step"] == steps and b["world_size"] == 2 and len(b["rng"]) == 2
    assert a["epoch"] == b["epoch"] > 1
    assert a["progress"]["tgt_tokens"] == b["progress"]["tgt_tokens"]
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=1e-4, atol=1e-5)
