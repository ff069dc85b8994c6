"""Which runtime a Translator takes (decode/runtime/choice.py): CTranslate2 under auto
wherever it can run the call, PyTorch with its reason otherwise, and a one-line refusal
when CTranslate2 was asked for and cannot run; every step rule a user sets takes effect on
each runtime, CTranslate2 honouring it or sending the call to the PyTorch search."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from decode_fixtures import sentences
from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.data.vocab import train_vocab
from transformer_nmt.decode.runtime import choice
from transformer_nmt.decode.runtime.choice import (choose_engine, compute_type, storage_type,
                                                   torch_reason)
from transformer_nmt.decode.search.ensemble import Ensemble
from transformer_nmt.decode.text.job import TranslationRequest
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload, save_model_file

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(get_preset("tiny").model, 32)


def test_auto_takes_ctranslate2_for_one_transformer_on_the_cpu(model):
    assert choose_engine("auto", model, CPU, "auto", batch_invariant=False) == "ctranslate2"
    assert choose_engine("ctranslate2", model, CPU, "fp32", batch_invariant=False) == \
        "ctranslate2"
    assert choose_engine("torch", model, CPU, "auto", batch_invariant=False) == "torch"


@pytest.mark.parametrize("precision, invariant, words", [
    ("auto", True, "batch invariance"), ("bf16", False, "no bf16 on the cpu")])
def test_auto_takes_torch_saying_why_once(model, caplog, precision, invariant, words):
    with caplog.at_level(logging.INFO, logger="transformer_nmt.decode.runtime.choice"):
        assert choose_engine("auto", model, CPU, precision, invariant) == "torch"
    (record,) = caplog.records
    assert words in record.getMessage()


def test_an_ensemble_decodes_in_torch(model):
    assert "ensemble" in torch_reason(Ensemble([model, model]), CPU, "fp32", False)


def test_ctranslate2_asked_for_where_it_cannot_run_is_one_line(model):
    with pytest.raises(UserError, match="--engine ctranslate2: batch invariance"):
        choose_engine("ctranslate2", model, CPU, "fp32", batch_invariant=True)
    with pytest.raises(UserError, match="engine must be one of auto, ctranslate2, torch"):
        choose_engine("onnx", model, CPU, "fp32", batch_invariant=False)


def test_precisions_map_to_compute_types_stored_as_computed(monkeypatch):
    # int8's 7 bits where products saturate: tests/test_decode_runtime_ct2_int8.py
    monkeypatch.setattr(choice, "products_saturate_here", lambda: False)
    assert compute_type(CPU, "fp32") == "float32"
    assert compute_type(CPU, "int8") == "int8_float32"
    assert storage_type(compute_type(CPU, "int8")) == "int8"
    assert storage_type(compute_type(CPU, "fp32")) == "float32"
    assert compute_type(torch.device("cuda"), "bf16") == "bfloat16"


# Every step rule a user can set, on each runtime: CTranslate2 honours it (its search runs
# the call) or the call goes to the PyTorch search; a rule that neither honours is refused.
LINES = ["the cat sits on the mat", "a dog", "one two three four five six"]
PREFIXED = [TranslationRequest(line, prefix="the cat") for line in LINES]
REQUIRED = [TranslationRequest(line, constraints=("garden",)) for line in LINES]


@pytest.fixture(scope="module")
def eager_model_file(tmp_path_factory) -> Path:
    """A tiny random model whose output layer favours EOS by far: it stops at once where
    nothing holds it, so that every length rule shows exactly."""
    directory = tmp_path_factory.mktemp("eager")
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(sentences(300)) + "\n", encoding="utf-8")
    vocab = train_vocab([corpus], directory / "spm", 60, threads=1)
    torch.manual_seed(0)
    eager = Transformer(replace(get_preset("tiny").model, dropout=0.0, max_positions=64,
                                logits_bias=True), len(vocab))
    with torch.no_grad():
        eager.logits_bias.zero_()
        eager.logits_bias[vocab.eos_id] = 8.0
    path = directory / "model.pt"
    save_model_file(model_payload(eager, vocab.to_bytes()), path)
    return path


@pytest.fixture(scope="module")
def translators(model_file, eager_model_file):
    """(model, runtime) -> its Translator in fp32 (the runtimes compare in one precision),
    made on first use."""
    made = {}

    def translator(which: str, engine: str) -> Translator:
        if (which, engine) not in made:
            path = eager_model_file if which == "eager" else model_file
            made[which, engine] = Translator.from_file(path, TranslatorOptions(
                DecodeConfig(guard=False), engine=engine, precision="fp32", workers=1))
        return made[which, engine]
    return translator


def _outputs(translator: Translator, lines, **fields) -> list[list[list[int]]]:
    """Each line's n-best token ids under DecodeConfig(guard=False, **fields)."""
    return [[translation.tokens for translation in nbest] for nbest in
            translator.translate_nbest(lines, DecodeConfig(guard=False, **fields))]


def _text(translator: Translator, tokens: list[int]) -> str:
    return translator.vocab.decode(tokens)


RULES = {
    # rule: (model, (lines, settings) with the rule, (lines, settings) without, what holds
    # of the outputs with the rule and not without)
    "min_len": ("eager", (LINES, dict(min_len=5)), (LINES, {}),
                lambda t, found: all(len(nbest[0]) == 5 for nbest in found)),
    "max_len_a, max_len_b (over min_len)": (
        "eager", (LINES, dict(min_len=9, max_len_a=0.0, max_len_b=3)), (LINES, dict(min_len=9)),
        lambda t, found: all(len(nbest[0]) == 3 for nbest in found)),
    "prefix": ("eager", (PREFIXED, {}), (LINES, {}),
               lambda t, found: all(_text(t, nbest[0]) == "the cat" for nbest in found)),
    "prefix beyond the maximum length": (
        "eager", (PREFIXED, dict(max_len_a=0.0, max_len_b=1)),
        (LINES, dict(max_len_a=0.0, max_len_b=1)),
        lambda t, found: all(_text(t, nbest[0]) == "the cat" for nbest in found)),
    "no_repeat_ngram": ("random", (LINES, dict(no_repeat_ngram=1)), (LINES, {}),
                        lambda t, found: all(len(set(nbest[0])) == len(nbest[0])
                                             for nbest in found)),
    "alpha": ("random", (LINES, dict(alpha=10.0)), (LINES, dict(alpha=-10.0)),
              lambda t, found: all(len(nbest[0]) > 10 for nbest in found)),
    "beam, nbest": ("random", (LINES, dict(beam=3, nbest=3)), (LINES, dict(beam=3)),
                    lambda t, found: all(len({tuple(h) for h in nbest}) == 3
                                         for nbest in found)),
    "sampling, topk (to PyTorch)": (
        "random", (LINES, dict(sampling=True, topk=1)), (LINES, dict(sampling=True)),
        lambda t, found: found == _outputs(t, LINES, beam=1)),
    "sampling, seed, temperature, topp (to PyTorch)": (
        "random", (LINES, dict(sampling=True, seed=7, temperature=3.0, topp=0.99)),
        (LINES, dict(sampling=True, seed=7, temperature=0.05)),
        lambda t, found: found != _outputs(t, LINES, beam=1)),
    "constraints (to PyTorch)": (
        "random", (REQUIRED, {}), (LINES, {}),
        lambda t, found: all("garden" in _text(t, nbest[0]) for nbest in found)),
}
TO_TORCH = {rule for rule in RULES if rule.endswith("(to PyTorch)")}


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
@pytest.mark.parametrize("rule", list(RULES))
def test_every_step_rule_takes_effect_on_every_runtime(translators, monkeypatch, rule, engine):
    which, (lines, fields), (plain_lines, plain_fields), holds = RULES[rule]
    translator = translators(which, engine)
    if translator.ctranslate2 is not None:
        calls = []
        search = translator.ctranslate2.search
        monkeypatch.setattr(translator.ctranslate2, "search",
                            lambda *args, **kw: calls.append(1) or search(*args, **kw))
    found = _outputs(translator, lines, **fields)
    assert holds(translator, found)
    assert not holds(translator, _outputs(translator, plain_lines, **plain_fields))
    if engine == "ctranslate2":
        calls.clear()
        _outputs(translator, lines, **fields)
        assert bool(calls) == (rule not in TO_TORCH)  # honoured there, or sent to PyTorch
        if rule in TO_TORCH:  # the same search as the PyTorch runtime's, in fp32
            assert found == _outputs(translators(which, "torch"), lines, **fields)


def test_batch_invariance_goes_to_pytorch_or_is_refused_in_one_line(model_file):
    options = TranslatorOptions(DecodeConfig(guard=False), precision="fp32", workers=1,
                                batch_invariant=True)
    assert Translator.from_file(model_file, options).options.engine == "torch"
    with pytest.raises(UserError, match="^cannot decode with --engine ctranslate2: batch "
                       "invariance was asked for, which only the PyTorch search promises; "
                       "use --engine torch or auto$"):
        Translator.from_file(model_file, replace(options, engine="ctranslate2"))
