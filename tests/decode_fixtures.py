"""Shared helpers of the decoding tests: tiny model files with a tiny BPE
vocabulary, and sentences for them.

The `model_file` fixture in conftest.py calls `make_model_file`.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.data.vocab import train_vocab
from transformer_nmt.decode.device import threads as threads_module
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload, save_model_file

WORDS = ("the house is small . a dog runs in the green garden , and the cat sleeps on "
         "a warm roof ; children play near old trees while their parents talk").split()

SHORT = DecodeConfig(beam=2, max_len_b=6)
"""Beam 2 and short outputs: fast searches that still exercise the beam."""


def sentences(count: int, seed: int = 0, words: Sequence[str] = WORDS) -> list[str]:
    """Random sentences of 3-12 words from `words`."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(count)]


def make_model_file(directory: Path, max_positions: int = 256,
                    words: Sequence[str] = WORDS) -> Path:
    """A tiny random Transformer with a 60-piece BPE vocabulary learned from sentences of
    `words`, saved as model.pt."""
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(sentences(300, words=words)) + "\n", encoding="utf-8")
    vocab = train_vocab([corpus], directory / "spm", 60, threads=1)
    torch.manual_seed(0)
    cfg = replace(get_preset("tiny").model, dropout=0.0, max_positions=max_positions)
    model = Transformer(cfg, len(vocab))
    with torch.no_grad():  # sharper distributions, so hypotheses differ
        model.tgt_embed.weight.mul_(4)
    path = directory / "model.pt"
    save_model_file(model_payload(model, vocab.to_bytes()), path)
    return path


def save_marian_like_model(path: Path, vocab_bytes: bytes, vocab_size: int, **changes
                           ) -> Transformer:
    """A random tiny Transformer with the fields OPUS-MT's models need (swish, positions
    in halves, a logits bias set to random values), and `changes`, saved at `path`."""
    cfg = replace(get_preset("tiny").model, **{**dict(activation="swish",
                                                      positional="sinusoidal-halves",
                                                      logits_bias=True), **changes})
    torch.manual_seed(0)
    model = Transformer(cfg, vocab_size).eval()
    model.logits_bias.copy_(torch.randn(vocab_size))
    save_model_file(model_payload(model, vocab_bytes), path)
    return model


def record_search_threads(monkeypatch) -> list[int]:
    """A list that receives torch's thread count at every batch the Translator searches,
    with the process's core count pretended to be 4."""
    monkeypatch.setattr(threads_module, "_PROCESS_THREADS", 4)
    seen: list[int] = []
    # What follows each batch's search, once per batch: the guard's fallback searches in it.
    finish = Translator.finish

    def recording(self, *args):
        seen.append(torch.get_num_threads())
        return finish(self, *args)

    monkeypatch.setattr(Translator, "finish", recording)
    return seen


FEATURES_BY_HAND = (1.0, 0.5, -0.5, 0.0, -0.2, -1.0, -2.0, -0.5)
"""Coefficients of a hand-made calibration that weighs every feature as a fitted one
would: likelier, surer, attentive outputs without repeats are better."""


def with_calibration(model_file: Path, path: Path, intercept: float = 0.0,
                     coefficients: Sequence[float] | None = None) -> Path:
    """A copy of `model_file` at `path` with a hand-made confidence calibration: every
    feature standardized around 0 with spread 1, these coefficients (default none) and
    this intercept (0 and no coefficients: every translation's confidence is 0.5)."""
    from transformer_nmt.decode.quality.confidence import FEATURES, Calibration
    from transformer_nmt.model_file import read_model_file

    payload = read_model_file(model_file)
    calibration = Calibration(
        (0.0,) * len(FEATURES), (1.0,) * len(FEATURES),
        tuple(coefficients or (0.0,) * len(FEATURES)), intercept,
        target="made by hand", threshold=50.0, split="valid", sentences=10, accepted=0.5)
    payload["calibration"] = calibration.to_dict()
    save_model_file(payload, path)
    return path
