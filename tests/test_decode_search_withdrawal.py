"""Stopping a search whose requests went away (decode/search/withdrawal.py): inside
`stop_when`, the lockstep loop stops between two steps once the check is true; outside
it, and in other threads, searches run to their end."""

from __future__ import annotations

import threading

import pytest
import torch

from search_fixtures import SPECIAL, random_sources, tiny_transformer
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.searches import search
from transformer_nmt.decode.search.withdrawal import Withdrawn, stop_if_withdrawn, stop_when

CFG = DecodeConfig(beam=2, max_len_a=0.0, max_len_b=12, min_len=12)


def test_a_search_stops_at_the_step_after_its_check_turns_true():
    model, src = tiny_transformer(), random_sources(2, 40, seed=3)
    checks = []

    def withdrawn() -> bool:
        checks.append(1)
        return len(checks) > 3

    with torch.inference_mode(), stop_when(withdrawn), pytest.raises(Withdrawn):
        search(model, src, CFG, SPECIAL)
    assert len(checks) == 4  # three steps decoded, stopped before the fourth


def test_outside_the_block_or_in_another_thread_nothing_stops():
    model, src = tiny_transformer(), random_sources(2, 40, seed=3)
    with torch.inference_mode():
        expected = search(model, src, CFG, SPECIAL)
    found = []
    with stop_when(lambda: True):
        other = threading.Thread(target=lambda: found.append(search(model, src, CFG, SPECIAL)))
        other.start()
        other.join()
        with pytest.raises(Withdrawn):
            stop_if_withdrawn()
    stop_if_withdrawn()  # the block ended: no check
    assert [[h.tokens for h in hyps] for hyps in found[0]] == \
        [[h.tokens for h in hyps] for hyps in expected]
