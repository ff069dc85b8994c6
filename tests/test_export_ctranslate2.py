"""Export to CTranslate2 (export/ctranslate2.py): CTranslate2 decodes the exported model to
the very tokens we do greedily, and in beam search to ours or to translations our model
scores higher, both in float32."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from export_fixtures import (ctranslate2_log_probs, ctranslate2_tokens, our_tokens,
                             task_sentences)
from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.data.text import normalize
from transformer_nmt.decode.text.scoring import score_ids
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_dir import EXPORT_FORMAT_VERSION, EXPORT_VERSION_KEY
from transformer_nmt.model_file import (load_for_inference, model_payload, read_model_file,
                                        save_model_file)

ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

from transformer_nmt.export.ctranslate2 import export_ctranslate2  # noqa: E402


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def exported(trained_model_file, tmp_path_factory) -> Path:
    return export_ctranslate2(trained_model_file, tmp_path_factory.mktemp("ct2") / "model")


def test_ctranslate2_decodes_the_same_greedy_tokens_as_we_do(exported, trained_model_file,
                                                             tiny_data):
    lines = task_sentences(tiny_data)
    decode = DecodeConfig(beam=1, alpha=0.0)
    ours = our_tokens(trained_model_file, lines, decode)
    assert ctranslate2_tokens(exported, trained_model_file, lines, decode) == ours
    # Translations that differ from line to line: a model that says nothing would pass.
    assert len({tuple(tokens) for tokens in ours}) > len(lines) // 2


def test_ctranslate2s_beam_finds_our_translations_or_ones_our_model_scores_higher(
        exported, trained_model_file, tiny_data):
    """Beam search in both, where the stopping rules part: ours ends a sentence once it has
    k finished hypotheses (fairseq's rule), CTranslate2's can go on and find a longer one
    that scores higher. Which lines that happens on depends on the trained model, and so
    on the CPU's float kernels. Where the tokens differ, our model must score
    CTranslate2's translation at least as high as ours: a wrong export would translate
    worse by our model's own measure."""
    lines = task_sentences(tiny_data)
    decode = DecodeConfig(beam=4, alpha=0.0)
    ours = our_tokens(trained_model_file, lines, decode)
    theirs = ctranslate2_tokens(exported, trained_model_file, lines, decode)
    translator = Translator(load_for_inference(trained_model_file),
                            TranslatorOptions(decode, device="cpu", workers=1, precision="fp32"))
    parted = [i for i, (one, other) in enumerate(zip(ours, theirs)) if one != other]
    for i in parted:
        source = translator.vocab.encode(normalize(lines[i]))
        our_score, their_score = score_ids(translator, [source, source], [ours[i], theirs[i]])
        assert their_score.score >= our_score.score - 1e-4, (lines[i], ours[i], theirs[i])
    assert len(parted) <= len(lines) // 4, parted


def test_the_export_records_where_it_came_from(exported):
    record = json.loads((exported / "transformer_nmt.json").read_text())
    assert record["preset"] == "tiny" and record["training_steps"] == 300
    assert (record["src_lang"], record["tgt_lang"]) == ("en", "xx")
    assert record["quantization"] == "float32"
    assert record[EXPORT_VERSION_KEY] == EXPORT_FORMAT_VERSION
    assert {"model.bin", "config.json", "shared_vocabulary.json"} <= {
        path.name for path in exported.iterdir()}


@pytest.mark.parametrize("change", [dict(pre_norm=True), dict(positional="learned"),
                                    dict(tie_embeddings="none"), dict(d_k=4, d_v=4),
                                    dict(positional="learned", tie_positions=False),
                                    dict(positional="sinusoidal-fairseq",
                                         scale_embeddings=False)])
def test_other_architectures_decode_the_same_greedy_tokens(tmp_path, model_file, change):
    """Pre-norm (final norms), learned positions (a table like ours, or one per stack),
    untied embeddings, heads narrower than d_model / h, fairseq's table and unscaled
    embeddings, on random models: greedy tokens agree, the length limit included (random
    models rarely stop by themselves)."""
    vocab = load_for_inference(model_file).vocab
    torch.manual_seed(1)
    cfg = replace(get_preset("tiny").model, dropout=0.0, max_positions=64, **change)
    model = Transformer(cfg, len(vocab))
    with torch.no_grad():
        model.tgt_embed.weight.mul_(4)
    path = tmp_path / "model.pt"
    save_model_file(model_payload(model, vocab.to_bytes()), path)
    lines = ["the house is small .", "a dog runs in the green garden , and the cat sleeps"]
    decode = DecodeConfig(beam=1, alpha=0.0, max_len_b=8)
    out = export_ctranslate2(path, tmp_path / "ct2")
    assert ctranslate2_tokens(out, path, lines, decode) == our_tokens(path, lines, decode)


def with_architecture(model_path: Path, out: Path, seed: int = 2, **changes) -> Path:
    """The model at `model_path` saved to `out` with `changes` to its architecture, its
    weights kept, and a random logits bias (std 1) where it gets one."""
    payload = read_model_file(model_path)
    payload["model_config"] = {**payload["model_config"], **changes}
    if payload["model_config"].get("logits_bias"):
        generator = torch.Generator().manual_seed(seed)
        payload["model"] = {**payload["model"],
                            "logits_bias": torch.randn(payload["vocab_size"], generator=generator)}
    save_model_file(payload, out)
    return out


@pytest.mark.parametrize("activation", ["swish", "gelu"])
def test_marians_activation_position_layout_and_logits_bias_translate_and_score_as_ours(
        tmp_path, trained_model_file, tiny_data, activation):
    """What OPUS-MT's models need (issue 52): the FFN's activation goes across as
    CTranslate2's, the halves table as a table, the logits bias as the decoder
    projection's bias. On the trained model's weights, whose translations still follow
    their sources under these changes (a random model's repeat one token), and each
    change moves some of them, so that each counts."""
    lines = task_sentences(tiny_data)
    decode = DecodeConfig(beam=1, alpha=0.0)
    marian = dict(activation=activation, positional="sinusoidal-halves", logits_bias=True)
    path = with_architecture(trained_model_file, tmp_path / "marian.pt", **marian)
    ours = our_tokens(path, lines, decode)
    out = export_ctranslate2(path, tmp_path / "ct2")
    assert ctranslate2_tokens(out, path, lines, decode) == ours
    assert len({tuple(tokens) for tokens in ours}) > len(lines) // 2
    # Every token's log-probability too, which tells the exact GELU from CTranslate2's
    # tanh approximation (GELUTanh: 3e-3 apart; the same function: 3e-6).
    translator = Translator(load_for_inference(path),
                            TranslatorOptions(decode, device="cpu", workers=1, precision="fp32"))
    sources = [translator.vocab.encode(normalize(line)) for line in lines]
    for score, theirs in zip(score_ids(translator, sources, ours),
                             ctranslate2_log_probs(out, path, lines, ours)):
        assert score.token_scores == pytest.approx(theirs, abs=1e-4)
    for name, change in (("relu", dict(activation="relu")),
                         ("interleaved", dict(positional="sinusoidal")),
                         ("unbiased", dict(logits_bias=False))):
        other = with_architecture(trained_model_file, tmp_path / f"{name}.pt",
                                  **{**marian, **change})
        assert our_tokens(other, lines, decode) != ours, name


def test_heads_with_values_wider_than_keys_are_refused_in_one_line(tmp_path, model_file):
    vocab = load_for_inference(model_file).vocab
    cfg = replace(get_preset("tiny").model, d_k=4, d_v=8)
    path = tmp_path / "model.pt"
    save_model_file(model_payload(Transformer(cfg, len(vocab)), vocab.to_bytes()), path)
    with pytest.raises(UserError, match="d_k = 4 but d_v = 8") as caught:
        export_ctranslate2(path, tmp_path / "ct2")
    assert "\n" not in str(caught.value) and not (tmp_path / "ct2").exists()
