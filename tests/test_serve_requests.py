"""Hostile JSON bodies (serve/requests.py, and its use by both APIs): nesting, numbers
that are not finite, lone surrogates and fields of the wrong type are each a 4xx with one
line naming the field, never an error inside the server."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from serve_fixtures import make_app, with_languages
from transformer_nmt.serve.requests import MAX_JSON_DEPTH, UnreadableJSON, read_json

KEY = "k3y"
LIBRE = {"q": "the dog runs", "source": "en", "target": "de", "api_key": KEY}


@pytest.fixture(scope="module")
def client(model_file, tmp_path_factory):
    served = with_languages(model_file, tmp_path_factory.mktemp("served"))
    with TestClient(make_app(served, api_key=KEY), raise_server_exceptions=False) as client:
        yield client


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def post(client, path: str, body: str):
    return client.post(path, content=body.encode(), headers={
        "Content-Type": "application/json", "X-API-Key": KEY} if path == "/v1/translate"
        else {"Content-Type": "application/json"})


def libre_with(field: str, raw_value: str) -> str:
    """LibreTranslate's body with `field` set to `raw_value`, written as raw JSON."""
    body = json.dumps({name: value for name, value in LIBRE.items() if name != field})
    return body[:-1] + f', "{field}": {raw_value}}}'


@pytest.mark.parametrize("path, body, names", [
    ("/translate", libre_with("q", nested(5000)), f"deeper than {MAX_JSON_DEPTH} levels"),
    ("/v1/translate", '{"text": ' + nested(5000) + "}", f"deeper than {MAX_JSON_DEPTH}"),
    ("/v1/translate", '{"text": ' + nested(MAX_JSON_DEPTH) + "}", f"deeper than {MAX_JSON_DEPTH}"),
    ("/translate", libre_with("alternatives", "1e400"), "'alternatives' is not a finite"),
    ("/translate", libre_with("alternatives", "Infinity"), "'alternatives' is not a finite"),
    ("/translate", libre_with("alternatives", "-Infinity"), "'alternatives' is not a finite"),
    ("/translate", libre_with("alternatives", "NaN"), "'alternatives' is not a finite"),
    ("/v1/translate", '{"text": "a", "alpha": 1e400}', "'alpha' is not a finite"),
    ("/translate", libre_with("q", '"a\\ud800 b"'), "'q' holds a lone surrogate"),
    ("/translate", libre_with("q", '["a", "\\udfff"]'), "'q.1' holds a lone surrogate"),
    ("/translate", libre_with("source", '"\\ud800"'), "'source' holds a lone surrogate"),
    ("/v1/translate", '{"text": "a\\ud800 b"}', "'text' holds a lone surrogate"),
    ("/v1/translate", '{"text": "a", "glossary": {"\\ud800": "x"}}',
     "'glossary' has a name holding a lone surrogate"),
    ("/translate", libre_with("api_key", "5"), "api_key must be a text"),
    ("/translate", libre_with("api_key", "[1]"), "api_key must be a text"),
    ("/translate", libre_with("api_key", '{"k": 1}'), "api_key must be a text"),
    ("/v1/translate", '{"text": "a", "beam": ' + "9" * 5000 + "}", "not valid JSON"),
])
def test_a_hostile_body_is_a_400_naming_the_field(client, path, body, names):
    answer = post(client, path, body)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]
    assert names in message and "\n" not in message


@pytest.mark.parametrize("body, message", [
    ("q=a&source=en&source=fr&target=de", "source must be a language code, not ['en', 'fr']"),
    ("q=a&source=en&target=de&api_key=k3y&api_key=k3y", "api_key must be a text"),
    ("q=a&source=en&target=de&alternatives=inf", "alternatives must be a number"),
])
def test_a_form_field_repeated_or_of_the_wrong_kind_is_a_400_naming_it(client, body, message):
    answer = client.post("/translate", content=body.encode(),
                         headers={"Content-Type": "application/x-www-form-urlencoded",
                                  "X-API-Key": KEY})
    assert answer.status_code == 400 and message in answer.json()["error"]


@pytest.mark.parametrize("path", ["/translate", "/detect"])
@pytest.mark.parametrize("content_type", ["application/json",
                                          "application/x-www-form-urlencoded", None])
def test_an_empty_body_to_libretranslate_is_its_own_missing_q(client, path, content_type):
    answer = client.post(path, content=b"", headers={"X-API-Key": KEY, **(
        {"Content-Type": content_type} if content_type else {})})
    assert (answer.status_code, answer.json()) == (
        400, {"error": "Invalid request: missing q parameter"})


def test_a_language_that_is_not_a_text_is_named(client):
    answer = post(client, "/translate", libre_with("target", "[1]"))
    assert answer.json() == {"error": "Invalid request: target must be a language code, "
                             "not [1]"}


def test_the_deepest_body_allowed_is_read():
    assert read_json(nested(MAX_JSON_DEPTH).encode()) == json.loads(nested(MAX_JSON_DEPTH))
    with pytest.raises(UnreadableJSON, match="deeper than"):
        read_json(nested(MAX_JSON_DEPTH + 1).encode())


def test_paired_surrogate_escapes_are_one_character_and_accepted():
    assert read_json(b'{"q": "\\ud83d\\ude00"}') == {"q": "\U0001F600"}


def test_the_server_still_translates_after_hostile_bodies(client):
    for body in (libre_with("q", nested(5000)), libre_with("api_key", "[1]")):
        post(client, "/translate", body)
    answer = client.post("/translate", json=LIBRE)
    assert answer.status_code == 200 and answer.json()["translatedText"]
