"""The CUDA paths of training and decoding: bf16 and fp16 steps against an fp32 step, an
fp16 overflow skipped, SDPA's fused kernels in training, exact resume, torchrun and a
process group over NCCL, cached decoding, a batch out of GPU memory skipped, and a
batch's non-blocking copy to the GPU.

Every test is marked `gpu` and skipped where torch.cuda.is_available() is false, so the
default run on a CPU skips them all; on a GPU machine: `python -m pytest -m gpu
tests/test_gpu.py` (the kernel test prints which attention ops ran).

NMT_GPU_TESTS_ON=cpu runs them on the CPU instead (the `gpu_device` fixture returns the
CPU, and process groups use gloo), to check the tests' own logic before a GPU is at
hand: it proves nothing about CUDA. The tests that mean nothing off a GPU (out of GPU
memory, a copy to the GPU) skip under it; the kernel test checks the CPU's fused kernel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

import transformer_nmt
from transformer_nmt.config import PRESETS, DecodeConfig
from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.binarize import ParallelData, load_split
from transformer_nmt.data.collate import Batch, collate
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import read_model_file
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.distributed import Distributed, init_distributed
from transformer_nmt.training.session import train
from transformer_nmt.training.trainer import StepResult, Trainer

from search_fixtures import (SPECIAL, random_sources, searches_with_and_without_cache,
                             tiny_transformer)
from train_fixtures import TINY, tiny_overrides

ON_CPU = os.environ.get("NMT_GPU_TESTS_ON") == "cpu"
"""Run the tests on the CPU, to check their logic only (see the module docstring)."""

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (ON_CPU or torch.cuda.is_available()),
                       reason="needs a CUDA GPU (torch.cuda.is_available() is false); "
                              "NMT_GPU_TESTS_ON=cpu checks the tests' logic on the CPU"),
]

TESTS = Path(__file__).resolve().parent
SRC = Path(transformer_nmt.__file__).resolve().parents[1]


def cuda_only(why: str) -> pytest.MarkDecorator:
    """Skip under NMT_GPU_TESTS_ON=cpu, for a test whose subject exists on a GPU only."""
    return pytest.mark.skipif(ON_CPU, reason=f"meaningless on the CPU: {why}")


@pytest.fixture
def gpu_device() -> torch.device:
    """The GPU; the CPU under NMT_GPU_TESTS_ON=cpu."""
    return torch.device("cpu") if ON_CPU else torch.device("cuda")


def tiny_trainer(context: Distributed, precision: str = "fp32", dropout: float = 0.0,
                 adam_eps: float = 1e-4, seed: int = 3) -> Trainer:
    """A tiny model's trainer; without dropout two of one seed take the same steps.

    Adam's eps is raised above the rounding noise of gradients that are exact zeros
    (see tests/test_training_trainer.py), so that float tolerances compare updates.
    """
    torch.manual_seed(seed)
    model = Transformer(dataclasses.replace(PRESETS["tiny"].model, dropout=dropout), 64)
    cfg = dataclasses.replace(PRESETS["tiny"].train, adam_eps=adam_eps)
    return Trainer(model, cfg, context, precision)


def batches(data: ParallelData, *indices: int) -> list[Batch]:
    """The sampler's batches `indices` (96 tokens each) of `data`, on the CPU."""
    sampler = TokenBatchSampler(data.src_lengths, data.tgt_lengths, 96, seed=1)
    return [collate(data, sampler.batch(i)) for i in indices]


def snapshot(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.parameters]


def unchanged(trainer: Trainer, before: list[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, trainer.parameters))


def adam_state(trainer: Trainer) -> list[torch.Tensor]:
    return [t.clone() for state in trainer.optimizer.state.values() for t in state.values()]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports this package and these tests
    from where this process does (a relative PYTHONPATH=src would not survive a cd)."""
    paths = [str(TESTS), str(SRC), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)),
                OMP_NUM_THREADS="1", **extra)


def run_child(command: list[str], env: dict[str, str], timeout: int = 240
              ) -> subprocess.CompletedProcess:
    """Run `command` to its end; its output on failure."""
    finished = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert finished.returncode == 0, (finished.stdout[-2000:] + finished.stderr[-4000:])
    return finished


def call_in_child(function: str, *args: str, env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess:
    """`function(*args)` of this module in a fresh Python process."""
    code = f"import test_gpu; test_gpu.{function}(*{list(args)!r})"
    return run_child([sys.executable, "-c", code], env or child_env())


# Half precision against fp32.

TOLERANCES = {"bf16": {"loss": 5e-3, "grad_norm": 0.03, "update": 0.1},
              "fp16": {"loss": 1e-3, "grad_norm": 0.015, "update": 0.06}}
"""Relative differences allowed between a half-precision step and an fp32 step.

Autocast rounds the inputs of every matrix product to bf16 (8 significant bits, unit
roundoff u = 2^-9 = 0.002) or fp16 (11 bits, u = 2^-12 = 0.00024) and accumulates in
float32; LayerNorm, softmax, the loss and the optimizer stay float32. The loss, a sum
over ~100 target tokens whose errors partly cancel, must come within a few u ("loss",
also for the NLL). The gradient is the sum of many products of rounded factors, and its
small elements, where terms cancel (and in fp16 the tiniest, below its range), lose
more: its norm ("grad_norm") and the whole gradient as a vector ("update", the norm of
the difference over the norm) get looser bounds. On the CPU the worst of 60 steps (10
seeds x 3 batch pairs) were, bf16 then fp16: loss 4.0e-4 / 4.1e-5, gradient norm
6.0e-3 / 3.0e-3, gradient vector 2.5e-2 / 1.4e-2; each bound is 4-25x that, and GPUs'
fused attention kernels, which keep their softmax in float32, round less than the CPU's
bf16 math kernel. A step computed wrong (a gradient left scaled, a batch missed, a wrong
normalizer) is off by tens of percent or more.
"""


def first_update(trainer: Trainer, step: list[Batch], tries: int = 24) -> StepResult:
    """Train on `step` until an update is taken: fp16 skips steps while GradScaler halves
    its first scale, 2^16, which overflows the summed loss's gradient; a skipped step
    leaves the weights and Adam's state as they were."""
    for _ in range(tries):
        result = trainer.train_step(step)
        if result.updated:
            return result
        assert result.skipped == "fp16 overflow", result
    raise AssertionError(f"no update in {tries} tries: {result}")


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def update(trainer: Trainer, start: list[torch.Tensor]) -> torch.Tensor:
    """How far every parameter moved from `start`, as one vector."""
    with torch.no_grad():
        return torch.cat([(p - p0).flatten() for p, p0 in zip(trainer.parameters, start)])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_half_precision_step_matches_an_fp32_step(tiny_data, gpu_device, precision):
    data = load_split(tiny_data, "train")
    step = batches(data, 0, 1)
    context = init_distributed(gpu_device.type)
    # Adam's eps of 1 makes its first step lr * g / (|g| + 1), about lr * g: the update is
    # the gradient's, comparable as a vector. At a small eps each weight moves by about
    # lr * sign(g), and where g is rounding noise around zero its sign is a coin toss.
    reference, half = (tiny_trainer(context, p, adam_eps=1.0) for p in ("fp32", precision))
    start = snapshot(reference)
    assert all(torch.equal(a, b) for a, b in zip(start, half.parameters))
    expected = reference.train_step(step)
    result = first_update(half, step)
    assert expected.updated and result.tgt_tokens == expected.tgt_tokens
    assert result.loss != expected.loss  # autocast did compute in half precision
    bounds = TOLERANCES[precision]
    for quantity, bound in (("loss", "loss"), ("nll", "loss"), ("grad_norm", "grad_norm")):
        got, wanted = getattr(result, quantity), getattr(expected, quantity)
        assert relative(got, wanted) < bounds[bound], f"{quantity}: {got} against {wanted}"
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in half.parameters)
    moved, wanted = update(half, start), update(reference, start)
    error = float((moved - wanted).norm() / wanted.norm())
    assert error < bounds["update"], f"{precision} update differs from fp32's by {error:.2%}"


# An fp16 overflow.

def test_an_fp16_overflow_is_skipped_and_the_next_step_updates(tiny_data, gpu_device):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(init_distributed(gpu_device.type), "fp16")
    first_update(trainer, batches(data, 0))
    fitting, skipped = trainer.scaler.get_scale(), trainer.skipped_total
    # GradScaler's own way to set a scale: 2^40 times the loss's gradient is far beyond
    # fp16's largest finite number, 65504, in the first fp16 product of the backward.
    trainer.scaler.update(new_scale=2.0 ** 40)
    before, adam_before = snapshot(trainer), adam_state(trainer)
    result = trainer.train_step(batches(data, 1))
    assert not result.updated and result.skipped == "fp16 overflow"
    assert trainer.step == 1 and trainer.bad_steps == 0 and trainer.skipped_total == skipped + 1
    assert trainer.scaler.get_scale() == 2.0 ** 39
    assert unchanged(trainer, before)
    assert all(torch.equal(a, b) for a, b in zip(adam_before, adam_state(trainer)))

    trainer.scaler.update(new_scale=fitting)
    result = trainer.train_step(batches(data, 2))
    assert result.updated and result.skipped is None and trainer.step == 2
    assert not unchanged(trainer, before)


# The attention kernels of training.

FUSED_ATTENTION = ("_scaled_dot_product_efficient_attention",
                   "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention")
"""Names of SDPA's fused kernels' ops (the CPU's is _scaled_dot_product_flash_attention_for_cpu)."""
MATH_ATTENTION = "_scaled_dot_product_attention_math"


def test_training_attention_runs_in_a_fused_kernel_not_the_math_fallback(tiny_data, gpu_device,
                                                                         capsys):
    # bf16, as GPUs train; on a CPU bf16 asks for the math kernel on purpose at these
    # lengths (training/precision.py), so the logic check there trains in fp32.
    precision = "bf16" if gpu_device.type == "cuda" else "fp32"
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(init_distributed(gpu_device.type), precision, dropout=0.1)
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
             SDPBackend.CUDNN_ATTENTION]
    # Without the math backend SDPA raises "No available kernel" where no fused kernel
    # takes the inputs (the padding masks, the causal flag, the head size of 8).
    with sdpa_kernel(fused), profile(activities=[ProfilerActivity.CPU]) as profiler:
        result = trainer.train_step(batches(data, 0, 1))
    assert result.updated
    ops = sorted({event.key for event in profiler.key_averages()
                  if "scaled_dot_product" in event.key})
    with capsys.disabled():
        print(f"\nSDPA ops of a {precision} training step on {gpu_device.type}: {ops}")
    assert any(name in op for op in ops for name in FUSED_ATTENTION), ops
    assert not any(MATH_ATTENTION in op for op in ops), ops


# Exact resume.

def train_straight_and_resumed(data_dir: str, root: str, device: str) -> None:
    """(In a child process.) Train 12 steps in ROOT/straight, and 5 then 7 more after a
    resume in ROOT/resumed, deterministically, as tests/test_training_session.py does.

    Deterministic algorithms (strict): the backward of the memory-efficient attention
    kernel may split the keys and sum the splits with atomics, whose order varies from
    run to run; strict deterministic mode keeps the keys in one split, warn_only would
    only warn. Strict mode also needs CUBLAS_WORKSPACE_CONFIG, which torch reads once per
    process, at its first cuBLAS call: hence a fresh process that has it from the start,
    rather than this test's own, where earlier tests have called cuBLAS already.
    """
    torch.use_deterministic_algorithms(True)
    root_dir = Path(root)
    # 4 batches a step (96 tokens each, 384 a step): 12 steps cross an epoch's end; dropout
    # is on, so the CUDA random stream must be restored too.
    settings = dict(batch_tokens=384, max_tokens=96)
    train(out=root_dir / "straight", data=data_dir, preset="tiny", device=device,
          overrides=tiny_overrides(max_steps=12, **settings), progress=False)
    train(out=root_dir / "resumed", data=data_dir, preset="tiny", device=device,
          overrides=tiny_overrides(max_steps=5, **settings), progress=False)
    train(resume=root_dir / "resumed", device=device, overrides=[("max_steps", 12)],
          progress=False)


def test_a_resumed_run_equals_an_uninterrupted_one(tiny_data, gpu_device, tmp_path):
    call_in_child("train_straight_and_resumed", str(tiny_data), str(tmp_path),
                  gpu_device.type, env=child_env(CUBLAS_WORKSPACE_CONFIG=":4096:8"))
    straight = read_model_file(tmp_path / "straight" / LAST)
    resumed = read_model_file(tmp_path / "resumed" / LAST)
    assert straight["step"] == resumed["step"] == 12 and straight["epoch"] > 1
    sessions = json.loads((tmp_path / "resumed" / "config.json").read_text())["sessions"]
    assert [s["from_step"] for s in sessions] == [0, 5]
    assert {s["device"] for s in sessions} == {"cuda:0" if gpu_device.type == "cuda" else "cpu"}
    differing = {name: float((tensor - resumed["model"][name]).abs().max())
                 for name, tensor in straight["model"].items()
                 if not torch.equal(tensor, resumed["model"][name])}
    assert not differing, f"weights differ after the resume (largest differences): {differing}"
    adam_a = straight["trainer"]["optimizer"]["state"]
    adam_b = resumed["trainer"]["optimizer"]["state"]
    assert all(torch.equal(adam_a[k]["exp_avg_sq"], adam_b[k]["exp_avg_sq"]) for k in adam_a)


# torchrun, and the trainer in a process group over NCCL.

def test_torchrun_with_one_process_trains_and_checkpoints(tiny_data, gpu_device, tmp_path):
    # One process makes no process group (training/distributed.py: only WORLD_SIZE > 1
    # does), so NCCL itself is the next test's; this one is torchrun's launch on a GPU.
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=1", "-m", "transformer_nmt.cli", "train",
               "--data", str(tiny_data), "--out", str(out), *TINY, "--max-steps", "4",
               "--device", gpu_device.type]
    finished = run_child(command, child_env())
    assert "trained 4 steps" in finished.stdout
    assert f"on 1 {gpu_device.type} process(es), fp32" in finished.stdout
    checkpoint = read_model_file(out / LAST)
    assert checkpoint["step"] == 4 and checkpoint["world_size"] == 1
    session = json.loads((out / "config.json").read_text())["sessions"][0]
    assert session["device"] == ("cuda:0" if gpu_device.type == "cuda" else "cpu")
    assert session["world_size"] == 1


class OneProcessGroup(Distributed):
    """A process alone in a process group: the trainer wraps its model in DDP and sums
    over the group as with several processes, which one GPU cannot otherwise show."""

    @property
    def enabled(self) -> bool:
        return True


def one_process_group_steps(data_dir: str, store: str, device: str) -> None:
    """(In a child process.) Two steps of two batches each by a trainer in a process
    group of one (NCCL on a GPU, gloo on a CPU, as training/distributed.py picks) and by
    one without; prints what the test checks as one line of JSON."""
    alone = init_distributed(device)
    backend = "nccl" if alone.device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=alone.device if backend == "nccl" else None)
    try:
        grouped = OneProcessGroup(0, 1, 0, alone.device)
        trainers = [tiny_trainer(alone), tiny_trainer(grouped)]
        data = load_split(Path(data_dir), "train")
        results = [[trainer.train_step(batches(data, i, i + 1)) for i in (0, 2)]
                   for trainer in trainers]
        difference = max(float((a - b).abs().max())
                         for a, b in zip(trainers[0].parameters, trainers[1].parameters))
        print(json.dumps({
            "backend": dist.get_backend(), "ddp": isinstance(trainers[1].model,
                                                             DistributedDataParallel),
            "updated": [r.updated for rs in results for r in rs],
            "tgt_tokens": [[r.tgt_tokens for r in rs] for rs in results],
            "difference": difference}))
    finally:
        dist.destroy_process_group()


def test_a_process_group_trains_like_one_process(tiny_data, gpu_device, tmp_path):
    finished = call_in_child("one_process_group_steps", str(tiny_data),
                             str(tmp_path / "store"), gpu_device.type)
    [report] = [json.loads(line) for line in finished.stdout.splitlines()
                if line.startswith('{"backend"')]
    assert report["backend"] == ("nccl" if gpu_device.type == "cuda" else "gloo")
    assert report["ddp"] and all(report["updated"])
    alone, grouped = report["tgt_tokens"]
    assert alone == grouped
    # Summed over one process the gradient is the same; the kernels may sum in another
    # order from one run to the next (atomics), hence a float tolerance.
    assert report["difference"] < 1e-5


# Cached decoding.

@pytest.mark.parametrize("beam", [1, 4])
def test_cached_decoding_equals_uncached(gpu_device, beam):
    # As tests/test_decode_search_searches.py holds on the CPU.
    model = tiny_transformer().to(gpu_device)
    src = random_sources(6, 12, seed=1).to(gpu_device)
    cached, uncached = searches_with_and_without_cache(model, src, beam)
    assert len(cached) == len(uncached) == 6
    for with_cache, without in zip(cached, uncached):
        assert [hyp.tokens for hyp in with_cache] == [hyp.tokens for hyp in without]
        assert [hyp.score for hyp in with_cache] == pytest.approx(
            [hyp.score for hyp in without], abs=1e-4)



def test_a_bf16_search_on_a_gpu_never_runs_cudnn_attention(gpu_device):
    # cuDNN plans each new shape, and every decoding step has a new key length: a bf16
    # search that PyTorch sent there made no progress (bench/RESULTS.md).
    from transformer_nmt.decode.runtime.precision import prepare_model

    model = prepare_model(tiny_transformer(), gpu_device, "bf16")
    src = random_sources(6, 12, seed=1).to(gpu_device)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        found = beam_search(model, src, DecodeConfig(beam=4, max_len_b=8), SPECIAL)
    assert len(found) == 6
    ops = {event.key for event in profiler.key_averages()}
    assert "aten::_scaled_dot_product_cudnn_attention" not in ops
    assert any(name in op for op in ops for name in FUSED_ATTENTION)


# Out of GPU memory.

HEADROOM = 256 * 2 ** 20
"""GPU memory the allocator may take beyond what it holds when the test begins: a tiny
batch's step needs a few MB, the big batch's gigabytes."""


def too_big(batch: Batch, copies: int) -> Batch:
    """`batch`'s rows `copies` times over."""
    return Batch(batch.src.repeat(copies, 1), batch.tgt_in.repeat(copies, 1),
                 batch.tgt_out.repeat(copies, 1), batch.src_tokens * copies,
                 batch.tgt_tokens * copies, batch.indices * copies)


@cuda_only("a CPU trainer raises its out of memory (tests/test_training_trainer.py)")
def test_a_batch_out_of_gpu_memory_is_skipped_and_training_goes_on(tiny_data, gpu_device):
    data = load_split(tiny_data, "train")
    trainer = tiny_trainer(init_distributed(gpu_device.type))
    # A first step allocates Adam's moments and cuBLAS's workspace, which stay.
    assert trainer.train_step(batches(data, 0)).updated
    [small] = batches(data, 1)
    # About 9M positions a side: 1.2 GB for one (positions, d_model) activation in fp32.
    big = too_big(small, 100_000)
    torch.cuda.empty_cache()
    # set_per_process_memory_fraction wants an index: a bare torch.device("cuda") is refused.
    gpu_device = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(gpu_device).total_memory
    fraction = (torch.cuda.memory_reserved(gpu_device) + HEADROOM) / total
    held = torch.cuda.memory_allocated(gpu_device)
    before = snapshot(trainer)
    try:
        torch.cuda.set_per_process_memory_fraction(fraction, gpu_device)
        result = trainer.train_step([big])
        assert not result.updated and result.skipped == "out of GPU memory"
        assert trainer.step == 1 and trainer.skipped_total == 1 and trainer.bad_steps == 0
        assert unchanged(trainer, before)
        assert all(p.grad is None or not p.grad.any() for p in trainer.parameters)
        # The failed batch's activations are gone, not just cached.
        leaked = torch.cuda.memory_allocated(gpu_device) - held
        assert leaked < 32 * 2 ** 20, f"{leaked / 2 ** 20:.0f} MiB still allocated"
        result = trainer.train_step([small])
        assert result.updated and trainer.step == 2 and not unchanged(trainer, before)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, gpu_device)
        torch.cuda.empty_cache()


# A batch's copy to the GPU.

@cuda_only("the trainer's non-blocking copy is a copy to a GPU")
def test_a_batch_copied_without_blocking_reaches_the_gpu_intact(tiny_data, gpu_device):
    # Nothing pins memory (collate's tensors are pageable): a non-blocking copy from
    # pageable memory is staged before it returns, so the trainer may drop the source.
    data = load_split(tiny_data, "train")
    [batch] = batches(data, 3)
    copied = batch.to(gpu_device, non_blocking=True)
    torch.cuda.synchronize(gpu_device)
    for name in ("src", "tgt_in", "tgt_out"):
        on_gpu, original = getattr(copied, name), getattr(batch, name)
        assert on_gpu.device.type == "cuda" and on_gpu.dtype == original.dtype
        assert torch.equal(on_gpu.cpu(), original)
    assert (copied.src_tokens, copied.tgt_tokens, copied.indices) == (
        batch.src_tokens, batch.tgt_tokens, batch.indices)
