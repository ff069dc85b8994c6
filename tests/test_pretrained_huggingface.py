"""Importing a Hugging Face MarianMTModel (pretrained/huggingface.py, `nmt import`): the
imported model computes the source's own logits and greedy outputs from the same text,
and is then translated, served and fine-tuned as a model of our own; what it cannot
represent is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the pretrained extra is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from pretrained_fixtures import (ENGLISH, assert_greedy_is_transformers,  # noqa: E402
                                 id_maps, make_marian_dir, marian_model_and_tokenizer,
                                 sentences)
from serve_fixtures import make_app  # noqa: E402
from train_fixtures import make_copy_task_data, tiny_overrides  # noqa: E402
from transformer_nmt.cli import main  # noqa: E402
from transformer_nmt.config import DecodeConfig  # noqa: E402
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions  # noqa: E402
from transformer_nmt.errors import UserError  # noqa: E402
from transformer_nmt.model_file import (load_for_inference, read_model_file,  # noqa: E402
                                        vocab_source)
from transformer_nmt.pretrained.write import import_model  # noqa: E402
from transformer_nmt.training.checkpoint import LAST  # noqa: E402
from transformer_nmt.training.session import train  # noqa: E402


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return make_marian_dir(tmp_path_factory.mktemp("marian") / "opus-mt-en-de")


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "en-de.pt"
    import_model("huggingface", marian_dir, out)
    return out


def test_the_source_text_becomes_the_same_ids(imported, marian_dir):
    _, tokenizer = marian_model_and_tokenizer(marian_dir)
    _, ours = id_maps(imported, marian_dir)
    translator = Translator.from_file(imported, TranslatorOptions(precision="fp32"))
    # Words the vocabulary never saw, in letters it knows. (A letter the source model does
    # not know is <unk> here; transformers looks its surface up in vocab.json, where a
    # target-language piece may have it.)
    lines = sentences(ENGLISH, 20, seed=5) + ["the gardens of the houses", "   the  roof "]
    expected = tokenizer(lines)["input_ids"]
    found = [ids + [translator.vocab.eos_id] for ids in translator.source_ids(lines)]
    assert [[ours[i] for i in row] for row in expected] == found


def test_the_imported_model_computes_the_sources_logits(imported, marian_dir):
    model, tokenizer = marian_model_and_tokenizer(marian_dir)
    theirs, ours = id_maps(imported, marian_dir)
    src = tokenizer(sentences(ENGLISH, 4, seed=2), padding=True, return_tensors="pt")
    tgt_in = torch.tensor([[model.config.decoder_start_token_id, 7, 9, 12, 5, 30]] * 4)
    with torch.no_grad():
        expected = model(**src, decoder_input_ids=tgt_in).logits  # (4, 6, their vocab)
        ours_model = load_for_inference(imported).model
        mapped_src = src["input_ids"].apply_(lambda i: ours[i])
        mapped_tgt = tgt_in.clone().apply_(lambda i: ours[i])
        mapped_tgt[:, 0] = load_for_inference(imported).vocab.bos_id
        found = ours_model(mapped_src, mapped_tgt)  # (4, 6, our vocab)
    bos = load_for_inference(imported).vocab.bos_id
    others = [i for i in range(len(theirs)) if i != bos]
    torch.testing.assert_close(found[..., others], expected[..., theirs][..., others],
                               atol=1e-5, rtol=1e-5)
    # Our bos, a second copy of the start token <pad>, takes no probability: the
    # distributions over the model's own vocabulary are the same.
    torch.testing.assert_close(found.log_softmax(-1)[..., others],
                               expected.log_softmax(-1)[..., theirs][..., others],
                               atol=1e-5, rtol=1e-5)
    assert found.softmax(-1)[..., bos].max() < 1e-30


def test_greedy_search_finds_the_sources_own_output(imported, marian_dir):
    assert_greedy_is_transformers(imported, marian_dir)


def test_nmt_import_writes_a_model_file_that_says_where_it_came_from(marian_dir, tmp_path,
                                                                      capsys):
    out = tmp_path / "en-de.pt"
    (marian_dir / "README.md").write_text("---\nlanguage: [en, de]\nlicense: cc-by-4.0\n---\n"
                                          "# opus-mt-en-de\n", encoding="utf-8")
    try:
        assert main(["import", "--from", "huggingface", str(marian_dir), "--out", str(out)]) == 0
    finally:
        (marian_dir / "README.md").unlink()
    printed = capsys.readouterr().out
    assert f"wrote {out} (en-de)" in printed and "licence: cc-by-4.0" in printed
    payload = read_model_file(out)
    assert payload["imported_from"]["license"] == "cc-by-4.0"
    assert (payload["src_lang"], payload["tgt_lang"]) == ("en", "de")
    assert main(["info", str(out)]) == 0
    assert "huggingface marian model" in capsys.readouterr().out
    # Never over an existing file without --force.
    assert main(["import", "--from", "huggingface", str(marian_dir), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["import", "--from", "huggingface", str(marian_dir), "--out", str(out),
                 "--force", "--src-lang", "en", "--tgt-lang", "xx"]) == 0
    assert read_model_file(out)["tgt_lang"] == "xx"


def test_the_imported_model_translates_and_serves_libretranslates_clients(imported):
    source = imported.parent / "in.txt"
    source.write_text("the dog runs in the garden\nthe cat sleeps\n", encoding="utf-8")
    assert main(["translate", "--model", str(imported), "--input", str(source), "--output",
                 str(imported.parent / "out.txt"), "--precision", "fp32"]) == 0
    assert len((imported.parent / "out.txt").read_text(encoding="utf-8").splitlines()) == 2
    with TestClient(make_app(imported)) as client:
        answer = client.post("/translate", json={"q": "the dog runs", "source": "en",
                                                 "target": "de"})
        assert answer.status_code == 200 and isinstance(answer.json()["translatedText"], str)


def test_the_imported_model_fine_tunes_on_a_corpus_of_its_vocabulary(imported, tmp_path):
    data = make_copy_task_data(tmp_path, vocab_source(imported))
    out = tmp_path / "run"
    train(out=out, data=data, init_from=str(imported), progress=False,
          overrides=tiny_overrides(max_steps=2, warmup_steps=1, lr_peak=1e-4))
    tuned = read_model_file(out / LAST)
    assert tuned["step"] == 2 and tuned["model_config"]["activation"] == "swish"


@pytest.mark.parametrize("change, message", [
    ({"share_encoder_decoder_embeddings": False}, "no target_vocab.json"),
    ({"scale_embedding": False}, "scale_embedding is False"),
    ({"activation_function": "tanh"}, "activation_function is 'tanh'"),
])
def test_what_the_model_cannot_represent_is_refused_in_one_line(marian_dir, tmp_path, change,
                                                                message):
    changed = tmp_path / "changed"
    changed.mkdir()
    for path in marian_dir.iterdir():
        (changed / path.name).write_bytes(path.read_bytes())
    config = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(UserError, match=message) as raised:
        import_model("huggingface", changed, tmp_path / "out.pt")
    assert "\n" not in str(raised.value) and not (tmp_path / "out.pt").exists()


def test_a_multilingual_model_takes_its_target_language_from_the_sources_first_token(
        tmp_path, capsys):
    marian = make_marian_dir(tmp_path / "opus-mt-en-mul", language_tokens=(">>fra<<", ">>spa<<"))
    imported = tmp_path / "en-mul.pt"
    import_model("huggingface", marian, imported)
    _, tokenizer = marian_model_and_tokenizer(marian)
    _, ours = id_maps(imported, marian)
    translator = Translator.from_file(imported, TranslatorOptions(precision="fp32"))
    lines = [">>fra<< the house is small", ">>spa<<  a dog runs in the garden",
             "the cat sleeps", ">>fra<<children play near old trees"]
    expected = tokenizer(lines)["input_ids"]
    found = [ids + [translator.vocab.eos_id] for ids in translator.source_ids(lines)]
    assert [[ours[i] for i in row] for row in expected] == found
    # Spaces before the token, which transformers would read as text, are only spaces.
    assert translator.source_ids(["  " + lines[0]]) == translator.source_ids(lines[:1])
    assert found[0][0] == translator.vocab.language_tokens[">>fra<<"] != found[1][0]
    assert_greedy_is_transformers(imported, marian, lines=lines)
    with pytest.raises(UserError, match="no target-language token >>deu<<; it has >>fra<<"):
        list(translator.translate([">>deu<< the house"]))
    source = tmp_path / "in.txt"
    source.write_text(">>fra<< the dog\n>>deu<< the cat\n", encoding="utf-8")
    assert main(["translate", "--model", str(imported), "--input", str(source), "--output",
                 str(tmp_path / "out.txt"), "--precision", "fp32"]) != 0
    assert "no target-language token >>deu<<" in capsys.readouterr().err
    # A client that names no pair may still type the token (test_serve_multilingual.py
    # has the server choose it by target).
    with TestClient(make_app(imported)) as client:
        answer = client.post("/v1/translate", json={"text": ">>deu<< the dog"})
        assert answer.status_code == 422 and ">>deu<<" in answer.json()["error"]
        answer = client.post("/v1/translate", json={"text": ">>spa<< the dog"})
        assert answer.status_code == 200


def test_a_directory_of_something_else_is_refused(marian_dir, tmp_path):
    changed = tmp_path / "multi"
    changed.mkdir()
    for path in marian_dir.iterdir():
        (changed / path.name).write_bytes(path.read_bytes())
    (changed / "source.spm").unlink()
    with pytest.raises(UserError, match="no source.spm"):
        import_model("huggingface", changed, tmp_path / "out.pt")
    with pytest.raises(UserError, match="no such directory"):
        import_model("huggingface", tmp_path / "missing", tmp_path / "out.pt")


def test_beam_search_finds_the_sources_own_output_under_the_same_stopping_rule(imported,
                                                                            marian_dir):
    """transformers' early_stopping=True is our rule (a sentence ends with k finished
    hypotheses); length_penalty 0 and alpha 0 both rank by the sum of log-probabilities."""
    model, tokenizer = marian_model_and_tokenizer(marian_dir)
    _, ours = id_maps(imported, marian_dir)
    lines = sentences(ENGLISH, 8, seed=4)
    with torch.no_grad():
        generated = model.generate(**tokenizer(lines, padding=True, return_tensors="pt"),
                                   num_beams=4, do_sample=False, max_new_tokens=20,
                                   early_stopping=True, length_penalty=0.0)
    translator = Translator.from_file(imported, TranslatorOptions(
        DecodeConfig(beam=4, alpha=0.0, max_len_a=0, max_len_b=20, guard=False), workers=1,
        precision="fp32"))
    found = [hyps[0].tokens for hyps in translator.translate_nbest(lines)]
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    assert found == [[ours[i] for i in row[1:].tolist() if i not in (pad, eos)]
                     for row in generated]


def test_ctranslate2_decodes_the_imported_model_as_we_do(imported, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    from export_fixtures import ctranslate2_tokens, our_tokens
    from transformer_nmt.export.ctranslate2 import export_ctranslate2

    lines = sentences(ENGLISH, 10, seed=6)
    decode = DecodeConfig(beam=1, alpha=0.0)
    exported = export_ctranslate2(imported, tmp_path / "ct2")
    assert ctranslate2_tokens(exported, imported, lines, decode) == our_tokens(imported, lines,
                                                                              decode)
