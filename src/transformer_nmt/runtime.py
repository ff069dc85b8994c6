"""Where a computation runs and in which precision: decided here once, for training,
translation, evaluation and every tool built on them.

The rules: no device named means CUDA when present, else the CPU, except that int8
(dynamic quantization) runs on the CPU only; bf16 only where the device computes it
natively (emulated bf16 is no mere slowdown: a CPU without AVX-512 BF16 or AMX multiplies
bf16 matrices far slower than fp32); fp16 only on CUDA, where a
gradient scaler keeps its small range usable; 'auto' (training) is bf16 on a GPU that
has it, and on a CPU only where bf16 matrix products at the model's shapes, measured, are
clearly faster than fp32's: native is not enough (a CPU with AVX-512 BF16 but no AMX
was measured multiplying bf16 slower than fp32). 'auto' for decoding applies the same
rule at a decoding step's product shape. The measurement is cached per machine.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from transformer_nmt.config import DECODE_PRECISIONS, TRAIN_PRECISIONS
from transformer_nmt.errors import UserError
from transformer_nmt.files import write_json_atomic

DEFAULT_DEVICE = None
"""The device of everything that names none (the library's Translator and trainer, every
command's --device): None lets `resolve_device` decide, CUDA when present, else the CPU."""


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` computes bf16 natively (fast), not just emulates it."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_device(name: str | torch.device | None, precision: str = "fp32",
                   local_rank: int = 0) -> torch.device:
    """The device for `name`: 'cpu', 'cuda', 'cuda:N', or None/'auto' for CUDA when
    present (the CPU for int8). Under torchrun every process takes the GPU of its local
    rank. UserError for an unknown device or one this process cannot use."""
    if name is DEFAULT_DEVICE or name == "auto":
        name = "cuda" if torch.cuda.is_available() and precision != "int8" else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {str(name)!r} asked for, but this PyTorch sees no CUDA "
                            "GPU; use the cpu device")
        if device.index is None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            device = torch.device("cuda", local_rank)
    elif device.type != "cpu":
        raise UserError(f"device {str(name)!r} is not supported; use cpu or cuda")
    return device


BF16_MARGIN = 1.25
"""How much faster bf16 products must be for 'auto' to train in bf16: autocast also pays
for casts and keeps LayerNorm, softmax and the optimizer in fp32, which a small win in the
products does not cover."""
PRODUCT_SHAPE = (2048, 512, 2048)
"""(rows, inner, columns) of the product 'auto' times when the caller gives none: a
feed-forward layer of the base model on a 2048-token batch."""
DECODE_PRODUCT_SHAPE = (128, 512, 2048)
"""(rows, inner, columns) of the product decoding's 'auto' times: a feed-forward layer of
the base model at 128 decoder rows, the rows a translator keeps in flight by default."""


@dataclass(frozen=True)
class MatmulRates:
    """Measured FLOP/s of one matrix product shape in fp32 and in bf16."""

    fp32: float
    bf16: float


def matmul_rate(device: torch.device, dtype: torch.dtype, shape: tuple[int, int, int],
                repeats: int = 5) -> float:
    """FLOP/s of a (rows, inner) @ (inner, columns) product in `dtype` on `device`, the
    best of `repeats` runs. Constant inputs: it draws nothing from the random generators,
    so that a resumed run sees the same random stream as an uninterrupted one."""
    rows, inner, columns = shape
    a = torch.full((rows, inner), 0.5, dtype=dtype, device=device)
    b = torch.full((inner, columns), 0.25, dtype=dtype, device=device)
    a @ b  # first-call dispatch and, on a GPU, kernel selection
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * rows * inner * columns / max(best, 1e-9)


def measure_matmul_rates(device: torch.device, shape: tuple[int, int, int]) -> MatmulRates:
    """FLOP/s of `shape`'s product in fp32 and in bf16 on `device`."""
    return MatmulRates(matmul_rate(device, torch.float32, shape),
                       matmul_rate(device, torch.bfloat16, shape))


def cache_dir() -> Path:
    """Where measurements about this machine are kept: $NMT_CACHE_DIR, else
    $XDG_CACHE_HOME/transformer-nmt, else ~/.cache/transformer-nmt."""
    if os.environ.get("NMT_CACHE_DIR"):
        return Path(os.environ["NMT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer-nmt"


def _machine_key(device: torch.device, shape: tuple[int, int, int]) -> str:
    """What the rates depend on: the processor, torch's build, threads and the shape."""
    if device.type == "cuda":
        processor = torch.cuda.get_device_name(device)
    else:
        processor = _cpu_model_name() or platform.processor() or platform.machine()
    return (f"{device.type}|{processor}|torch {torch.__version__}|"
            f"threads {torch.get_num_threads()}|{'x'.join(map(str, shape))}")


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return next((line.split(":", 1)[1].strip() for line in info
                         if line.startswith("model name")), "")
    except OSError:
        return ""


def cached_matmul_rates(device: torch.device, shape: tuple[int, int, int],
                        measure: Callable[..., MatmulRates] | None = None
                        ) -> tuple[MatmulRates, bool]:
    """The rates of `shape` on this machine and whether they came from the cache; measured
    and cached when absent. A cache that cannot be read or written is measured around."""
    path = cache_dir() / "matmul_rates.json"
    key = _machine_key(device, shape)
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(stored, dict):
            stored = {}
    except (OSError, ValueError):
        stored = {}
    found = stored.get(key)
    if isinstance(found, dict) and {"fp32", "bf16"} <= set(found):
        try:
            return MatmulRates(float(found["fp32"]), float(found["bf16"])), True
        except (TypeError, ValueError):
            pass
    rates = (measure or measure_matmul_rates)(device, shape)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {**stored, key: {"fp32": rates.fp32, "bf16": rates.bf16}})
    except OSError:
        pass
    return rates, False


def auto_training_precision(device: torch.device,
                            shape: tuple[int, int, int] = PRODUCT_SHAPE) -> tuple[str, str]:
    """(precision, the sentence that says why) for training precision 'auto' on `device`."""
    if not bf16_supported(device):
        return "fp32", f"this {device.type.upper()} has no native bf16"
    if device.type == "cuda":
        return "bf16", "this GPU computes bf16 natively"
    rates, cached = cached_matmul_rates(device, shape)
    ratio = rates.bf16 / rates.fp32
    chosen = "bf16" if ratio >= BF16_MARGIN else "fp32"
    rule = "at least" if chosen == "bf16" else "less than"
    return chosen, (f"bf16 products ran {ratio:.2f}x as fast as fp32 "
                    f"({rates.bf16 / 1e9:.0f} against {rates.fp32 / 1e9:.0f} GFLOP/s at "
                    f"{'x'.join(map(str, shape))}{', cached' if cached else ''}), {rule} "
                    f"the {BF16_MARGIN}x bf16 needs")


def auto_decoding_precision(device: torch.device) -> tuple[str, str]:
    """(precision, the sentence that says why) for decoding precision 'auto' on `device`:
    the training rule at a decoding step's product shape.

    Where bf16 products are faster, bf16 decodes faster than fp32 at the same BLEU; a CPU
    whose bf16 products are slower than fp32's decodes in fp32. int8 is never chosen: it
    gained little speed over fp32 and moved BLEU by more than the rule allows."""
    return auto_training_precision(device, DECODE_PRODUCT_SHAPE)


def resolve_precision(precision: str, device: torch.device, training: bool,
                      log: Callable[[str], None] | None = None,
                      shape: tuple[int, int, int] = PRODUCT_SHAPE) -> str:
    """The precision to compute in on `device`: 'auto' as `auto_training_precision`
    decides at the products' `shape` when training, or `auto_decoding_precision` (the
    decision and its reason go to `log`); a precision the device cannot do well is a
    UserError."""
    allowed = TRAIN_PRECISIONS if training else DECODE_PRECISIONS
    if precision not in allowed:
        raise UserError(f"precision must be one of {', '.join(allowed)}, not {precision!r}")
    if precision == "auto":
        chosen, reason = (auto_training_precision(device, shape) if training
                          else auto_decoding_precision(device))
        if log is not None:
            log(f"precision auto: {chosen} ({reason})")
        return chosen
    if precision == "fp16" and device.type != "cuda":
        raise UserError("precision fp16 needs a CUDA GPU (CPUs have no fast fp16 matrix "
                        "products); use bf16 or fp32 on the CPU")
    if precision == "int8" and device.type != "cpu":
        raise UserError("precision int8 runs on the CPU only; use bf16 on a GPU")
    if precision == "bf16" and not bf16_supported(device):
        others = "fp32 or fp16" if device.type == "cuda" else "fp32" + (
            "" if training else " or int8")
        raise UserError(f"precision bf16: this {device.type.upper()} has no native bf16 "
                        "(needs AVX-512 BF16 or AMX on a CPU, Ampere or newer on a GPU) and "
                        f"would run far slower than fp32; use {others}")
    return precision


SHAPE_MULTIPLE = 8
"""Tokens each side of a training batch is padded to a multiple of where new shapes cost."""


def compiles_per_shape(device: torch.device, precision: str) -> bool:
    """Whether matrix products on `device` in `precision` compile and keep a kernel for
    every new shape: bf16 on a CPU. oneDNN compiles one for every new shape and keeps it
    for the rest of the process, so that a run meeting hundreds of shapes grows in memory,
    and in time per product, with them. fp32 products there (MKL,
    as training and validation compute them) and GPUs keep no per-shape state. Training's
    batch lengths (`length_multiple`) and validation's precision follow from it; decoding
    multiplies by matrices packed for oneDNN in fp32 as well, and pads its rows in both
    (transformer_nmt.decode.device.layout.PackedLinear).
    """
    return device.type == "cpu" and precision == "bf16"


def length_multiple(device: torch.device, precision: str) -> int:
    """What a training batch's sequence lengths are padded to a multiple of on `device` in
    `precision`: SHAPE_MULTIPLE where products `compiles_per_shape`, else 1 (the padding
    would only cost).

    Exact batch lengths met hundreds of shapes; padded to multiples of SHAPE_MULTIPLE, a
    run meets a few dozen.
    """
    return SHAPE_MULTIPLE if compiles_per_shape(device, precision) else 1


def validation_precision(device: torch.device, precision: str) -> str:
    """The precision of a training run's validation, its loss and the searches that score
    its translations: fp32 on a CPU, else the training's own.

    On a CPU, bf16 products keep a kernel per shape (`compiles_per_shape`). The validation
    loss's batches meet many shapes that training has not, and under autocast every
    decoding step's products have a new number of rows as sentences finish, so that each
    validation adds hundreds of kernels. fp32 keeps nothing per shape, decoded the
    quickstart's validation split faster at the same BLEU, and its loss is the more
    exact.
    """
    return "fp32" if device.type == "cpu" else precision


@dataclass(frozen=True)
class Runtime:
    """A decided device and precision."""

    device: torch.device
    precision: str


def resolve_runtime(device: str | torch.device | None, precision: str, *,
                    training: bool = False, local_rank: int = 0) -> Runtime:
    """Decide the device (see `resolve_device`) and then the precision on it (see
    `resolve_precision`), refusing a combination that cannot run well."""
    chosen = resolve_device(device, precision, local_rank)
    return Runtime(chosen, resolve_precision(precision, chosen, training))
