"""A multilingual model (OPUS-MT one-to-many, imported with `nmt import`) served and
translated by target language: the server offers each language it has a token for, and
puts the token before each sentence; `nmt translate --target-language` does the same."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the pretrained extra is not installed")
pytest.importorskip("pycountry", reason="the serve extra is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from pretrained_fixtures import make_marian_dir  # noqa: E402
from serve_fixtures import FAST, make_app  # noqa: E402
from transformer_nmt.cli import main  # noqa: E402
from transformer_nmt.decode.text.translator import Translator  # noqa: E402

TEXTS = ["the house is small", "a dog runs in the green garden"]


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("multilingual")
    marian = make_marian_dir(directory / "opus-mt-en-mul", language_tokens=(">>fra<<",
                                                                            ">>spa<<"))
    out = directory / "en-mul.pt"
    assert main(["import", "--from", "huggingface", str(marian), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def client(multilingual):
    with TestClient(make_app(multilingual)) as client:
        yield client


def with_token(model: Path, token: str, texts: list[str]) -> list[tuple[str, float]]:
    """(translation, score) of each of `texts` typed with `token` in front, as the server
    decodes them (its FAST options, fp32)."""
    found = Translator.from_file(model, FAST).translate_nbest([f"{token} {text}"
                                                               for text in texts])
    return [(best[0].text, best[0].score) for best in found]


def test_languages_lists_each_target_the_model_has_a_token_for(client):
    languages = {entry["code"]: entry for entry in client.get("/languages").json()}
    assert languages["en"]["targets"] == ["es", "fr"]
    assert languages["fr"]["name"] == "French" and languages["es"]["targets"] == []
    assert "de" not in languages  # the file's declared target is not one of its tokens
    models = client.get("/v1/models").json()
    assert [(pair["source"], pair["target"]) for pair in models["pairs"]] == [("en", "es"),
                                                                               ("en", "fr")]
    assert models["models"][0]["target_languages"] == ["es", "fr"]


def test_the_target_picks_the_token(client, multilingual):
    expected = {"fr": with_token(multilingual, ">>fra<<", TEXTS),
                "es": with_token(multilingual, ">>spa<<", TEXTS)}
    # This random model writes the same words for both tokens, but scores them apart.
    assert max(abs(fr[1] - es[1]) for fr, es in zip(expected["fr"], expected["es"])) > 0.05
    for target, translations in expected.items():
        answer = client.post("/translate", json={"q": TEXTS, "source": "en", "target": target})
        assert answer.status_code == 200
        assert answer.json()["translatedText"] == [text for text, _ in translations]
        answer = client.post("/v1/translate", json={"text": TEXTS, "source": "en",
                                                    "target": target, "alignments": True})
        for result, (text, score), source in zip(answer.json()["translations"],
                                                 translations, TEXTS):
            sentence = result["sentences"][0]
            assert result["text"] == text and ">>" not in text
            # fp32 both ways; the server rounds scores to 4 decimals
            assert sentence["score"] == pytest.approx(score, abs=1e-3)
            assert sentence["source"] == source  # the token is not the client's text
            words = len(source.split())
            assert all(0 <= word < words for word, _ in sentence["alignment"])


def test_each_sentence_of_a_text_gets_the_token(client, multilingual):
    text = "The house is small. The dog runs."
    expected = " ".join(text for text, _ in with_token(
        multilingual, ">>fra<<", ["The house is small.", "The dog runs."]))
    answer = client.post("/translate", json={"q": text, "source": "en", "target": "fr"})
    assert answer.json()["translatedText"] == expected


def test_a_target_without_a_token_gets_libretranslates_error(client):
    answer = client.post("/translate", json={"q": "the dog", "source": "en", "target": "de"})
    assert answer.status_code == 400
    assert list(answer.json()) == ["error"]
    assert "de is not supported as target language" in answer.json()["error"]
    assert "en-de (to es, fr)" in answer.json()["error"]


def test_nmt_translate_takes_the_target_language(multilingual, model_file, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text(f"{TEXTS[0]}\n\n{TEXTS[1]}\n", encoding="utf-8")
    typed = tmp_path / "typed.txt"
    typed.write_text(f">>fra<< {TEXTS[0]}\n\n>>fra<< {TEXTS[1]}\n", encoding="utf-8")
    outputs = {}
    for name, language in (("fr", "fr"), ("fra", "fra"), ("typed", None)):
        out = tmp_path / f"{name}.txt"
        given = ["--target-language", language] if language else []
        assert main(["translate", "--model", str(multilingual), "--input",
                     str(typed if language is None else source), "--output", str(out),
                     "--precision", "fp32", *given]) == 0
        outputs[name] = out.read_text(encoding="utf-8")
    assert outputs["fr"] == outputs["fra"] == outputs["typed"]
    assert outputs["fr"].split("\n")[1] == ""  # an empty line stays empty
    capsys.readouterr()
    for model, language, message in (
            (multilingual, "de", "target language de: the model has no token for it; it "
                                 "translates into es (>>spa<<), fr (>>fra<<)"),
            (model_file, "fr", "target language fr: the model is not multilingual")):
        assert main(["translate", "--model", str(model), "--input", str(source),
                     "--output", str(tmp_path / "refused.txt"), "--precision", "fp32",
                     "--target-language", language]) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / "refused.txt").exists()
