"""LibreTranslate's API (serve/libretranslate.py): /translate as JSON and as a form, with
our API's translations, /languages and a pair the server does not translate; POST /detect
and source=auto in LibreTranslate's shapes, restricted to the languages the server
translates from, through raw requests and through LibreTranslate's own client; and a
clear refusal without py3langid (the detector itself: tests/test_serve_detect.py; the
ways of sending the parameters: tests/test_serve_parameters.py)."""

from __future__ import annotations

import asyncio
from unittest.mock import ANY

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from libretranslatepy import LibreTranslateAPI

from serve_fixtures import make_app, running_server
from transformer_nmt.serve import detect
from transformer_nmt.serve.detect import LanguageDetector
from transformer_nmt.serve.libretranslate import _detected_source

ENGLISH = "A man in a blue shirt is riding his bicycle down the street."
GERMAN = "Ein Mann in einem blauen Hemd fährt mit seinem Fahrrad die Straße hinunter."
FRENCH = "Un homme en chemise bleue descend la rue à vélo."


@pytest.fixture(scope="module")
def client(served_model):
    with TestClient(make_app(served_model, max_characters=500)) as client:
        yield client


def test_libretranslate_json_and_form_requests(client):
    text = "the cat sleeps on a warm roof"
    ours = client.post("/v1/translate", json={"text": text}).json()["translations"][0]["text"]
    as_json = client.post("/translate", json={"q": text, "source": "en", "target": "de",
                                              "format": "text"})
    assert as_json.json() == {"translatedText": ours}
    as_form = client.post("/translate", data={"q": text, "source": "auto", "target": "de"})
    assert as_form.json() == {"translatedText": ours,
                              "detectedLanguage": {"language": "en", "confidence": ANY}}
    listed = client.post("/translate", json={"q": [text, ""], "source": "en", "target": "de"})
    assert listed.json() == {"translatedText": [ours, ""]}
    with_alternatives = client.post("/translate", json={"q": text, "source": "en",
                                                        "target": "de", "alternatives": 1})
    assert len(with_alternatives.json()["alternatives"]) == 1


def test_libretranslate_languages_and_a_pair_the_model_does_not_serve(client):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []}]
    refused = client.post("/translate", json={"q": "a", "source": "fr", "target": "de"})
    assert refused.status_code == 400
    assert refused.json() == {"error": "fr is not supported as source language: this server "
                              "translates en-de"}
    assert client.post("/translate", json={"source": "en", "target": "de"}).json() == {
        "error": "Invalid request: missing q parameter"}


@pytest.fixture
def without_py3langid(monkeypatch):
    monkeypatch.setattr(detect, "LanguageIdentifier", None)


@pytest.mark.parametrize("text", ["", "   \n", "12345 67890", "!!! ..."])
def test_source_auto_and_detect_claim_no_language_for_a_text_without_letters(client, text):
    """LibreTranslate answers what it cannot detect with its default language and
    confidence 0; the classifier's prior (0.7 for English) claimed a language."""
    answer = client.post("/translate", json={"q": text, "source": "auto", "target": "de"})
    assert answer.json()["detectedLanguage"] == {"language": "en", "confidence": 0.0}
    if text:  # LibreTranslate's /detect refuses an empty q
        assert client.post("/detect", json={"q": text}).json() == [
            {"language": "en", "confidence": 0.0}]


def test_detect_answers_in_libretranslates_shape(client):
    [found] = client.post("/detect", json={"q": ENGLISH}).json()
    assert set(found) == {"language", "confidence"} and found["language"] == "en"
    assert isinstance(found["confidence"], float) and found["confidence"] > 90
    [other] = client.post("/detect", data={"q": GERMAN}).json()
    assert other["language"] == "en" and other["confidence"] < 5
    [both] = client.post("/detect", json={"q": [ENGLISH, GERMAN]}).json()
    mean = (found["confidence"] + other["confidence"]) / 2
    assert both["confidence"] == pytest.approx(mean, abs=0.1)


@pytest.mark.parametrize("body, status, message", [
    ({}, 400, "Invalid request: missing q parameter"),
    ({"q": ""}, 400, "Invalid request: missing q parameter"),
    ({"q": 3}, 400, "Invalid request: q must be a text or a list of texts"),
    ({"q": "a " * 300}, 413, "the request has 600 characters, more than the server's "
     "max_characters (500)"),
])
def test_detect_refuses_what_it_cannot_read(client, body, status, message):
    answer = client.post("/detect", json=body)
    assert (answer.status_code, answer.json()) == (status, {"error": message})


def test_source_auto_translates_from_the_only_source_and_says_what_it_detected(client):
    english = client.post("/translate", json={"q": ENGLISH, "source": "auto",
                                              "target": "de"}).json()
    plain = client.post("/translate", json={"q": ENGLISH, "source": "en", "target": "de"})
    assert english["translatedText"] == plain.json()["translatedText"]
    assert "detectedLanguage" not in plain.json()
    assert english["detectedLanguage"]["language"] == "en"
    assert english["detectedLanguage"]["confidence"] > 90
    # German text on an English-to-German server: still translated from English, the
    # only candidate, with a confidence that says it hardly is English.
    german = client.post("/translate", json={"q": GERMAN, "source": "auto", "target": "de"})
    assert german.status_code == 200
    assert german.json()["detectedLanguage"]["language"] == "en"
    assert german.json()["detectedLanguage"]["confidence"] < 5
    listed = client.post("/translate", json={"q": [ENGLISH, ENGLISH], "source": "auto",
                                             "target": "de"}).json()
    assert listed["detectedLanguage"] == [english["detectedLanguage"]] * 2


def test_source_auto_on_html_detects_the_text_not_the_markup(client):
    html = f"<div class='navigation-header'><p>{ENGLISH}</p></div>"
    answer = client.post("/translate", json={"q": html, "source": "auto", "target": "de",
                                             "format": "html"}).json()
    assert answer["detectedLanguage"] == client.post("/translate", json={
        "q": ENGLISH, "source": "auto", "target": "de"}).json()["detectedLanguage"]


def test_without_py3langid_detect_says_what_to_install_and_auto_still_translates(
        served_model, without_py3langid):
    with TestClient(make_app(served_model)) as client:
        refused = client.post("/detect", json={"q": ENGLISH})
        assert refused.status_code == 501
        assert refused.json() == {"error": detect.MISSING}
        translated = client.post("/translate", json={"q": ENGLISH, "source": "auto",
                                                     "target": "de"})
    assert translated.status_code == 200 and set(translated.json()) == {"translatedText"}


def test_without_py3langid_auto_among_several_sources_is_refused(without_py3langid):
    with pytest.raises(HTTPException) as refused:
        asyncio.run(_detected_source(LanguageDetector(["en", "de"]), ["en", "de"], [ENGLISH],
                                    False))
    assert refused.value.status_code == 501 and "py3langid" in refused.value.detail


def test_the_libretranslate_client_detects_and_translates_with_source_auto(served_model):
    with running_server(served_model) as (url, _):
        client = LibreTranslateAPI(url)
        [found] = client.detect(ENGLISH)
        assert found["language"] == "en" and found["confidence"] > 90
        [other] = client.detect(GERMAN)
        assert other["language"] == "en" and other["confidence"] < 5
        assert client.translate(ENGLISH, "auto", "de") == client.translate(ENGLISH, "en",
                                                                             "de")


def test_source_auto_over_the_size_limit_is_refused_before_detection(client):
    answer = client.post("/translate", json={"q": "a " * 300, "source": "auto",
                                             "target": "de"})
    assert answer.status_code == 413 and "max_characters (500)" in answer.json()["error"]
