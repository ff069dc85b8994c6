"""ASGI middleware of the server: one framing of the body, a cap on its size before it is
read, a deadline for it to arrive, a JSON 500 for whatever the app did not expect, a
request cancelled when its client goes away, and the request counters and latency
histogram of /metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Iterable

from fastapi import HTTPException
from starlette.routing import BaseRoute, Route

from transformer_nmt.serve.metrics import ServerMetrics

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "the server failed to answer this request; its log says why"
"""All a client learns of an error the app did not expect: nothing of its insides."""
CLIENT_GONE = 499
"""The status /metrics counts for a request whose client closed its connection before the
answer began (nginx's "client closed request"); the client gets nothing."""


def route_paths(routes: Iterable[BaseRoute]) -> frozenset[str]:
    """The paths of `routes` (the app's and its routers': API, LibreTranslate's, health,
    docs, the page), as RequestMetrics counts them; mounts are left out."""
    return frozenset(route.path for route in routes if isinstance(route, Route))


class HttpMiddleware:
    """ASGI middleware whose `handle` sees each HTTP request; everything else (lifespan
    events, websockets) goes to the app untouched."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send) -> None:
        raise NotImplementedError


class OneFraming(HttpMiddleware):
    """HTTP 400, with the connection closed, for a request that gives both a
    Content-Length and a Transfer-Encoding (RFC 9112, section 6.1). The server reads such
    a body by its Transfer-Encoding; a proxy in front that read it by its Content-Length
    would take the rest for another request (request smuggling), so the request is
    refused and nothing more is read from its connection."""

    async def handle(self, scope, receive, send) -> None:
        names = {name for name, _ in scope["headers"]}  # lower case, as ASGI says
        if b"content-length" in names and b"transfer-encoding" in names:
            await _refuse(send, 400, "the request has both a Content-Length and a "
                          "Transfer-Encoding header; send only one of them", close=True)
            return
        await self.app(scope, receive, send)


CHUNK_LEFT = "transformer_nmt.chunk_left"
"""The key of a request's scope under which the HTTP protocol (serve/server.py) notes how
many bytes of the chunk being read the client announced but has not sent yet."""


class BodyLimit(HttpMiddleware):
    """413 for a body over `max_bytes` (or, on a path of `larger`, its own limit), by its
    Content-Length, or while it streams in (a chunk counted as soon as it is announced),
    so that no request can make the server hold an unbounded body or wait for one."""

    def __init__(self, app, max_bytes: int, larger: dict[str, int] | None = None) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes
        self.larger = larger or {}

    async def handle(self, scope, receive, send) -> None:
        limit = self.larger.get(scope["path"], self.max_bytes)
        why = "for files" if scope["path"] in self.larger else "from max_characters"
        refusal = f"the body is larger than the server's limit ({limit} bytes, {why})"
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > limit:
            await _refuse(send, 413 if declared.isdigit() else 400,
                          refusal if declared.isdigit()
                          else "the Content-Length header is not a number")
            return
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            # A chunk counts as soon as it is announced, sent or not: a client announcing
            # more than the limit is answered now, not at the body's deadline. The
            # connection stays open (uvicorn reads on and drops the rest, until the
            # headers' deadline), so that a client still sending can read the answer.
            if received + scope.get(CHUNK_LEFT, 0) > limit:
                raise HTTPException(413, refusal)
            return message

        await self.app(scope, limited_receive, send)


class BodyDeadline(HttpMiddleware):
    """HTTP 408, with the connection closed, for a body that has not arrived in full
    within `seconds` of its request's headers: a body shorter than its Content-Length or
    a chunked one that never ends would otherwise hold the connection for ever."""

    def __init__(self, app, seconds: float) -> None:
        super().__init__(app)
        self.seconds = seconds

    async def handle(self, scope, receive, send) -> None:
        deadline = time.monotonic() + self.seconds
        body_done = False

        async def timed_receive():
            nonlocal body_done
            if body_done:  # later reads only wait for the client to go: no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except asyncio.TimeoutError:  # not the built-in TimeoutError before 3.11
                raise HTTPException(408, f"the body did not arrive within the server's "
                                    f"body_timeout_s ({self.seconds:g} s)",
                                    headers={"Connection": "close"}) from None
            body_done = not message.get("more_body", False)
            return message

        await self.app(scope, timed_receive, send)


async def _refuse(send, status: int, message: str, close: bool = False) -> None:
    """The one-line JSON error `message` with its `status`; with `close`, a Connection:
    close header, on which uvicorn closes the connection once it is sent."""
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status,
                "headers": headers + ([(b"connection", b"close")] if close else [])})
    await send({"type": "http.response.body", "body": body})


class UnexpectedErrors(HttpMiddleware):
    """Any exception the app lets out is logged with its traceback and answered as a JSON
    500 that says nothing internal (a response already begun is cut off), so that no
    request, however odd, gets a traceback or a plain-text page."""

    async def handle(self, scope, receive, send) -> None:
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            logger.exception("unexpected error answering %s %s", scope["method"],
                             scope["path"])
            if not started:
                await _refuse(send, 500, INTERNAL_ERROR)


class CancelWhenClientGoes(HttpMiddleware):
    """A request whose client closes its connection, once the body is in and before the
    answer begins, is cancelled: its sentences leave the queue and the decoders (the
    batcher withdraws a cancelled request's sentences) instead of being translated for
    nobody while other clients wait or are refused for a full queue. uvicorn only tells
    the app, through `receive`, and lets the handler run to its end."""

    async def handle(self, scope, receive, send) -> None:
        body_read = asyncio.Event()
        answering = False

        async def watched_receive():
            message = await receive()
            if not message.get("more_body", False):
                body_read.set()
            return message

        async def watched_send(message):
            nonlocal answering
            answering = True
            await send(message)

        async def client_gone() -> None:
            # Once the body is in, the next message the server has for this request is
            # http.disconnect: the client left, or (in any case) the answer was sent.
            await body_read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass

        work = asyncio.ensure_future(self.app(scope, watched_receive, watched_send))
        watch = asyncio.ensure_future(client_gone())
        try:
            await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
            if not work.done() and not answering:
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                await _gone(send)
                return
            await work
        finally:
            for task in (work, watch):
                task.cancel()


async def _gone(send) -> None:
    """The CLIENT_GONE answer, which only the metrics see: the server drops what is sent
    to a closed connection (a server that refuses it raises OSError, ignored)."""
    try:
        await send({"type": "http.response.start", "status": CLIENT_GONE, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    except OSError:
        pass


class RequestMetrics(HttpMiddleware):
    """Counts every HTTP request by route and status and times it. A path that is not one
    of `routes` is counted as 'other', so that scans of random paths cannot grow the
    metrics without bound."""

    def __init__(self, app, metrics: ServerMetrics, routes: frozenset[str]) -> None:
        super().__init__(app)
        self.metrics = metrics
        self.routes = routes

    async def handle(self, scope, receive, send) -> None:
        started = time.perf_counter()
        status = 500

        async def recording_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = scope["path"] if scope["path"] in self.routes else "other"
            self.metrics.observe_request(route, status, time.perf_counter() - started)
