"""One golden test: a seeded tiny model, trained for a fixed number of fp32 steps on the
toy reversal task, translates fixed sentences to fixed strings.

Every other test checks properties (cached equals uncached, beam 1 equals greedy, ...),
which a change can keep while still changing what the system outputs: the
initialisation, the batch order, the dropout masks, the learning rate, the loss, the
length penalty. This one pins the outputs themselves. The expected strings were observed
and found identical over three separate pytest processes on the 2-core CPU machine.

If a change is meant to alter them (a new initialisation, another batch order), check
that the properties still hold, then paste the new outputs here and say why in the
commit. If they change on another CPU only, its float kernels differ: these outputs come
from the x86-64 CPU build of torch with one thread.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.translator import Translator, TranslatorOptions
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.session import train

from train_fixtures import tiny_overrides

STEPS = 200
SOURCES = [
    "the small cat sees the dog",
    "a red car near the old tree",
    "child play with the blue dog",
    "green garden",
    "the house",
]


@contextlib.contextmanager
def one_thread():
    """Float sums may be split differently over more threads: pin the count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def translate(model_path: Path, lines: list[str], beam: int) -> list[str]:
    """The one call into the translation API, so that a change of its signature is made
    here only."""
    with one_thread():
        translator = Translator.from_file(
            model_path, TranslatorOptions(DecodeConfig(beam=beam), workers=1))
        return list(translator.translate(lines))


@pytest.fixture(scope="module")
def model_path(tiny_data, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("golden") / "run"
    with one_thread():
        train(out=run_dir, data=tiny_data, preset="tiny", device="cpu", progress=False,
              overrides=tiny_overrides(max_steps=STEPS, batch_tokens=512, seed=1))
    return run_dir / LAST


GREEDY = [
    "dog sees smalllllllllll",
    "near tree near red",
    "dog over",
    "green green garden green green green garden green green green green green garden green "
    "garden garden green g",  # cut at the length limit: source length + 50 subwords
    "runs",
]
BEAM_4 = [
    "sees dog cat",
    "tree near",
    "dog over",
    "green green garden green garden green green",
    "",  # the best hypothesis ends at once
]


def test_greedy_and_beam_translations_are_the_golden_ones(model_path):
    greedy = translate(model_path, SOURCES, beam=1)
    beam = translate(model_path, SOURCES, beam=4)
    assert greedy == GREEDY
    assert beam == BEAM_4
