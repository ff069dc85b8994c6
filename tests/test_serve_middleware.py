"""The server's ASGI middleware (serve/middleware.py), each around a stand-in app, no server
in between: one framing of the body, its size cap, its deadline, the JSON 500 of an error
the app did not expect (and through the whole app, counted in /metrics). The same through
a real server's sockets: tests/test_serve_server.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from serve_fixtures import make_app
from transformer_nmt.serve.middleware import (CHUNK_LEFT, INTERNAL_ERROR, BodyDeadline,
                                              BodyLimit, OneFraming, UnexpectedErrors)


def request(path: str = "/translate", **headers: str) -> dict:
    """The ASGI scope of a POST to `path` with `headers` (underscores for dashes)."""
    return {"type": "http", "method": "POST", "path": path, "headers": [
        (name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]}


class App:
    """A stand-in app: reads the whole body, then answers 200, or raises `error` (before
    or after its answer began)."""

    def __init__(self, error: Exception | None = None, after_start: bool = False) -> None:
        self.error, self.after_start, self.called = error, after_start, False

    async def __call__(self, scope, receive, send) -> None:
        self.called = True
        while (await receive()).get("more_body", False):
            pass
        if self.error is not None and not self.after_start:
            raise self.error
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if self.error is not None:
            raise self.error
        await send({"type": "http.response.body", "body": b"ok"})


def call(middleware, scope: dict, body: list[bytes] | None = None, ends: bool = True
         ) -> list[dict]:
    """What `middleware` sends for `scope` whose body comes in the pieces `body`; unless
    it `ends`, the client then stops sending (the receive waits for ever)."""
    pieces = list(body if body is not None else [b""])
    sent: list[dict] = []

    async def receive():
        if not pieces:
            await asyncio.Event().wait()
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces) or not ends}

    async def send(message):
        sent.append(message)

    asyncio.run(middleware(scope, receive, send))
    return sent


def refusal(sent: list[dict]) -> tuple[int, dict, str]:
    """(status, headers, error message) of a refusal the middleware sent itself."""
    start, body = sent
    return (start["status"], dict(start["headers"]),
            json.loads(body["body"])["error"])


def test_a_body_framed_both_ways_is_refused_with_the_connection_closed_the_app_never_called():
    app = App()
    status, headers, error = refusal(call(OneFraming(app), request(
        content_length="5", transfer_encoding="chunked")))
    assert (status, headers[b"connection"]) == (400, b"close") and not app.called
    assert "both a Content-Length and a Transfer-Encoding" in error
    assert call(OneFraming(App()), request(content_length="0"))[0]["status"] == 200


def test_a_body_over_its_limit_is_refused_by_its_length_or_as_its_chunks_are_announced():
    app = App()
    limited = BodyLimit(app, max_bytes=10, larger={"/translate_file": 100})
    status, _, error = refusal(call(limited, request(content_length="11")))
    assert status == 413 and error == ("the body is larger than the server's limit (10 "
                                       "bytes, from max_characters)") and not app.called
    status, _, error = refusal(call(limited, request(content_length="ten")))
    assert status == 400 and "Content-Length header is not a number" in error
    assert call(limited, request("/translate_file", content_length="50"))[0]["status"] == 200
    with pytest.raises(HTTPException) as refused:  # 4 bytes in, 7 more announced
        call(limited, {**request(transfer_encoding="chunked"), CHUNK_LEFT: 7}, [b"abcd"])
    assert refused.value.status_code == 413
    assert call(limited, {**request(transfer_encoding="chunked"), CHUNK_LEFT: 6},
                [b"abcd"])[0]["status"] == 200


def test_a_body_that_stops_arriving_is_a_408_that_closes_the_connection():
    with pytest.raises(HTTPException) as refused:
        call(BodyDeadline(App(), seconds=0.05), request(), [b"part"], ends=False)
    assert refused.value.status_code == 408 and refused.value.headers == {"Connection": "close"}
    assert "body_timeout_s (0.05 s)" in refused.value.detail
    assert call(BodyDeadline(App(), seconds=60), request(), [b"a", b"b"])[0]["status"] == 200


def test_an_unexpected_error_is_logged_and_a_json_500_unless_the_answer_began(caplog):
    status, _, error = refusal(call(UnexpectedErrors(App(RuntimeError("inside"))), request()))
    assert status == 500 and error == INTERNAL_ERROR
    assert "inside" in caplog.text and "Traceback" in caplog.text
    sent = call(UnexpectedErrors(App(RuntimeError("late"), after_start=True)), request())
    assert [message["status"] for message in sent] == [200]  # cut off, not answered twice


def test_an_error_the_app_did_not_expect_is_logged_and_answered_as_a_json_500(
        served_model, monkeypatch, caplog):
    async def broken(*args, **kwargs):
        raise RuntimeError("internal detail /secret/path")

    with TestClient(make_app(served_model), raise_server_exceptions=False) as client:
        monkeypatch.setattr(client.app.state.pool, "translate", broken)
        answer = client.post("/v1/translate", json={"text": "the dog runs"})
        assert answer.status_code == 500
        assert answer.json() == {"error": "the server failed to answer this request; its "
                                 "log says why"}
        assert 'route="/v1/translate",status="500"' in client.get("/metrics").text
    assert "internal detail /secret/path" in caplog.text and "Traceback" in caplog.text
