"""Random JSON at every endpoint of the server (serve/app.py, requests.py,
libretranslate.py, parameters.py, html_text.py): values of any type, nesting and string,
bodies that are nearly valid requests (JSON, forms, multipart) and bodies that are no JSON
at all. Whatever comes, the answer is never a 5xx, a refusal is one line of JSON, and the
server still translates afterwards."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serve_fixtures import make_app, with_languages

KEY = "fuzz-key"
FUZZ = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

ROUTES = [("POST", "/v1/translate")] * 5 + [("POST", "/translate")] * 5 + [
    ("POST", "/detect")] * 2 + [
    ("GET", path) for path in ("/v1/model", "/languages", "/health", "/ready", "/metrics",
                               "/", "/static/index.html", "/static/../x", "/nowhere")] + [
    ("GET", "/translate"), ("POST", "/v1/model"), ("PUT", "/v1/translate")]
"""(method, path): mostly the two translation endpoints, where bodies are read."""
FIELDS = ["text", "beam", "alpha", "nbest", "alignments", "attention", "glossary", "q",
          "source", "target", "format", "api_key", "alternatives"]
VALID = [{"text": "the dog runs ."}, {"q": "the dog runs .", "source": "en", "target": "de"}]

strings = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00", "\x00", "<![CDATA[x]]> a",
                     "<p>the <b>dog</b> runs</p><!-- c --><?pi?>", "<b", "&amp;&#0;&#xd800;",
                     "html", "text", "en", "de", "auto", KEY, "the dog runs . a cat sleeps ."]),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(),
                    st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), strings)
values = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), strings), children, max_size=4)),
    max_leaves=12)
near_valid = st.builds(lambda base, changes: {**base, **changes}, st.sampled_from(VALID),
                       st.dictionaries(st.sampled_from(FIELDS), values, max_size=3))


def as_json(value) -> bytes:
    # NaN and Infinity as Python writes them; lone surrogates as \ud800 escapes.
    return json.dumps(value).encode()


def as_form(value: dict) -> bytes:
    # Repeated fields for a list, as HTML forms send them; lone surrogates as the bytes a
    # broken encoder would write.
    pairs = [(str(name), item if isinstance(item, list) else str(item))
             for name, item in value.items()]
    return urlencode(pairs, doseq=True, encoding="utf-8", errors="surrogatepass").encode()


def as_multipart(value: dict) -> bytes:
    # Each value's text as one part, lone surrogates as a broken encoder's bytes.
    return b"".join(b'--fuzz\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                    % (str(name).encode("utf-8", "surrogatepass"),
                       str(item).encode("utf-8", "surrogatepass"))
                    for name, item in value.items()) + b"--fuzz--\r\n"


JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data; boundary=fuzz"
bodies = st.one_of(  # (body, its Content-Type)
    st.tuples(near_valid.map(as_json), st.just(JSON)),
    st.tuples(near_valid.map(as_json), st.just(JSON)),
    st.tuples(values.map(as_json), st.sampled_from([JSON, None, "text/plain"])),
    st.tuples(near_valid.map(as_form), st.just(FORM)),
    st.tuples(near_valid.map(as_multipart), st.just(MULTIPART)),
    st.tuples(st.integers(1, 5000).map(lambda levels: b'{"q": ' + b"[" * levels
                                       + b"]" * levels + b"}"), st.just(JSON)),
    st.tuples(st.binary(max_size=40), st.sampled_from([JSON, FORM, MULTIPART, "text/plain",
                                                       None])),
)
api_keys = st.sampled_from([KEY, KEY, KEY, "wrong", "", None])


@pytest.fixture(scope="module")
def client(model_file, tmp_path_factory):
    served = with_languages(model_file, tmp_path_factory.mktemp("served"))
    app = make_app(served, api_key=KEY, max_characters=500, max_sentences=10)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@FUZZ
@given(route=st.sampled_from(ROUTES), body_and_type=bodies, api_key=api_keys,
       query=st.dictionaries(st.sampled_from(FIELDS), st.text(max_size=8), max_size=2))
def test_no_body_at_any_endpoint_gets_a_5xx(client, route, body_and_type, api_key, query):
    (method, endpoint), (body, content_type) = route, body_and_type
    headers = {name: value for name, value in (("Content-Type", content_type),
                                               ("X-API-Key", api_key)) if value is not None}
    answer = client.request(method, endpoint, content=body, headers=headers, params=query)
    assert answer.status_code < 500, (endpoint, body[:200], answer.text[:300])
    if answer.status_code >= 400:
        message = answer.json()["error"]
        assert isinstance(message, str) and "\n" not in message


def test_the_server_still_translates_after_the_fuzzing(client):
    answer = client.post("/v1/translate", json={"text": "the dog runs ."},
                         headers={"X-API-Key": KEY})
    assert answer.status_code == 200
    assert answer.json()["translations"][0]["sentences"][0]["source"] == "the dog runs ."
    assert client.get("/ready").status_code == 200
