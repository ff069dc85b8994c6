"""LibreTranslate's parameters (serve/parameters.py): a JSON body, a URL-encoded form, a
multipart form, the query string of a POST without a body, LibreTranslate's precedence
between them, read from a request directly and as raw HTTP on /translate and /detect; and
the same refusals of hostile text in each as in JSON."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from starlette.requests import Request

from serve_fixtures import make_app
from transformer_nmt.serve.parameters import request_parameters

TEXT = "the cat sleeps on a warm roof"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
BOUNDARY = "nmt-test-boundary-7f3a"
KEY = "param-key"


def read(body: bytes, content_type: str | None = None, query: str = "") -> dict:
    """request_parameters of a POST with `body` and `query`, no server in between."""
    headers = [(b"content-type", content_type.encode())] if content_type else []
    scope = {"type": "http", "method": "POST", "path": "/translate", "headers": headers,
             "query_string": query.encode()}

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    return asyncio.run(request_parameters(Request(scope, receive)))


def test_a_request_is_read_from_its_query_and_whichever_body_it_has():
    assert read(b"", None, "q=a&q=b&source=en") == {"q": ["a", "b"], "source": "en"}
    assert read(b'{"q": "x", "source": "de"}', "application/vnd.api+json", "source=en&t=1") \
        == {"q": "x", "source": "de", "t": "1"}  # +json is JSON, and JSON wins
    assert read(b"q=x&source=de", None, "source=en") == {"q": "x", "source": "en"}
    assert read(b"q=&target=de", FORM) == {"q": "", "target": "de"}  # blanks kept


def test_what_cannot_be_read_is_a_400_naming_it():
    for body, content_type, says in [
            (b"[1, 2]", JSON, "the body must be a JSON object"),
            (b"{", JSON, "the body is not JSON"),
            (b"q=1", "multipart/form-data", "needs a boundary")]:
        with pytest.raises(HTTPException) as refused:
            read(body, content_type)
        assert refused.value.status_code == 400 and says in refused.value.detail


@pytest.fixture(scope="module")
def client(served_model):
    with TestClient(make_app(served_model, max_characters=2000)) as client:
        yield client


@pytest.fixture(scope="module")
def ours(client):
    """TEXT translated through our own API: what every LibreTranslate request must give."""
    answer = client.post("/v1/translate", json={"text": TEXT}).json()
    return answer["translations"][0]["text"]


def multipart(fields: list[tuple[str, bytes]],
              files: list[tuple[str, str, bytes]] = ()) -> tuple[bytes, dict[str, str]]:
    """A multipart/form-data body written out by hand, and its Content-Type header."""
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
             .encode() + value + b"\r\n" for name, value in fields]
    parts += [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; '
              f'filename="{filename}"\r\nContent-Type: text/plain\r\n\r\n'.encode()
              + value + b"\r\n" for name, filename, value in files]
    body = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


def post(client, path: str, body: bytes = b"", content_type: str | None = None,
         query: str = "", headers: dict[str, str] | None = None):
    all_headers = dict(headers or {})
    if content_type is not None:
        all_headers["Content-Type"] = content_type
    return client.post(path + (f"?{query}" if query else ""), content=body,
                       headers=all_headers)


def test_each_way_of_sending_the_parameters_translates_the_same(client, ours):
    pair = {"source": "en", "target": "de"}
    as_json = post(client, "/translate", b'{"q": "%s", "source": "en", "target": "de"}'
                   % TEXT.encode(), JSON)
    with_charset = post(client, "/translate", as_json.request.content,
                        "application/json; charset=utf-8")
    # Flask's is_json takes application/*+json as JSON too.
    vendor_json = post(client, "/translate", as_json.request.content,
                       "application/vnd.api+json")
    as_form = post(client, "/translate", f"q={quote(TEXT)}&source=en&target=de".encode(),
                   FORM)
    body, headers = multipart([("q", TEXT.encode()), ("source", b"en"), ("target", b"de")])
    as_multipart = post(client, "/translate", body, headers=headers)
    # What httpx (and requests) send for data= with files=: a multipart form.
    by_library = client.post("/translate", data={"q": TEXT, **pair},
                             files={"unused": ("note.txt", b"not a parameter")})
    query = f"q={quote(TEXT)}&source=en&target=de&format=text"
    in_the_url = post(client, "/translate", query=query)
    in_the_url_typed_json = post(client, "/translate", content_type=JSON, query=query)
    for answer in (as_json, with_charset, vendor_json, as_form, as_multipart, by_library,
                   in_the_url, in_the_url_typed_json):
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"translatedText": ours}


def test_the_query_string_wins_over_a_form_as_in_flasks_request_values(client, ours):
    form = f"q={quote(TEXT)}&source=en&target=fr".encode()
    assert post(client, "/translate", form, FORM, query="target=de").json() == {
        "translatedText": ours}
    refused = post(client, "/translate", f"q={quote(TEXT)}&target=de".encode(), FORM,
                   query="source=fr&target=de")
    assert refused.status_code == 400 and refused.json()["error"].startswith(
        "fr is not supported as source language")
    body, headers = multipart([("q", b"ignored"), ("source", b"en"), ("target", b"de")])
    assert post(client, "/translate", body, headers=headers,
                query=f"q={quote(TEXT)}").json() == {"translatedText": ours}


def test_a_json_body_wins_over_the_query_string_which_fills_in_what_it_lacks(client, ours):
    body = b'{"q": "%s", "source": "en", "target": "de"}' % TEXT.encode()
    assert post(client, "/translate", body, JSON, query="target=fr&q=other").json() == {
        "translatedText": ours}
    filled = post(client, "/translate", b'{"source": "en", "target": "de"}', JSON,
                  query=f"q={quote(TEXT)}")
    assert filled.json() == {"translatedText": ours}


def test_a_name_repeated_in_the_url_or_a_form_is_a_list(client, ours):
    query = f"q={quote(TEXT)}&q=&source=en&target=de"
    assert post(client, "/translate", query=query).json() == {"translatedText": [ours, ""]}
    body, headers = multipart([("q", TEXT.encode()), ("q", b""), ("source", b"en"),
                               ("target", b"de")])
    assert post(client, "/translate", body, headers=headers).json() == {
        "translatedText": [ours, ""]}


def test_the_api_key_may_come_in_any_of_them(served_model):
    with TestClient(make_app(served_model, api_key=KEY)) as client:
        pair = "source=en&target=de"
        assert post(client, "/translate", query=f"q=a&{pair}").status_code == 401
        assert post(client, "/translate", query=f"q=a&{pair}&api_key=no").status_code == 403
        assert post(client, "/translate", query=f"q=a&{pair}&api_key={KEY}"
                    ).status_code == 200
        body, headers = multipart([("q", b"a"), ("source", b"en"), ("target", b"de"),
                                   ("api_key", KEY.encode())])
        assert post(client, "/translate", body, headers=headers).status_code == 200
        assert post(client, "/translate", b'{"q": "a", "source": "en", "target": "de"}',
                    JSON, query=f"api_key={KEY}").status_code == 200
        assert post(client, "/detect", query="q=a").status_code == 401
        assert post(client, "/detect", query=f"q=a&api_key={KEY}").status_code == 200


def test_detect_takes_its_q_each_way(client):
    sentence = "the dog runs in the garden with a red ball"
    body, headers = multipart([("q", sentence.encode())])
    answers = [post(client, "/detect", b'{"q": "%s"}' % sentence.encode(), JSON),
               post(client, "/detect", f"q={quote(sentence)}".encode(), FORM),
               post(client, "/detect", body, headers=headers),
               post(client, "/detect", query=f"q={quote(sentence)}")]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        [found] = answer.json()
        assert found["language"] == "en"
    assert len({answer.text for answer in answers}) == 1


@pytest.mark.parametrize("path, body, content_type, query, names", [
    ("/translate", b"", None, "q=%FF&source=en&target=de", "the query string is not UTF-8"),
    ("/translate", b"q=%ED%A0%80&source=en&target=de", FORM, "", "the body is not UTF-8"),
    ("/detect", b"q=\xff", FORM, "", "the body is not UTF-8"),
    ("/translate", b'{"q": "\\ud800", "source": "en", "target": "de"}', JSON, "", "'q'"),
    ("/detect", b'{"q": ["a", 1e400]}', JSON, "", "'q.1'"),
    ("/detect", b'{"q": ' + b"[" * 40 + b"]" * 40 + b"}", JSON, "", "nests"),
    ("/translate", b"--x\r\nnot a multipart body", "multipart/form-data", "", "boundary"),
    ("/translate", b"garbage without any boundary",
     f"multipart/form-data; boundary={BOUNDARY}", "source=en&target=de",
     "the multipart body cannot be read"),
    ("/detect", b"x" * 10, JSON, "q=a", "not JSON"),
    ("/detect", b"", None, "q=" + "&".join(["a=1"] * 1001), "more than 1000 fields"),
])
def test_hostile_text_in_any_of_them_is_a_400_naming_what_is_wrong(
        client, path, body, content_type, query, names):
    answer = post(client, path, body, content_type, query)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]
    assert names in message and "\n" not in message


def test_a_multipart_field_that_is_not_utf8_is_named(client):
    body, headers = multipart([("q", b"caf\xe9"), ("source", b"en"), ("target", b"de")])
    answer = post(client, "/translate", body, headers=headers)
    assert answer.status_code == 400
    assert answer.json() == {
        "error": "Invalid request: the multipart field 'q' is not UTF-8"}


def test_a_file_part_is_no_parameter_as_in_flasks_request_values(client):
    body, headers = multipart([("source", b"en"), ("target", b"de")],
                              files=[("q", "q.txt", TEXT.encode())])
    answer = post(client, "/translate", body, headers=headers)
    assert answer.status_code == 400
    assert answer.json() == {"error": "Invalid request: missing q parameter"}
