"""How much decoding takes on at once: the sentences of a batch, and when a server's
batch may have every core. Each decision is made here, with its reason, and every caller
(the Translator, the server's batcher, the CLI's help) asks; how the cores are split
between what decodes at once is transformer_nmt.decode.device.threads's.
"""

from __future__ import annotations

from transformer_nmt.config import DecodeConfig

ROWS_IN_FLIGHT = 128
"""Decoder rows (sentences × hypotheses per sentence) decoded at once by default,
shared by the workers: the matrix products of a step are faster per row with more rows,
so greedy search gets more sentences than beam search (see `sentences_in_flight`)."""
FEWEST_SENTENCES_IN_FLIGHT = 32
"""The least `sentences_in_flight` gives, whatever the beam: beam 4's share of
ROWS_IN_FLIGHT, so that wider beams keep as many sentences as it does."""
MOST_SENTENCES_IN_FLIGHT = 96
"""The most `sentences_in_flight` gives: greedy search gets faster with more sentences at
once up to about this many, and hardly faster past it, while memory keeps growing (each
sentence keeps its encoder-decoder keys and values whatever its rows)."""


def sentences_in_flight(decode: DecodeConfig) -> int:
    """Sentences decoded at once by default, shared by the workers: ROWS_IN_FLIGHT rows,
    but at least FEWEST_SENTENCES_IN_FLIGHT sentences and at most MOST_SENTENCES_IN_FLIGHT.
    Beam search's hypotheses per sentence bring the count down; greedy search keeps the
    cores busiest with more sentences at once.
    """
    rows_per_sentence = decode.nbest if decode.sampling else decode.beam
    return min(max(ROWS_IN_FLIGHT // rows_per_sentence, FEWEST_SENTENCES_IN_FLIGHT),
               MOST_SENTENCES_IN_FLIGHT)


def batch_size(decode: DecodeConfig, workers: int) -> int:
    """Most sentences of one batch (TranslatorOptions.batch_size left None):
    `sentences_in_flight`, shared by the `workers` that decode at once."""
    return max(sentences_in_flight(decode) // workers, 1)


def decodes_alone(slot: int, busy_slots: int, waiting: bool, busy_elsewhere: int) -> bool:
    """Whether a server's batch in `slot` may have every core: it is the lead slot (0),
    the only one of `busy_slots` at work, nothing `waiting` would start beside it, and no
    other model's slot is busy (`busy_elsewhere`). Otherwise batches side by side share
    the cores (transformer_nmt.decode.device.threads)."""
    return slot == 0 and busy_slots == 1 and not waiting and not busy_elsewhere
