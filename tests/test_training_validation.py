"""What training measures on the validation split (training/validation.py): every pair in one
process's batches exactly once, BLEU and chrF that reward a trained model and score its
own translations 100 however the sentences are batched, and the bounded and beam
variants."""

import shutil

import pytest
import torch

from transformer_nmt.config import PRESETS, DecodeConfig
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.manifest import SPM_MODEL, text_path
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import greedy_search, search
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.session import train
from transformer_nmt.training.validation import translation_scores, validation_batches

from train_fixtures import tiny_overrides

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """A tiny model trained for 100 steps on the toy task (a few seconds): far from
    good, but no longer emitting the same token everywhere."""
    out = tmp_path_factory.mktemp("validation") / "run"
    train(out=out, data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_steps=100, dropout=0.0))
    return load_for_inference(out / LAST).model


def one_by_one(model, data, vocab, beam=1):
    """Translations of every source sentence, each decoded alone (no padding), greedy
    or with a beam."""
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    translations = []
    for index in range(len(data)):
        source, _ = data.pair(index)
        src = torch.tensor([[int(token) for token in source] + [vocab.eos_id]])  # (1, src_len)
        if beam == 1:
            (found,) = greedy_search(model, src, special=special,
                                     max_len_limit=model.cfg.max_positions - 1)
        else:
            ((found, *_),) = search(model, src, DecodeConfig(beam=beam), special,
                                    max_len_limit=model.cfg.max_positions - 1)
        translations.append(vocab.decode(found.tokens))
    return translations


def test_validation_batches_share_every_pair_once_among_processes(tiny_data):
    data = load_split(tiny_data, "valid")
    shares = [list(validation_batches(data, 48, 256, seed=1, rank=rank, world_size=2))
              for rank in range(2)]
    assert len(shares[0]) == len(shares[1])  # every process runs as many batches
    seen = [index for share in shares for batch in share if batch is not None
            for index in batch.indices]
    assert sorted(seen) == list(range(len(data)))
    assert all(max(batch.src.numel(), batch.tgt_in.numel()) <= 48
               for share in shares for batch in share if batch is not None)


def test_a_trained_model_scores_above_an_untrained_one(tiny_data, trained):
    data, vocab = load_split(tiny_data, "valid"), Vocab.load(tiny_data / SPM_MODEL)
    torch.manual_seed(0)
    untrained = Transformer(PRESETS["tiny"].model, len(vocab), vocab.pad_id)
    before = translation_scores(untrained, data, vocab, 96, CPU, "fp32")
    after = translation_scores(trained, data, vocab, 96, CPU, "fp32")
    assert 0 < after["bleu"] <= 100 and after["bleu"] > before["bleu"]
    assert 0 < after["chrf"] <= 100 and after["chrf"] > before["chrf"]


@pytest.mark.parametrize("max_tokens", [48, 400])
def test_references_equal_to_the_greedy_translations_score_100(tiny_data, trained, tmp_path,
                                                               max_tokens):
    # Batches are sorted by length, so a translation put back at the wrong line, or one
    # changed by its batch's padding, would lower the score.
    data, vocab = load_split(tiny_data, "valid"), Vocab.load(tiny_data / SPM_MODEL)
    references = one_by_one(trained, data, vocab)
    assert len(set(references)) > 1
    copy = tmp_path / "data"
    shutil.copytree(tiny_data, copy)
    text_path(copy, "valid", data.tgt_lang).write_text(
        "".join(line + "\n" for line in references), encoding="utf-8")
    scores = translation_scores(trained, load_split(copy, "valid"), vocab, max_tokens, CPU,
                                "fp32")
    assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)


def test_a_bounded_validation_scores_the_first_sentences_only(tiny_data, trained, tmp_path):
    data, vocab = load_split(tiny_data, "valid"), Vocab.load(tiny_data / SPM_MODEL)
    references = one_by_one(trained, data, vocab)
    # Every reference after the fifth is wrong: only a score of the first five is 100.
    wrong = references[:5] + ["zzz qqq"] * (len(references) - 5)
    copy = tmp_path / "data"
    shutil.copytree(tiny_data, copy)
    text_path(copy, "valid", data.tgt_lang).write_text(
        "".join(line + "\n" for line in wrong), encoding="utf-8")
    bounded = translation_scores(trained, load_split(copy, "valid"), vocab, 96, CPU, "fp32",
                                 sentences=5)
    assert bounded["bleu"] == pytest.approx(100.0)
    assert translation_scores(trained, load_split(copy, "valid"), vocab, 96, CPU,
                              "fp32")["bleu"] < 100


def test_beam_validation_scores_the_beam_translations(tiny_data, trained, tmp_path):
    data, vocab = load_split(tiny_data, "valid"), Vocab.load(tiny_data / SPM_MODEL)
    copy = tmp_path / "data"
    shutil.copytree(tiny_data, copy)
    text_path(copy, "valid", data.tgt_lang).write_text(
        "".join(line + "\n" for line in one_by_one(trained, data, vocab, beam=4)),
        encoding="utf-8")
    scores = translation_scores(trained, load_split(copy, "valid"), vocab, 96, CPU, "fp32",
                                beam=4)
    # chrF: the beam's translations of this barely trained model are mostly shorter than
    # four words, which BLEU scores 0 whatever they are.
    assert scores["chrf"] == pytest.approx(100.0)


def test_the_models_training_mode_is_left_as_it_was(tiny_data, trained):
    data, vocab = load_split(tiny_data, "valid"), Vocab.load(tiny_data / SPM_MODEL)
    trained.train()
    translation_scores(trained, data, vocab, 96, CPU, "fp32")
    assert trained.training
    trained.eval()
    translation_scores(trained, data, vocab, 96, CPU, "fp32", beam=2)
    assert not trained.training
