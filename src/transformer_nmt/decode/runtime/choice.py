"""Which runtime a Translator searches with: CTranslate2 where it can run the model on
the device in the precision asked, the paper's PyTorch search otherwise, and why.

`auto` takes CTranslate2 when it is installed, the device is the CPU or a GPU its build
can use, the model is one Transformer CTranslate2 can represent, and nothing asked for
needs PyTorch: batch invariance (CTranslate2 cannot promise a sentence the numbers it
gets alone) or a precision CTranslate2 has not there (bf16 on a CPU). It says once, in
one line, why it took PyTorch (a warning, unless batch invariance was asked for). `ctranslate2` refuses in one line where it cannot run.
Per call, what only the PyTorch search does (terminology constraints; sampling, whose
samples are seeded per line whatever the batching) goes to it whichever runtime was
chosen (transformer_nmt.decode.text.translator).
"""

from __future__ import annotations

import logging
import torch
from torch import nn

from transformer_nmt.config import DECODE_ENGINES as ENGINES
from transformer_nmt.decode.runtime.ct2_int8 import SEVEN_BIT, products_saturate_here
from transformer_nmt.decode.runtime.ct2_spec import unsupported_reason
from transformer_nmt.errors import UserError

logger = logging.getLogger(__name__)


CPU_COMPUTE_TYPES = {"auto": "int8_float32", "fp32": "float32", "int8": "int8_float32"}
"""CTranslate2's compute type on a CPU for each precision a user names. 'auto' is int8:
faster than float32, and its translations scored as well where measured."""
GPU_COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16"}
"""The same on a GPU: 'auto' is what CTranslate2 itself finds fastest there."""


def ctranslate2_installed() -> bool:
    """Whether the ctranslate2 package imports."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return False
    return True


def _cuda_devices() -> int:
    import ctranslate2

    try:
        return ctranslate2.get_cuda_device_count()
    except RuntimeError:  # a CPU-only build, or CUDA's libraries missing
        return 0


def torch_reason(model: nn.Module, device: torch.device, precision: str,
                 batch_invariant: bool) -> str | None:
    """Why this Translator cannot search on CTranslate2, or None when it can; `precision`
    is the one asked for ('auto' included)."""
    if batch_invariant:
        return "batch invariance was asked for, which only the PyTorch search promises"
    if not ctranslate2_installed():
        return "ctranslate2 is not installed (pip install 'transformer-nmt[ctranslate2]')"
    reason = unsupported_reason(model)
    if reason is not None:
        return f"CTranslate2 cannot run this model: {reason}"
    if device.type == "cuda" and _cuda_devices() == 0:
        return "this CTranslate2 build cannot use the GPU"
    types = GPU_COMPUTE_TYPES if device.type == "cuda" else CPU_COMPUTE_TYPES
    if precision not in types:
        return f"CTranslate2 has no {precision} on the {device.type}"
    return None


def compute_type(device: torch.device, precision: str) -> str:
    """CTranslate2's compute type for `precision` on `device` (see torch_reason)."""
    return (GPU_COMPUTE_TYPES if device.type == "cuda" else CPU_COMPUTE_TYPES)[precision]


def storage_type(compute: str) -> str:
    """How the converted weights are stored for `compute`: as they are computed where
    CTranslate2 stores that type, so that loading converts nothing; int8 in 7 bits where
    this CPU's 8-bit products saturate (transformer_nmt.decode.runtime.ct2_int8)."""
    storage = {"int8_float32": "int8", "default": "float32"}.get(compute, compute)
    if storage == "int8" and products_saturate_here():
        return SEVEN_BIT
    return storage


def choose_engine(engine: str, model: nn.Module, device: torch.device, precision: str,
                  batch_invariant: bool) -> str:
    """'ctranslate2' or 'torch' for a Translator asked for `engine` (see the module
    docstring): UserError when `ctranslate2` was asked for and cannot run, a log line
    saying why when `auto` takes torch."""
    if engine not in ENGINES:
        raise UserError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "torch":
        return "torch"
    reason = torch_reason(model, device, precision, batch_invariant)
    if reason is None:
        return "ctranslate2"
    if engine == "ctranslate2":
        raise UserError(f"cannot decode with --engine ctranslate2: {reason}; "
                        "use --engine torch or auto")
    # Asked-for batch invariance is the user's choice; any other reason they should see.
    log = logger.info if batch_invariant else logger.warning
    log("decoding with PyTorch: %s", reason)
    return "torch"
