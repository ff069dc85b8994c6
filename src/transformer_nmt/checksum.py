"""The checksum of a model's weights: the proof that a model file holds what was written.

SHA-256 over the tensors of the state dict in name order, each preceded by its name, dtype
and shape (so that the same bytes reshaped or read as another type do not collide), then
over the model's `calibration` when it has one, as canonical JSON (sorted keys). Every
model file, checkpoint and safetensors export stores it under CHECKSUM_KEY when written,
and every reader verifies it (transformer_nmt.model_file). Files written before checksums
were recorded have none: they still load, and get one when saved again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor

from transformer_nmt.errors import UserError

ALGORITHM = "sha256"
CHECKSUM_KEY = "checksum"
"""Where a model-file payload (and a safetensors directory's config.json) keeps it."""


def _tensor_bytes(tensor: Tensor) -> memoryview:
    """The bytes of `tensor` as stored, in row-major order, without copying a contiguous one."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def weights_checksum(state: Mapping[str, Tensor], calibration: Any = None) -> str:
    """'sha256:<hex>' of the tensors of `state` and of `calibration` (numbers and lists in
    dicts, or None for a model without one)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name]
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode("utf-8"))
        digest.update(_tensor_bytes(tensor))
    if calibration is not None:
        canonical = json.dumps(calibration, sort_keys=True, separators=(",", ":"))
        digest.update(b"calibration\0" + canonical.encode("utf-8"))
    return f"{ALGORITHM}:{digest.hexdigest()}"


def payload_checksum(payload: Mapping[str, Any]) -> str:
    """The checksum of a model-file payload: its weights ("model") and its calibration."""
    return weights_checksum(payload["model"], payload.get("calibration"))


def verify_checksum(payload: Mapping[str, Any], source: str | Path) -> bool:
    """True when `payload` (read from `source`) matches the checksum it records, False when
    it records none (written before checksums were); a one-line UserError naming `source`
    when it does not match."""
    recorded = payload.get(CHECKSUM_KEY)
    if recorded is None:
        return False
    if recorded != payload_checksum(payload):
        raise UserError(f"{source}: damaged model file: its weights do not match the checksum "
                        f"written with them ({str(recorded)[:23]}...); copy the file again "
                        "or use another checkpoint of the run")
    return True
