"""Training's memory stays flat once the run has met its batch shapes: a run that grows by a
little every step is a run a laptop loses after an hour.

`nmt train` of the tiny preset on a task of sentences of 1 to 40 words (so batches come in
many shapes), in a child process whose resident memory the test samples from /proc.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_fixtures import reversal_pairs
from transformer_nmt.data.prepare import PrepareOptions, prepare
from transformer_nmt.runtime import bf16_supported

STEPS = 300
GROWTH_MB = 48
"""What the run may add after its first half: a checkpoint's buffers and allocator noise,
far below what a leak of one batch's activations per step would add over 150 steps. The
first half is warm-up: training keeps the memory it frees (memory.keep_freed_memory), so
its heap grows until the run has met its largest batches, over the first hundred steps
or so."""


def many_shapes_data(root: Path) -> Path:
    pairs = reversal_pairs(800, seed=3, words=(1, 40))
    files = {}
    for split, chunk in (("train", pairs[:760]), ("valid", pairs[760:])):
        for side, column in (("src", 0), ("tgt", 1)):
            path = root / f"{split}.{side}"
            path.write_text("".join(pair[column] + "\n" for pair in chunk), encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    out = root / "data"
    prepare(PrepareOptions(corpus="files", src="en", tgt="xx", out=out, vocab_size=64,
                           files=files, threads=1), progress=False, log=lambda message: None)
    return out


def resident_mb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            return next(int(line.split()[1]) for line in status
                        if line.startswith("VmRSS:")) // 1024
    except (OSError, StopIteration):
        return None


def sampled_training_rss(data: Path, out: Path, precision: str) -> list[int]:
    command = [sys.executable, "-m", "transformer_nmt.cli", "train", "--data", str(data),
               "--out", str(out), "--preset", "tiny", "--set", "batch_tokens=600",
               "--set", f"max_steps={STEPS}", "--set", "log_every=50", "--set", "valid_every=0",
               "--set", "save_every_minutes=0", "--set", f"precision={precision}"]
    # stderr to a file: a pipe read only at the end fills with the progress bar and
    # blocks the child.
    with open(out.parent / "train.stderr", "w+", encoding="utf-8") as errors:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        samples = []
        while child.poll() is None:
            rss = resident_mb(child.pid)
            if rss:
                samples.append(rss)
            time.sleep(0.05)
        errors.seek(0)
        assert child.returncode == 0, errors.read()[-2000:]
    return samples


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resident_memory_stays_flat_after_warm_up(tmp_path, precision):
    import torch

    if precision == "bf16" and not bf16_supported(torch.device("cpu")):
        pytest.skip("this CPU has no native bf16: training refuses it")
    # On a CPU with AMX, bf16 made oneDNN compile and keep a kernel for every new product
    # shape: before batch lengths were padded to multiples (runtime.length_multiple) this
    # run grew by hundreds of megabytes.
    samples = sampled_training_rss(many_shapes_data(tmp_path), tmp_path / "run", precision)
    assert len(samples) >= 9
    warm_up = samples[: len(samples) // 2]
    assert max(samples) <= max(warm_up) + GROWTH_MB, (max(warm_up), max(samples))
