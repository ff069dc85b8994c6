"""The checksum of a model's weights (checksum.py): one value for the same tensors and
calibration, another for any change of their bytes, shapes, types, names or calibration."""

from __future__ import annotations

import pytest
import torch

from transformer_nmt.checksum import (CHECKSUM_KEY, payload_checksum, verify_checksum,
                                      weights_checksum)
from transformer_nmt.errors import UserError


@pytest.fixture
def state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"b.weight": torch.randn(4, 6, generator=generator),
            "a.bias": torch.randn(6, generator=generator)}


def test_it_is_sha256_in_name_order(state):
    checksum = weights_checksum(state)
    assert checksum.startswith("sha256:") and len(checksum) == len("sha256:") + 64
    assert weights_checksum(dict(reversed(list(state.items())))) == checksum


def test_one_flipped_byte_changes_it(state):
    before = weights_checksum(state)
    state["b.weight"].view(torch.uint8)[0, 5] ^= 0x01
    assert weights_checksum(state) != before


def test_shape_type_and_name_are_part_of_it(state):
    before = weights_checksum(state)
    reshaped = {**state, "b.weight": state["b.weight"].reshape(6, 4)}
    as_ints = {**state, "b.weight": state["b.weight"].view(torch.int32)}
    renamed = {"c.weight" if name == "b.weight" else name: tensor
               for name, tensor in state.items()}
    assert len({before, weights_checksum(reshaped), weights_checksum(as_ints),
                weights_checksum(renamed)}) == 4


def test_a_view_counts_as_the_tensor_it_shows(state):
    transposed = state["b.weight"].t().contiguous().t()  # not contiguous, same values
    assert weights_checksum({**state, "b.weight": transposed}) == weights_checksum(state)


def test_calibration_is_covered_as_canonical_json(state):
    calibration = {"temperature": 1.5, "bins": [0.1, 0.2]}
    plain = weights_checksum(state)
    calibrated = weights_checksum(state, calibration)
    assert calibrated != plain
    assert weights_checksum(state, {"bins": [0.1, 0.2], "temperature": 1.5}) == calibrated
    assert weights_checksum(state, {**calibration, "temperature": 1.6}) != calibrated


def test_verify_accepts_a_match_refuses_a_mismatch_and_passes_an_old_file(state):
    payload = {"model": state, "calibration": {"temperature": 2.0}}
    assert verify_checksum(payload, "old.pt") is False
    payload[CHECKSUM_KEY] = payload_checksum(payload)
    assert verify_checksum(payload, "model.pt") is True
    payload["calibration"] = {"temperature": 3.0}
    with pytest.raises(UserError, match=r"^model.pt: damaged model file: its weights do not "
                                        r"match the checksum") as caught:
        verify_checksum(payload, "model.pt")
    assert "\n" not in str(caught.value)
