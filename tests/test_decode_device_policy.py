"""How much decoding takes on at once (decode/device/policy.py): sentences per batch by the
search's rows, and when a server's batch has every core."""

from __future__ import annotations

from dataclasses import replace

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.device.policy import (FEWEST_SENTENCES_IN_FLIGHT, MOST_SENTENCES_IN_FLIGHT,
                                           ROWS_IN_FLIGHT, batch_size, decodes_alone,
                                           sentences_in_flight)


def test_sentences_in_flight_follow_the_rows_within_their_bounds():
    beam = DecodeConfig()
    assert sentences_in_flight(replace(beam, beam=4)) == ROWS_IN_FLIGHT // 4
    assert sentences_in_flight(replace(beam, beam=1)) == MOST_SENTENCES_IN_FLIGHT
    assert sentences_in_flight(replace(beam, beam=16)) == FEWEST_SENTENCES_IN_FLIGHT
    sampling = replace(beam, sampling=True, nbest=2)
    assert sentences_in_flight(sampling) == ROWS_IN_FLIGHT // 2


def test_the_workers_share_the_sentences_in_flight():
    decode = replace(DecodeConfig(), beam=4)
    assert batch_size(decode, 2) == sentences_in_flight(decode) // 2
    assert batch_size(decode, 1000) == 1


def test_only_a_lone_batch_in_the_lead_slot_with_nothing_beside_it_has_every_core():
    assert decodes_alone(0, 1, waiting=False, busy_elsewhere=0)
    assert not decodes_alone(1, 1, waiting=False, busy_elsewhere=0)
    assert not decodes_alone(0, 2, waiting=False, busy_elsewhere=0)
    assert not decodes_alone(0, 1, waiting=True, busy_elsewhere=0)
    assert not decodes_alone(0, 1, waiting=False, busy_elsewhere=1)
