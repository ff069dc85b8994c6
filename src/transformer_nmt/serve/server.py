"""Running `nmt serve` on its bound address (transformer_nmt.serve.listen): read the models
once, build the app, and serve it with uvicorn until SIGTERM or Ctrl+C, answering every
request already accepted before exiting; a client that stalls while sending a request is
cut off, and one that announces a chunk of body over the limit is refused at once."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import signal
import socket
from pathlib import Path
from typing import Sequence

import h11
import torch
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from transformer_nmt.decode.device.threads import EVENT_LOOP_THREADS
from transformer_nmt.decode.text.translator import TranslatorOptions
from transformer_nmt.serve.access import RedactCredentials
from transformer_nmt.serve.app import create_app
from transformer_nmt.serve.listen import OUT_OF_RESOURCES, url_address
from transformer_nmt.serve.metrics import ServerMetrics
from transformer_nmt.serve.middleware import CHUNK_LEFT
from transformer_nmt.serve.models import ModelPool, model_paths, scan_models
from transformer_nmt.serve.settings import ServeSettings

logger = logging.getLogger(__name__)

ACCEPT_FAILURES_INTERVAL_S = 10.0
"""While connections cannot be accepted for lack of file descriptors or memory, how often
the log says how many more failed."""
class DrainingServer(uvicorn.Server):
    """uvicorn's server that marks the app as shutting down the moment a signal arrives,
    so that /ready turns 503 while the requests in flight finish."""

    def __init__(self, config: uvicorn.Config, app) -> None:
        super().__init__(config)
        self.nmt_app = app

    def handle_exit(self, sig, frame) -> None:
        self.nmt_app.state.draining = True
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(AcceptFailures())
        await super().startup(sockets)
        # uvicorn names the address only of the sockets it bound itself; ours were bound
        # before the models loaded.
        if self.started:
            logging.getLogger("uvicorn.error").info(
                "serving on http://%s (press Ctrl+C to quit)",
                url_address(self.config.host, self.config.port))


class AcceptFailures:
    """The event loop's exception handler, which logs connections that cannot be accepted
    for lack of file descriptors or memory once, then how many more once per
    ACCEPT_FAILURES_INTERVAL_S while they go on. asyncio reports every failed accept(),
    by default as a traceback, and tries again a second later (ListeningSocket ends each
    try at its first failure): stalled connections under a low `ulimit -n` would bury
    everything else the log says. The connections wait in the kernel's queue and are
    accepted as open ones close, stalled ones at their deadlines. Other errors go to the
    loop's default handler."""

    def __init__(self, interval_s: float = ACCEPT_FAILURES_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.more = 0
        """Failures since the last line."""
        self.logging = False
        """Whether a failure was logged within the interval, so that the next are counted."""

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        error = context.get("exception")
        if not (isinstance(error, OSError) and error.errno in OUT_OF_RESOURCES
                and "accept" in context.get("message", "")):
            loop.default_exception_handler(context)
        elif self.logging:
            self.more += 1
        else:
            logger.warning("cannot accept new connections: %s; they wait until open "
                           "connections close (stalled ones at their deadlines)%s",
                           error.strerror, _raise_the_limit(error))
            self.logging = True
            loop.call_later(self.interval_s, self._summary, loop, error)

    def _summary(self, loop: asyncio.AbstractEventLoop, error: OSError) -> None:
        """How many more failed in the interval just ended; none ends the spell, and the
        next failure is logged at once."""
        if not self.more:
            self.logging = False
            return
        logger.warning("cannot accept new connections: %s; %d more failed %s in the last "
                       "%g s", error.strerror, self.more, "try" if self.more == 1 else "tries",
                       self.interval_s)
        self.more = 0
        loop.call_later(self.interval_s, self._summary, loop, error)


def _raise_the_limit(error: OSError) -> str:
    """What raises the process's limit when `error` is that it has too many files open."""
    if error.errno != errno.EMFILE:
        return ""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return f"; `ulimit -n` (now {limit}) raises the number of open files a server may hold"


class DeadlineConfig(uvicorn.Config):
    """uvicorn's configuration with what it lacks: a deadline on a request's headers."""

    def __init__(self, app, *, headers_timeout_s: float, **options) -> None:
        # h11's protocol always, never httptools' where that happens to be installed: the
        # server reads odd framing the one way its tests check. asyncio's event loop
        # always, never uvloop's: when out of file descriptors, asyncio leaves connections
        # queued, pauses accepting for a moment and reports it (AcceptFailures), where
        # libuv closes the queued connections at once and says nothing.
        super().__init__(app, http=HeadersDeadlineProtocol, loop="asyncio", **options)
        self.headers_timeout_s = headers_timeout_s

    def configure_logging(self) -> None:
        """uvicorn's logging, each of its handlers redacting credentials: its access log
        writes a request's whole URL, and LibreTranslate's clients may put api_key there.
        On the handlers, not the loggers, so that every uvicorn logger's records pass
        through it (a logger's filter sees only what is logged on that very logger)."""
        super().configure_logging()
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            for handler in logging.getLogger(name).handlers:
                handler.addFilter(RedactCredentials())


class HeadersDeadlineProtocol(H11Protocol):
    """uvicorn's HTTP protocol (h11's) that closes a connection whose next request has not
    sent all its headers within config.headers_timeout_s of the connection's opening or of
    the previous answer. uvicorn's keep-alive timeout stops at the first byte, and nothing
    bounds a new connection: a client sending one byte a second held it for ever.

    It also tells the app how much of a chunk of body is announced but not sent (the
    scope's middleware.CHUNK_LEFT), so that the body's limit refuses a chunk announced as
    ffffffffffffffff bytes at once, as it does a Content-Length as large, rather than
    wait for the body's deadline."""

    _headers_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._await_headers()

    def on_response_complete(self) -> None:
        self._await_headers()
        super().on_response_complete()

    def connection_lost(self, exc) -> None:
        if self._headers_deadline is not None:
            self._headers_deadline.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._note_chunk_left()

    def _note_chunk_left(self) -> None:
        left = chunk_left(self.conn)
        if left is None:  # nothing announced beyond what came, or an h11 that won't say
            left = 0
        cycle = self.cycle
        if cycle is None or cycle.response_started or left == cycle.scope.get(CHUNK_LEFT, 0):
            return
        cycle.scope[CHUNK_LEFT] = left
        # The app may be waiting for more of the body: it reads what there is (perhaps
        # nothing) and, at its limit's check, the chunk announced.
        cycle.message_event.set()

    def _await_headers(self) -> None:
        if self._headers_deadline is not None:
            self._headers_deadline.cancel()
        self._headers_deadline = self.loop.call_later(self.config.headers_timeout_s,
                                                      self._headers_late)

    def _headers_late(self) -> None:
        # A request in progress (a pipelined one included) has all its headers; an
        # answered one whose body never came counts as none. A connection upgraded to a
        # WebSocket belongs to another protocol now.
        waiting = self.cycle is None or self.cycle.response_complete
        if (waiting and self.transport.get_protocol() is self
                and not self.transport.is_closing()):
            self.transport.close()


def chunk_left(conn: h11.Connection) -> int | None:
    """How many bytes of the chunk of body that `conn` is reading the client announced
    but has not sent yet (0 between chunks); None when no chunked body is being read, or
    when this h11 no longer keeps the count where this looks. h11 has no public word for
    it: this reads its reader's private count. Without it the body's limit still holds,
    counting the bytes as they arrive, so a chunk announced over the limit is refused
    only once that much came, or at the body's deadline (tests/test_serve_server.py
    says which path the installed h11 takes)."""
    left = getattr(getattr(conn, "_reader", None), "_bytes_in_chunk", None)
    return left if isinstance(left, int) else None


def build_app(models: str | Path | Sequence[str | Path], options: TranslatorOptions,
              settings: ServeSettings, directories: Sequence[str | Path] = ()):
    """The app serving the model files `models` and those in `directories` (UserError
    naming the first that is not a model, or two of one pair), the first ones loaded."""
    paths = model_paths([models] if isinstance(models, (str, Path)) else models, directories)
    pool = ModelPool(scan_models(paths, keep=settings.max_models_loaded), options, settings,
                     ServerMetrics())
    pool.load_at_start()
    return create_app(pool)


def serve(sockets: list[socket.socket], models: str | Path | Sequence[str | Path],
          options: TranslatorOptions, settings: ServeSettings, log_level: str = "info",
          directories: Sequence[str | Path] = ()) -> None:
    """Serve the model files `models` and those in `directories` on `sockets`, bound to
    settings.host:settings.port (listen.listening_sockets), until stopped; closes them."""
    torch.set_num_threads(EVENT_LOOP_THREADS)  # this thread runs the event loop only
    try:
        app = build_app(models, options, settings, directories)
        config = DeadlineConfig(app, host=settings.host, port=settings.port,
                                log_level=log_level,
                                headers_timeout_s=settings.headers_timeout_s,
                                timeout_keep_alive=settings.keep_alive_s,
                                # Requests in flight get their full timeout to finish.
                                timeout_graceful_shutdown=int(settings.timeout_s) + 5)
        # uvicorn raises the signal it caught again once it has drained; by then SIGTERM
        # has been answered in full, so the process ends normally, with status 0.
        previous = signal.signal(signal.SIGTERM, _already_drained)
        try:
            DrainingServer(config, app).run(sockets=sockets)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        for sock in sockets:
            sock.close()


def _already_drained(signum, frame) -> None:
    """SIGTERM raised again by uvicorn after every request was answered: nothing left."""
