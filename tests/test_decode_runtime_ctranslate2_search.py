"""The CTranslate2 runtime (decode/runtime/ctranslate2_search.py): in float32 it finds the
paper's search's best hypotheses where the two rank alike (no length penalty) and the best
is clear of the runner-up, orders its n-best by GNMT's score,
reports GNMT's score of the same log P, forces prefixes, blocks n-grams, cuts a sentence
at its own longest output, and leaves torch's thread count as it was."""

from __future__ import annotations

import pytest
import torch

from train_fixtures import reversal_pairs
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.runtime.ctranslate2_search import faster_threads
from transformer_nmt.decode.text.scoring import score_ids
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

LINES = [source for source, _ in reversal_pairs(24, seed=3, words=(2, 9))]


def _translator(model_file, engine: str, decode: DecodeConfig) -> Translator:
    return Translator.from_file(model_file, TranslatorOptions(decode, engine=engine,
                                                              precision="fp32", workers=1))


CLEAR = 0.1
"""How much better than the runner-up (log P, without length penalty) a best hypothesis
must be for the comparison to hold on every CPU class: nearer ties fall either way with
the kernels' last bits."""


@pytest.mark.parametrize("beam", [1, 4])
def test_fp32_without_length_penalty_finds_the_papers_hypotheses(trained_model_file, beam):
    decode = DecodeConfig(beam=beam, alpha=0.0, nbest=min(beam, 2), guard=False)
    ours = _translator(trained_model_file, "torch", decode)
    theirs = _translator(trained_model_file, "ctranslate2", decode)
    assert theirs.options.engine == "ctranslate2" and ours.options.engine == "torch"
    found = list(theirs.translate_nbest(LINES))
    reference = list(ours.translate_nbest(LINES))
    clear = [i for i, nbest in enumerate(reference)
             if len(nbest) == 1 or nbest[0].score - nbest[1].score > CLEAR]
    assert len(clear) > len(LINES) // 2  # the comparison covers most lines
    assert [found[i][0].tokens for i in clear] == [reference[i][0].tokens for i in clear]
    assert all(len(nbest) == min(beam, 2) for nbest in found)
    assert all([t.score for t in nbest] == sorted((t.score for t in nbest), reverse=True)
               for nbest in found)
    if beam > 1:  # greedy search's score leaves EOS's log P out (the module's docstring)
        scored = score_ids(ours, ours.source_ids(LINES), [nbest[0].tokens for nbest in found])
        assert [nbest[0].score for nbest in found] == pytest.approx(
            [pair.score for pair in scored], abs=1e-4)


def test_prefixes_n_grams_and_lengths_are_the_searchs(trained_model_file):
    decode = DecodeConfig(beam=4, guard=False, no_repeat_ngram=2, max_len_a=0.0, max_len_b=3)
    translator = _translator(trained_model_file, "ctranslate2", decode)
    ids = translator.source_ids(LINES)
    prefix = ids[0][:2]
    found = translator.ctranslate2.search(decode, ids[:2], [3, 3], [prefix, []])
    assert found[0][0].tokens[:2] == prefix
    for nbest in found:
        tokens = nbest[0].tokens
        assert len(tokens) <= 3
        bigrams = list(zip(tokens, tokens[1:]))
        assert len(bigrams) == len(set(bigrams))


def test_an_output_cut_at_its_sentences_limit_is_scored_as_it_ends(trained_model_file):
    # Two sentences in one batch: the longer limit lets the first run past its own.
    decode = DecodeConfig(beam=2, nbest=2, guard=False)
    translator = _translator(trained_model_file, "ctranslate2", decode)
    ids = translator.source_ids(LINES[:2])
    found = translator.ctranslate2.search(decode, ids, [2, 40], None)
    assert all(len(hypothesis.tokens) <= 2 for hypothesis in found[0])
    for nbest, source in zip(found, ids):
        scored = score_ids(translator, [source] * len(nbest), [h.tokens for h in nbest])
        assert [h.log_prob for h in nbest] == pytest.approx([p.log_prob for p in scored],
                                                            abs=1e-3)
        assert [h.score for h in nbest] == pytest.approx([p.score for p in scored], abs=1e-3)
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)


def test_torchs_thread_count_is_left_as_it_was(trained_model_file):
    before = torch.get_num_threads()
    translator = _translator(trained_model_file, "ctranslate2", DecodeConfig(guard=False))
    list(translator.translate(LINES[:2]))
    assert torch.get_num_threads() == before


def test_threads_and_the_asked_precision_reach_ctranslate2(trained_model_file):
    translator = Translator.from_file(trained_model_file, TranslatorOptions(
        DecodeConfig(guard=False), engine="ctranslate2", threads=1))
    assert translator.options.threads == 1 and translator.ctranslate2.cores == 1
    # 'auto' resolves to a torch precision for the PyTorch search, and to CTranslate2's
    # own choice for its search.
    assert translator.options.asked_precision == "auto"
    assert translator.ctranslate2.compute_type == "int8_float32"
    # One replica per core: two batches side by side get one core each, never more.
    assert translator.ctranslate2.translator(2).num_translators == 1


@pytest.mark.parametrize("one_is_faster", [True, False])
def test_a_lone_translator_takes_the_faster_of_one_thread_and_its_share(one_is_faster):
    made = []

    def make(threads: int) -> str:
        made.append(threads)
        return f"translator of {threads}"

    def seconds(translator: str) -> float:
        return 1.0 if (translator == "translator of 1") == one_is_faster else 2.0

    threads, translator = faster_threads(make, 2, seconds)
    assert (threads, translator) == ((1, "translator of 1") if one_is_faster
                                     else (2, "translator of 2"))
    assert faster_threads(make, 1, seconds) == (1, "translator of 1")
    assert made == [2, 1, 1]  # a share of one thread is not timed


def test_the_lone_translator_has_the_threads_its_search_measured(trained_model_file):
    translator = Translator.from_file(trained_model_file, TranslatorOptions(
        DecodeConfig(guard=False), engine="ctranslate2", precision="int8", threads=2))
    search = translator.ctranslate2
    lone = search.translator(1)
    assert search.threads_per_replica[1] in (1, 2)
    assert lone.num_translators == 1
    assert search.probe_seconds(lone) > 0
    # Two side by side get one thread each, without a search timed.
    search.translator(2)
    assert search.threads_per_replica[2] == 1
