"""What a session of `nmt train` starts from (training/session_start.py): the data and
vocabulary it reads, a valid split required where validation needs one, the batch shapes
it pads to, and its model fresh from the seed, with a dropout stream of each process's
own. (Resuming and fine-tuning: tests/test_training_session.py,
tests/test_training_init_from.py.)"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from data_fixtures import make_split
from transformer_nmt.config import get_preset
from transformer_nmt.errors import UserError
from transformer_nmt.training.session_start import batch_shapes, fresh_model, read_data

TINY = get_preset("tiny")


def plan(data_dir, **train) -> SimpleNamespace:
    """What these functions read of a RunPlan: its data directory and settings."""
    return SimpleNamespace(data_dir=data_dir, model=TINY.model, train=replace(TINY.train,
                                                                              **train))


def test_the_splits_and_the_vocabulary_are_read(tiny_data):
    train_data, valid_data, vocab = read_data(plan(tiny_data))
    assert (len(train_data), len(valid_data), len(vocab)) == (240, 24, 64)


@pytest.mark.parametrize("train", [{"patience": 2}, {"valid_metric": "bleu"}])
def test_no_valid_split_is_refused_where_validation_needs_one(tmp_path, train):
    make_split(tmp_path)
    with pytest.raises(UserError, match="has no valid split, which valid_metric"):
        read_data(plan(tmp_path, **train))


def test_an_empty_train_split_is_refused(tmp_path):
    make_split(tmp_path, src=[], tgt=[])
    with pytest.raises(UserError, match="the train split has no pairs"):
        read_data(plan(tmp_path))


def test_batch_shapes_only_when_asked_and_covering_the_longest_pair(tiny_data):
    train_data, _, _ = read_data(plan(tiny_data))
    assert batch_shapes(plan(tiny_data).train, train_data, 400) is None
    shapes = batch_shapes(plan(tiny_data, shape_buckets=True).train, train_data, 400)
    longest = int(max(train_data.src_lengths.max(), train_data.tgt_lengths.max())) + 1
    assert shapes.padded(longest) >= longest and shapes.max_tokens == 400


@pytest.fixture
def random_state_kept():
    """fresh_model seeds torch's and numpy's global streams: theirs back afterwards."""
    numpy_state = np.random.get_state()
    with torch.random.fork_rng():
        yield
    np.random.set_state(numpy_state)


@pytest.mark.usefixtures("random_state_kept")
def test_the_model_follows_the_seed_and_each_rank_drops_out_its_own_units(tiny_data):
    _, _, vocab = read_data(plan(tiny_data))
    models, draws = [], []
    for seed, rank in ((1, 0), (1, 1), (2, 0)):
        models.append(fresh_model(plan(tiny_data, seed=seed), vocab, rank))
        draws.append(torch.rand(8))
    same_seed, other_rank, other_seed = (model.state_dict() for model in models)
    assert all(torch.equal(same_seed[name], other_rank[name]) for name in same_seed)
    assert not all(torch.equal(same_seed[name], other_seed[name]) for name in same_seed)
    assert not torch.equal(draws[0], draws[1])  # the dropout streams differ by rank
    fresh_model(plan(tiny_data, seed=1), vocab, 0)
    assert torch.equal(torch.rand(8), draws[0])  # and follow the seed
