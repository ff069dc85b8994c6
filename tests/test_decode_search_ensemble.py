"""Ensembles (transformer_nmt.decode.search.ensemble) and Translator.from_files."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

from decode_fixtures import SHORT, WORDS, make_model_file, sentences
from transformer_nmt.cli import main
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.ensemble import Ensemble
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import load_for_inference

DECODE = replace(SHORT, beam=3, nbest=3, max_len_b=8)


def test_an_ensemble_of_a_model_with_itself_is_the_model(model_file):
    lines = sentences(6, seed=12)
    options = TranslatorOptions(decode=DECODE, alignments=True, token_scores=True,
                                precision="fp32", engine="torch")
    alone = list(Translator.from_files([model_file], options).translate_nbest(lines))
    pair = list(Translator.from_files([model_file, model_file], options).translate_nbest(lines))
    for one, two in zip(alone, pair):
        assert [t.tokens for t in one] == [t.tokens for t in two]
        assert [t.alignment for t in one] == [t.alignment for t in two]
        assert [t.score for t in one] == pytest.approx([t.score for t in two], abs=1e-4)


def test_the_ensemble_averages_log_probabilities_and_keeps_each_cache(tmp_path, model_file):
    other_file = make_model_file(tmp_path)  # same vocabulary (same corpus), other weights
    first = load_for_inference(model_file).model
    torch.manual_seed(1)
    second = load_for_inference(other_file).model
    with torch.no_grad():
        for parameter in second.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    ensemble = Ensemble([first, second])
    src = torch.tensor([[5, 9, 12, 3], [7, 8, 3, 0]])
    tgt = torch.tensor([[2, 6, 11], [2, 14, 5]])
    with torch.inference_mode():
        mean = ensemble.decode(tgt, ensemble.encode(src)).logits
        expected = sum(torch.log_softmax(m.decode(tgt, m.encode(src)).logits, -1)
                       for m in (first, second)) / 2
    torch.testing.assert_close(mean, expected)
    special = SpecialIds()
    # Uncached decoding (the whole prefix at every step) is the reference.
    cached = beam_search(ensemble, src, DECODE, special)
    uncached = beam_search(ensemble, src, DECODE, special, use_cache=False)
    assert [[h.tokens for h in hyps] for hyps in cached] == [
        [h.tokens for h in hyps] for hyps in uncached]
    greedy = DecodeConfig(beam=1, max_len_b=8)
    assert [h.tokens for h in greedy_search(ensemble, src, greedy, special)] == [
        h.tokens for h in greedy_search(ensemble, src, greedy, special, use_cache=False)]


def test_models_with_other_vocabularies_are_refused_in_one_line(tmp_path, model_file):
    other_model = make_model_file(tmp_path, words=[word.upper() for word in WORDS])
    with pytest.raises(UserError, match="has another vocabulary than"):
        Translator.from_files([model_file, other_model])


def test_ensembles_from_the_command_line(model_file, tmp_path, capsys):
    copy = tmp_path / "copy.pt"
    shutil.copy(model_file, copy)
    source = tmp_path / "in.txt"
    source.write_text("the house is small\na dog runs\n", encoding="utf-8")
    args = ["translate", "--input", str(source), "--beam", "2", "--max-len-b", "6",
            "--precision", "fp32", "--engine", "torch"]
    assert main(args + ["--model", str(model_file)]) == 0
    alone = capsys.readouterr().out
    assert main(args + ["--model", str(model_file), str(copy)]) == 0
    assert capsys.readouterr().out == alone


def test_nmt_evaluate_takes_an_ensemble(model_file, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps(
        {"format_version": 1, "src_lang": "en", "tgt_lang": "de"}), encoding="utf-8")
    (data / "test.en").write_text("\n".join(sentences(3, seed=8)) + "\n", encoding="utf-8")
    (data / "test.de").write_text("\n".join(sentences(3, seed=9)) + "\n", encoding="utf-8")
    copy = tmp_path / "copy.pt"
    shutil.copy(model_file, copy)
    common = ["evaluate", "--data", str(data), "--beam", "2", "--max-len-b", "5",
              "--precision", "fp32", "--engine", "torch", "--json",
              str(tmp_path / "scores.json")]
    assert main(common + ["--model", str(model_file), "--output", str(tmp_path / "one")]) == 0
    assert main(common + ["--model", str(model_file), str(copy),
                          "--output", str(tmp_path / "two")]) == 0
    assert (tmp_path / "one").read_text() == (tmp_path / "two").read_text()
    assert " + " in json.loads((tmp_path / "scores.json").read_text())["model"]
