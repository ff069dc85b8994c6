"""The ASGI app of `nmt serve` (FastAPI): our API under /v1, LibreTranslate's beside it,
health and readiness, Prometheus metrics, the web page, and one-line JSON errors."""

from __future__ import annotations

import asyncio
import mimetypes
import time
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from transformer_nmt.config import ALPHA_RANGE
from transformer_nmt.errors import UserError
from transformer_nmt.version import __version__
from transformer_nmt.serve.access import presented_key, redact_credentials, require_key
from transformer_nmt.serve.batcher import QueueFull
from transformer_nmt.serve.file_store import FileStore
from transformer_nmt.serve.detect import LanguageDetector
from transformer_nmt.serve.libretranslate import libretranslate_routes
from transformer_nmt.serve.middleware import (BodyDeadline, BodyLimit, CancelWhenClientGoes,
                                              OneFraming, RequestMetrics, UnexpectedErrors,
                                              route_paths)
from transformer_nmt.serve.metrics import ServerMetrics
from transformer_nmt.serve.models import ModelPool, ModelUnavailable
from transformer_nmt.serve.pairs import NoRoute, PairRoutes, Route
from transformer_nmt.serve.requests import CheckedJSONRoute, TranslateRequest
from transformer_nmt.serve.service import CONFIDENCE_MEANING, BadOption, Search, TooLarge
from transformer_nmt.serve.settings import ServeSettings

try:  # the `files` extra's format libraries; without them no /translate_file
    from transformer_nmt.serve.files_api import FILE_FORMATS, FILE_LIMITS, file_routes
except ImportError:
    file_routes, FILE_FORMATS = None, ()

UNION_MEMBERS = {"str", "int", "float", "bool", "list[str]"}
"""Type names pydantic puts into an error's location for a field of several types."""
FASTAPI_UNREADABLE_BODY = "There was an error parsing the body"
"""FastAPI's message for a body it cannot decode (invalid UTF-8): said more usefully."""
BATCHER_DEAD = "its batcher stopped (the server's log says why)"
"""Why a server whose batching loop died refuses: no request would ever be decoded."""
PAIR_MEANING = (
    "On a server with several models, `source` and `target` choose the pair (GET "
    "/v1/models lists them); a pair without a model of its own is translated through a "
    "pivot language by two, and the answer's `pivot` names it. Through a pivot, each "
    "text's `pivot` holds the text in that language and the first model's confidence, "
    "and its `sentences` are the pivot's; alignments are composed over the whole text "
    "(the text's `alignment`); attention maps and glossaries are refused.")
"""How /v1/translate chooses a model, for the API's documentation."""
STATIC = files("transformer_nmt.serve") / "static"
"""The web page's files, shipped in the package: no CDN, so it works offline."""


# The page's scripts are ES modules, which browsers run only when served with a
# JavaScript type; StaticFiles takes types from the system's table, which on some
# (Windows' registry) says text/plain for .js.
mimetypes.add_type("text/javascript", ".js")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one-line JSON error every refusal gets, any credential it quotes redacted."""
    return JSONResponse({"error": redact_credentials(message)}, status_code=status,
                        headers=headers)


def validation_error(exc: RequestValidationError) -> tuple[int, str]:
    """(status, one line) for a body FastAPI could not read: 400 for text that is not
    JSON (invalid UTF-8 included), 422 naming the field for a wrong or unknown one, or
    saying that there is no body."""
    # Of a union's errors, the deepest names the culprit: ('text', 'list[str]', 1).
    first = max(exc.errors(), key=lambda found: len(found.get("loc", ())), default={})
    kind = first.get("type", "")
    if kind == "json_invalid":
        return 400, "the body is not valid JSON in UTF-8: " + str(first.get("ctx", {}).get(
            "error", first.get("msg", "")))
    # Union members add their type to the location ('text', 'list[str]', 0): drop it.
    field = ".".join(str(part) for part in first.get("loc", ())
                     if part != "body" and str(part) not in UNION_MEMBERS)
    if kind == "extra_forbidden":
        return 422, f"unknown field {field!r}; see /docs for the fields this API takes"
    if kind == "missing" and not field:  # the body itself: none was sent
        return 422, ("the request body is empty: send a JSON object with the field 'text' "
                     "(a text or a list of texts), such as {\"text\": \"Good morning.\"}, "
                     "with Content-Type: application/json")
    if kind == "missing":
        return 422, f"field {field!r} is missing"
    if not field:
        return 422, f"the body must be a JSON object: {first.get('msg', 'invalid')}"
    return 422, f"field {field!r}: {first.get('msg', 'invalid value')}"


async def translate_within_limits(app: FastAPI, texts: list[str], search: Search,
                                  html: bool, route: Route) -> list[dict[str, Any]]:
    """The pool's translation of `texts` along `route` under the per-request timeout;
    HTTP 503 while the server shuts down or once a batcher has stopped, 504 past the
    timeout."""
    pool: ModelPool = app.state.pool
    if app.state.draining:
        raise HTTPException(503, "the server is shutting down; retry on another instance")
    if not pool.alive:
        raise HTTPException(503, f"the server cannot translate: {BATCHER_DEAD}; retry on "
                            "another instance")
    timeout = pool.settings.timeout_s
    try:
        return await asyncio.wait_for(pool.translate(route, texts, search, html), timeout)
    except asyncio.TimeoutError:  # not the built-in TimeoutError before 3.11
        raise HTTPException(504, f"the translation took longer than the server's "
                            f"timeout_s ({timeout:g} s)") from None


def create_app(pool: ModelPool, metrics: ServerMetrics | None = None) -> FastAPI:
    """The app serving the models of `pool` (its first ones loaded: ModelPool.load_at_start)."""
    metrics = metrics or pool.metrics
    store = FileStore()
    settings = pool.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        pool.start()
        app.state.ready = True
        yield
        app.state.draining = True
        await pool.stop()
        store.close()

    app = FastAPI(title="transformer-nmt", version=__version__, lifespan=lifespan,
                  description="Translate with Transformers trained by transformer-nmt, every "
                  "pair of the server's models (GET /v1/models); LibreTranslate's API is "
                  "served as well.")
    app.state.pool, app.state.metrics = pool, metrics
    app.state.file_store = store
    app.state.ready = app.state.draining = False
    app.router.route_class = CheckedJSONRoute
    add_error_handlers(app)
    add_routes(app, pool, metrics)

    def translate(texts: list[str], search: Search, html: bool, route: Route):
        return translate_within_limits(app, texts, search, html, route)

    detector = LanguageDetector(pool.routes.sources())
    libretranslate = libretranslate_routes(translate, settings, pool.routes, detector,
                                           FILE_FORMATS)
    app.include_router(libretranslate)
    files = APIRouter() if file_routes is None else file_routes(
        translate, settings, pool.routes, detector, store)
    app.include_router(files)
    # Newer FastAPI lists an included router as one entry of app.routes: its own
    # routes are named as well.
    wrap_in_middleware(app, settings, metrics,
                       route_paths([*app.routes, *libretranslate.routes, *files.routes]))
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every refusal as a one-line JSON error with its HTTP status."""

    @app.exception_handler(StarletteHTTPException)  # ours, FastAPI's and routing's
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        if detail == FASTAPI_UNREADABLE_BODY:
            detail = "the body is not valid JSON in UTF-8"
        return error(exc.status_code, detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(*validation_error(exc))

    @app.exception_handler(TooLarge)
    async def too_large(request: Request, exc: TooLarge) -> JSONResponse:
        return error(413, str(exc))

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, exc: QueueFull) -> JSONResponse:
        return error(429, f"the server is busy: {exc}; retry shortly")

    @app.exception_handler(ModelUnavailable)
    async def model_unavailable(request: Request, exc: ModelUnavailable) -> JSONResponse:
        return error(503, f"{exc}; the server's operator must restore it or restart the "
                     "server")

    @app.exception_handler(BadOption)
    async def bad_option(request: Request, exc: BadOption) -> JSONResponse:
        return error(422, str(exc))

    @app.exception_handler(UserError)  # the text itself (a language token the model lacks)
    async def unusable_text(request: Request, exc: UserError) -> JSONResponse:
        return error(422, str(exc))


def add_routes(app: FastAPI, pool: ModelPool, metrics: ServerMetrics) -> None:
    """Our API under /v1, health, readiness, metrics and the web page with its files."""
    add_v1_routes(app, pool)
    add_operations_routes(app, pool, metrics)


def add_v1_routes(app: FastAPI, pool: ModelPool) -> None:
    """Our API: GET /v1/model, GET /v1/models and POST /v1/translate."""
    settings = pool.settings

    async def key_required(request: Request) -> None:
        require_key(settings.api_key, presented_key(request))

    def terms() -> dict[str, Any]:
        """What every model of the server is decoded with, and the limits of a request."""
        return {"defaults": {"beam": pool.defaults.beam, "alpha": pool.defaults.alpha,
                             "nbest": 1},
                "limits": {"max_beam": settings.max_beam, "max_nbest": settings.max_nbest,
                           "max_characters": settings.max_characters,
                           "max_sentences": settings.max_sentences,
                           "max_attention_cells": settings.max_attention_cells,
                           "min_alpha": ALPHA_RANGE[0], "max_alpha": ALPHA_RANGE[1]},
                "api_key_required": settings.api_key is not None}

    @app.get("/v1/model", summary="describe the served model (a one-model server)")
    async def describe() -> dict[str, Any]:
        only = pool.routes.only
        if only is None:
            raise HTTPException(404, f"this server serves {len(pool.routes.entries)} "
                                "models; GET /v1/models describes each")
        card = pool.card(only)
        del card["loaded"]
        return {**card, **terms()}

    @app.get("/v1/models", summary="describe every model and every pair served")
    async def describe_all() -> dict[str, Any]:
        routes = pool.routes
        pairs = [{"source": source, "target": target,
                  "pivot": routes.route(source, target).pivot}
                 for source in routes.sources() for target in routes.targets(source)]
        return {"models": [pool.card(entry) for entry in routes.entries], "pairs": pairs,
                "max_models_loaded": settings.max_models_loaded, **terms()}

    @app.post("/v1/translate", summary="translate one text or a list",
              description=CONFIDENCE_MEANING + " " + PAIR_MEANING,
              dependencies=[Depends(key_required)])
    async def translate(body: TranslateRequest) -> dict[str, Any]:
        started = time.perf_counter()
        texts = [body.text] if isinstance(body.text, str) else body.text
        search = Search(body.beam, body.alpha, body.nbest, body.alignments, body.attention,
                        body.glossary)
        route = v1_route(pool.routes, body.source, body.target)
        results = await translate_within_limits(app, texts, search, False, route)
        return {"translations": results,
                "models": [hop.name for hop in route.hops], "pivot": route.pivot,
                "elapsed_ms": round((time.perf_counter() - started) * 1000, 1)}


def add_operations_routes(app: FastAPI, pool: ModelPool, metrics: ServerMetrics) -> None:
    """What operators and browsers ask: health, readiness, metrics, the web page and its
    files."""

    @app.get("/health", summary="the process answers")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", summary="the model is loaded and the server takes requests")
    async def ready() -> JSONResponse:
        if app.state.draining:
            return error(503, "not ready: shutting down")
        if not app.state.ready:
            return error(503, "not ready: starting")
        if not pool.alive:
            return error(503, f"not ready: {BATCHER_DEAD}")
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        index = STATIC / "index.html"
        if not index.is_file():
            return error(404, "the web page is not installed with this package")
        return FileResponse(str(index))

    app.mount("/static", StaticFiles(directory=str(STATIC), check_dir=False), name="static")


def v1_route(routes: PairRoutes, source: str | None, target: str | None) -> Route:
    """The route of a /v1/translate request: its `source` and `target`, which a one-model
    server does not need. BadOption (HTTP 422) naming what is missing or not served."""
    if source is None and target is None and routes.only is not None:
        return Route((routes.only,))
    for name, value in (("source", source), ("target", target)):
        if value is None:
            raise BadOption(name, f"field {name!r} is missing: this server translates "
                            f"{routes.described()}; give source and target")
    try:
        return routes.route(source, target)
    except NoRoute as error:
        raise BadOption("target", str(error)) from None


def wrap_in_middleware(app: FastAPI, settings: ServeSettings, metrics: ServerMetrics,
                       routes: frozenset[str]) -> None:
    """The body's framing, limit and deadline, the JSON 500 of unexpected errors, the
    cancelling of requests whose client went away, the request metrics (by the paths of
    `routes`) and CORS."""
    # The last added is the outermost: metrics count the body limit's refusals, the 500s
    # and the requests cancelled too, and CORS headers go on every answer.
    app.add_middleware(BodyLimit, max_bytes=4 * settings.max_characters + 65536,
                       larger={} if file_routes is None
                       else {"/translate_file": FILE_LIMITS.max_bytes + 65536})
    # Before the limit, which would take the Content-Length of a request framed twice.
    app.add_middleware(OneFraming)
    app.add_middleware(BodyDeadline, seconds=settings.body_timeout_s)
    app.add_middleware(UnexpectedErrors)
    app.add_middleware(CancelWhenClientGoes)
    app.add_middleware(RequestMetrics, metrics=metrics, routes=routes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "X-API-Key", "Authorization"])
