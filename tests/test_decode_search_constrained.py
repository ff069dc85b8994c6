"""Lexically constrained beam search with dynamic beam allocation
(transformer_nmt.decode.search.constrained), through the Translator and `nmt translate`."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch

from decode_fixtures import SHORT, make_model_file, sentences
from search_fixtures import SPECIAL, ToyModel, random_sources, tiny_transformer, unpadded
from transformer_nmt.cli import main
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.constrained import constrained_beam_search
from transformer_nmt.decode.search.searches import beam_search
from transformer_nmt.decode.text.translator import Translator, TranslationRequest, TranslatorOptions

CFG = DecodeConfig(beam=4, nbest=2, max_len_b=6)


def contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i: i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def random_constraints(batch: int, vocab: int, seed: int) -> list[list[list[int]]]:
    """0-3 phrases of 1-3 tokens per sentence (ids >= 4)."""
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randint(4, vocab, (int(torch.randint(1, 4, (1,), generator=generator)),),
                           generator=generator).tolist()
             for _ in range(int(torch.randint(0, 4, (1,), generator=generator)))]
            for _ in range(batch)]


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
@pytest.mark.parametrize("beam", [1, 4])
def test_every_constraint_appears_in_every_output(model, beam):
    src = random_sources(8, 12, seed=2)
    constraints = random_constraints(8, 12, seed=beam)
    assert any(len(phrases) >= 2 for phrases in constraints)
    cfg = replace(CFG, beam=beam, nbest=1)
    found = constrained_beam_search(model, src, constraints, cfg, SPECIAL)
    for phrases, hyps in zip(constraints, found):
        for hyp in hyps:
            assert all(contains(hyp.tokens, phrase) for phrase in phrases), (phrases, hyp.tokens)


def test_without_constraints_the_output_is_plain_beam_searchs():
    model = tiny_transformer()
    src = random_sources(6, 40, seed=3)
    plain = beam_search(model, src, CFG, SPECIAL)
    mixed = [[], [[7, 8]], [], [[9], [12, 13]], [], []]
    for constraints in [[[]] * 6, mixed]:
        found = constrained_beam_search(model, src, constraints, CFG, SPECIAL)
        for phrases, hyps, reference in zip(constraints, found, plain):
            if not phrases:  # a sentence without phrases is unaffected by its batch mates'
                assert [h.tokens for h in hyps] == [h.tokens for h in reference]
                assert [h.score for h in hyps] == pytest.approx([h.score for h in reference])


def test_a_batch_is_constrained_like_each_sentence_alone():
    model = tiny_transformer()
    src = random_sources(6, 40, seed=4)
    constraints = random_constraints(6, 40, seed=5)
    found = constrained_beam_search(model, src, constraints, CFG, SPECIAL)
    for row, hyps in enumerate(found):
        alone = constrained_beam_search(model, unpadded(src, row), constraints[row:row + 1],
                                        CFG, SPECIAL)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]


def test_phrases_longer_than_the_limit_end_the_search_without_them():
    model = tiny_transformer()
    src = random_sources(2, 12, seed=6)
    constraints = [[[5, 6, 7, 8, 9, 10, 11]], [[5]]]
    found = constrained_beam_search(model, src, constraints, CFG, SPECIAL, max_len_limit=4)
    assert all(len(hyps[0].tokens) <= 4 for hyps in found)
    assert 5 in found[1][0].tokens


@pytest.fixture(scope="module")
def short_model_file(tmp_path_factory):
    return make_model_file(tmp_path_factory.mktemp("short"), max_positions=16)


def test_translator_constraints_appear_and_unfittable_ones_warn(model_file, short_model_file,
                                                               caplog):
    # The PyTorch search, which alone searches constraints, for the free line alone too.
    options = TranslatorOptions(decode=replace(SHORT, beam=4, max_len_b=10), precision="fp32",
                                engine="torch")
    translator = Translator.from_file(model_file, options)
    lines = sentences(4, seed=13)
    requests = [TranslationRequest(lines[0], constraints=("green garden", "cat")),
                TranslationRequest(lines[1]), TranslationRequest(lines[2], constraints=("roof",)),
                TranslationRequest("", constraints=("cat",))]
    found = [hyps[0] for hyps in translator.translate_nbest(requests)]
    for request, translation in zip(requests[:3], found):
        for phrase in request.constraints:
            assert contains(translation.tokens, translator.vocab.encode(phrase))
    assert found[1].text == next(translator.translate([lines[1]]))
    short = Translator.from_file(short_model_file, options)
    with caplog.at_level(logging.WARNING):
        [[translation]] = short.translate_nbest([TranslationRequest(
            lines[0], constraints=("children play near old trees while their parents talk",))])
    assert "the constraints of input line 1 need" in caplog.text


def test_constraints_from_the_command_line(model_file, tmp_path, capsys):
    source, phrases = tmp_path / "in.txt", tmp_path / "terms.txt"
    source.write_text("the house\na dog runs\n", encoding="utf-8")
    phrases.write_text("green garden\tcat\n\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--constraints", str(phrases), "--beam", "4", "--max-len-b", "10",
                 "--format", "json"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "green" in first and "cat" in first
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--constraints", str(phrases), "--sampling"]) == 2
    assert "constraints need beam search" in capsys.readouterr().err


def test_with_word_pieces_a_phrase_ends_where_a_word_ends():
    model = tiny_transformer()
    src = random_sources(6, 40, seed=7)
    constraints = [[[7]], [[9, 12]], [[5]], [[20]], [[33]], [[11, 6]]]
    word_pieces = torch.zeros(40, dtype=torch.bool)
    word_pieces[torch.arange(4, 40, 2)] = True  # even ids continue a word
    found = constrained_beam_search(model, src, constraints, CFG, SPECIAL,
                                    word_pieces=word_pieces)
    for phrases, hyps in zip(constraints, found):
        for hyp in hyps:
            [phrase] = phrases
            ends = [i + len(phrase) for i in range(len(hyp.tokens))
                    if hyp.tokens[i: i + len(phrase)] == phrase]
            assert any(end == len(hyp.tokens) or not word_pieces[hyp.tokens[end]]
                       for end in ends), (phrase, hyp.tokens)
