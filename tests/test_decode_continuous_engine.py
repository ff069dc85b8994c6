"""The continuous-batching engine (transformer_nmt.decode.continuous.engine): whatever the order and
timing of arrivals, every sentence gets exactly what the lockstep search gives it alone,
and a sentence that joins late waits no longer than one step."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_fixtures import sentences, translate_through_engine
from search_fixtures import EOS, SPECIAL, random_sources, tiny_transformer, unpadded
from serve_fixtures import FAST
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.continuous.engine import Engine, serves
from transformer_nmt.decode.search.ensemble import Ensemble
from transformer_nmt.decode.search.searches import search
from transformer_nmt.decode.text.translator import Translator, TranslationRequest
from transformer_nmt.decode.continuous.row_cache import SPANS, row_spans
from transformer_nmt.model_file import load_for_inference

SOURCES = random_sources(10, 40, seed=3, max_len=9)


def ending_model():
    """The tiny random Transformer with EOS made likelier, so that hypotheses end at
    many different steps (a random model otherwise runs every one to its limit)."""
    model = tiny_transformer()
    with torch.no_grad():
        model.tgt_embed.weight[EOS] *= 1.7
    return model


MODEL = ending_model()
SETTINGS = {
    "greedy": DecodeConfig(beam=1, max_len_a=1.0, max_len_b=10),
    "beam": DecodeConfig(beam=3, nbest=2, max_len_a=1.0, max_len_b=10),
    "beam, no length penalty": DecodeConfig(beam=2, alpha=0.0, max_len_a=1.0, max_len_b=10),
}


def alone(cfg: DecodeConfig, row: int):
    return search(MODEL, unpadded(SOURCES, row), cfg, SPECIAL)[0]


def padded(rows: list[int]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence([unpadded(SOURCES, row)[0] for row in rows],
                                           batch_first=True, padding_value=SPECIAL.pad)


def assert_same(found, expected) -> None:
    assert [hyp.tokens for hyp in found] == [hyp.tokens for hyp in expected]
    assert [hyp.score for hyp in found] == pytest.approx([hyp.score for hyp in expected],
                                                         abs=1e-4)
    assert [hyp.log_prob for hyp in found] == pytest.approx(
        [hyp.log_prob for hyp in expected], abs=1e-4)


def run(engine: Engine, arrivals: list[tuple[int, list[int]]]) -> tuple[dict, dict]:
    """Each group of rows joins after the given number of steps (counted from the
    previous group's arrival); returns every row's hypotheses and the steps it took
    from its arrival to its result."""
    found, took, joined = {}, {}, {}
    step = 0
    pending = list(arrivals)
    while pending or engine.rows:
        while pending and pending[0][0] <= 0:
            rows = pending.pop(0)[1]
            engine.add(padded(rows), rows)
            joined.update({row: step for row in rows})
        if pending:
            pending[0] = (pending[0][0] - 1, pending[0][1])
        for row, hypotheses in engine.step():
            found[row], took[row] = hypotheses, step + 1 - joined[row]
        step += 1
    return found, took


def test_the_model_ends_hypotheses_at_many_steps():
    lengths = {len(hyp.tokens) for row in range(len(SOURCES))
               for hyp in alone(SETTINGS["beam"], row)}
    assert len(lengths) >= 5  # ragged ends, which the engine must handle


arrivals = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)), min_size=1, max_size=10)


@pytest.mark.parametrize("name", list(SETTINGS))
@settings(max_examples=12, deadline=None)
@given(schedule=arrivals, order=st.permutations(range(len(SOURCES))))
def test_any_interleaving_of_arrivals_gives_each_sentence_its_search_alone(name, schedule,
                                                                            order):
    cfg = SETTINGS[name]
    groups, start = [], 0
    for wait, size in schedule:
        if start < len(order):
            groups.append((wait, list(order[start: start + size])))
            start += size
    if start < len(order):
        groups.append((0, list(order[start:])))
    found, _ = run(Engine(MODEL, cfg, SPECIAL), groups)
    assert sorted(found) == list(range(len(SOURCES)))
    for row in range(len(SOURCES)):
        assert_same(found[row], alone(cfg, row))


@pytest.mark.parametrize("name", ["greedy", "beam"])
def test_a_sentence_that_joins_late_takes_the_steps_it_takes_alone(name):
    cfg = SETTINGS[name]
    lengths = {row: max(len(hyp.tokens) for hyp in alone(cfg, row)) for row in range(10)}
    long, short = max(lengths, key=lengths.get), min(lengths, key=lengths.get)
    _, took_alone = run(Engine(MODEL, cfg, SPECIAL), [(0, [short])])
    # The short sentence arrives while the long one is half done.
    _, took = run(Engine(MODEL, cfg, SPECIAL), [(0, [long]), (lengths[long] // 2, [short])])
    assert took[short] == took_alone[short]


@given(st.lists(st.integers(1, 60), min_size=1, max_size=40), st.integers(1, 4))
def test_row_spans_cover_every_row_and_read_what_each_row_needs(lengths, group):
    for order in (sorted(lengths, reverse=True), lengths):
        spans = row_spans(order, group)
        assert spans[0][0] == 0 and spans[-1][1] == len(order) * group
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous
        for first, end, length in spans:
            assert first % group == 0 and end % group == 0
            assert length == max(order[first // group: end // group])
    descending = row_spans(sorted(lengths, reverse=True), group)
    assert len(descending) <= min(SPANS, len(set(lengths)))


def test_staggered_arrivals_read_in_several_spans():
    """The interleavings above also run through spans: sentences that joined at
    different steps read their keys and values as far as their own span needs."""
    cfg = SETTINGS["beam"]
    engine = Engine(MODEL, cfg, SPECIAL)
    spans_seen, found = [], {}
    for row in range(5):  # one sentence joins at each step
        engine.add(padded([row]), [row])
        found.update(dict(engine.step()))
        spans_seen.append(engine._cache.self_attention[0].spans)
    assert max(len(spans) for spans in spans_seen) > 1
    while engine.rows:
        found.update(dict(engine.step()))
    assert sorted(found) == list(range(5))
    for row in found:
        assert_same(found[row], alone(cfg, row))


def test_dropped_sentences_leave_and_the_others_are_unchanged():
    cfg = SETTINGS["beam"]
    engine = Engine(MODEL, cfg, SPECIAL)
    engine.add(padded([0, 1, 2, 3]), [0, 1, 2, 3])
    engine.step()
    engine.drop({1, 2})
    assert engine.rows == 2 * engine.k  # two sentences left, a beam each
    found = {}
    while engine.rows:
        found.update(dict(engine.step()))
    assert sorted(found) == [0, 3]
    for row in (0, 3):
        assert_same(found[row], alone(cfg, row))


def test_what_the_engine_cannot_do_goes_to_the_lockstep_searches(model_file):
    """Sampling, no-repeat n-grams, prefixes, constraints and ensembles need every row at
    one step (their rules read the whole batch's history), so `serves` says no."""
    model = load_for_inference(model_file).model
    assert serves(model, DecodeConfig(beam=4))
    assert not serves(model, DecodeConfig(sampling=True, nbest=2))
    assert not serves(model, DecodeConfig(no_repeat_ngram=3))
    assert not serves(model, DecodeConfig(), prefixes=True)
    assert not serves(model, DecodeConfig(), constraints=True)
    assert not serves(Ensemble([model, model]), DecodeConfig())
    translator = Translator(load_for_inference(model_file), FAST)
    assert translator.continuous(translator.begin(["a b c"]))
    assert not translator.continuous(translator.begin([TranslationRequest("a b", prefix="c")]))


def test_a_translators_engine_gives_its_translations(model_file):
    translator = Translator(load_for_inference(model_file), FAST)
    lines = sentences(6, seed=40)
    job = translator.begin(lines, translator.settings(replace(FAST.decode, beam=2)))
    engine = translator.new_engine(job.settings.decode)
    engine.add(translator.source_tensor([job.ids[i] for i in job.searched]), job.searched)
    found = {}
    while engine.rows:
        found.update(dict(engine.step()))
    results = translator.finish(job, job.searched, [found[i] for i in job.searched])
    expected = translator.translate_batch(lines, replace(FAST.decode, beam=2))
    assert [[t.text for t in result] for result in results] == \
        [[t.text for t in result] for result in expected]


def test_a_file_through_the_engine_translates_as_in_batches(model_file):
    """Sentences joining one engine as others end, a few at a time, get the batches'
    translations, n-best lists included."""
    lines = sentences(20, seed=41) + [""]
    decode = replace(FAST.decode, beam=2, nbest=2)
    translator = Translator(load_for_inference(model_file), replace(FAST, batch_size=3))
    expected = list(translator.translate_nbest(lines, decode))
    found = translate_through_engine(translator, lines, decode, at_once=3)
    assert [[(t.text, t.tokens) for t in result] for result in found] == \
        [[(t.text, t.tokens) for t in result] for result in expected]
    assert [t.score for result in found for t in result] == pytest.approx(
        [t.score for result in expected for t in result], abs=1e-4)
