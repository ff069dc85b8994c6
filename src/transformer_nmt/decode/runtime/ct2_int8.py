"""CTranslate2's int8 weights in 7 bits where its 8-bit products would saturate.

CTranslate2 multiplies int8 matrices as unsigned 8-bit activations by signed 8-bit
weights. An x86 CPU without VNNI instructions adds each pair of such products in 16
bits, which saturate once both factors are near their limits: on an AVX2-only AMD CPU
(oneDNN's products) the int8 model's log-probabilities drifted from float32's by far more
than rounding does. Weights of at most 63 in magnitude keep every pair within 16 bits
(2 x 255 x 63 < 2^15), the cure the int8 libraries themselves give for such CPUs
(PyTorch's dynamic quantization takes 7-bit activations there), and leave the products as
fast (bench/RESULTS.md, bench/ct2_int8_bits.py); MKL's products (CT2_USE_MKL=1) kept
them too, at a quarter of the speed on that CPU. An Intel CPU without VNNI, where
CTranslate2 takes MKL's products, gets the 7 bits too: it has the same instructions, and
none was measured.

`SEVEN_BIT` is the storage type (transformer_nmt.decode.runtime.choice's `storage_type`,
and `nmt export --quantization int8_7bit` for CPUs unknown) that
decode/runtime/ct2_spec.py converts so: the weights quantized here, each row scaled
to [-63, 63], and CTranslate2 told to store the spec as it is.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

SEVEN_BIT = "int8_7bit"
"""Our storage type of int8 weights in 7 bits (CTranslate2 knows only its own)."""
LIMIT = 63
"""The largest weight magnitude: 2 x 255 x LIMIT fits a signed 16-bit sum."""
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""x86 flags of instructions that add 8-bit products in 32 bits, which cannot saturate."""
CPUINFO = Path("/proc/cpuinfo")


def products_saturate(cpuinfo: str) -> bool:
    """Whether 8-bit products saturate on the CPU that `cpuinfo` (the text of Linux's
    /proc/cpuinfo) describes: an x86 CPU (it has a vendor_id) without VNNI."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
        if "vendor_id" in fields and "flags" in fields:
            break
    flags = fields.get("flags", "").split()
    return "vendor_id" in fields and not any(flag in flags for flag in VNNI_FLAGS)


@cache
def products_saturate_here() -> bool:
    """`products_saturate` for this machine's CPU; False where /proc/cpuinfo cannot be
    read (not Linux: CTranslate2's 8 bits stand)."""
    try:
        return products_saturate(CPUINFO.read_text(errors="replace"))
    except OSError:
        return False


def quantize_seven_bit(spec: Any) -> Any:
    """`spec` (a CTranslate2 model specification in float) in place and returned: each
    weight CTranslate2 would quantize (one with a `<name>_scale` beside it) as int8 rows
    scaled to [-LIMIT, LIMIT], with their scales, as CTranslate2 quantizes to 127."""
    from ctranslate2.specs.model_spec import visit_spec

    def quantize(layer: Any, name: str, value: Any) -> None:
        key = name.rsplit("/", 1)[-1]
        if not hasattr(layer, f"{key}_scale") or isinstance(value, str):
            return
        weight = np.asarray(value.numpy() if hasattr(value, "numpy") else value,
                            dtype=np.float32)  # (rows, columns)
        largest = np.abs(weight).max(axis=1)  # (rows,)
        # A row of zeros keeps scale 1; a tiny row keeps a scale float32 can hold.
        largest[largest == 0] = LIMIT
        largest = np.maximum(largest, np.float32(LIMIT) / np.finfo(np.float32).max)
        scale = (LIMIT / largest).astype(np.float32)
        setattr(layer, key, np.rint(weight * scale[:, None]).astype(np.int8))
        setattr(layer, f"{key}_scale", scale)

    visit_spec(spec, quantize)
    return spec
