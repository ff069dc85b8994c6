"""The JSON bodies the server accepts: read with limits that a hostile body cannot pass
(nesting depth, finite numbers, real characters), and the strict model of POST
/v1/translate, whose typos are errors naming the field rather than ignored options."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Coroutine

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects a body may have; either API's bodies need 2."""


class UnreadableJSON(ValueError):
    """A body that parses as JSON but that no request can be (HTTP 400); the message
    names the field at fault."""


def read_json(body: bytes) -> Any:
    """The JSON value of `body`: json.JSONDecodeError (or UnicodeDecodeError) for one that
    is not JSON in UTF-8, UnreadableJSON for one nested deeper than MAX_JSON_DEPTH, with a
    number that is not finite (Infinity, NaN, 1e400) or a string holding a lone surrogate
    (which no later step could encode)."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise UnreadableJSON(_too_deep()) from None
    except ValueError as error:
        if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
            raise
        raise UnreadableJSON(f"the body is not valid JSON: {error}") from None  # huge ints
    _check_value(value, [], 0)
    return value


def _too_deep() -> str:
    return (f"the body's JSON nests arrays and objects deeper than {MAX_JSON_DEPTH} levels, "
            "the server's limit")


def _check_value(value: Any, path: list[str], depth: int) -> None:
    """UnreadableJSON for the first part of `value` (at `path`) that read_json refuses."""
    if isinstance(value, (dict, list)):
        if depth >= MAX_JSON_DEPTH:
            raise UnreadableJSON(_too_deep())
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and _has_surrogate(key):
                raise UnreadableJSON(f"{_field(path)} has a name holding a lone surrogate, "
                                     "which is not a character; send names in UTF-8")
            _check_value(item, [*path, str(key)], depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise UnreadableJSON(f"{_field(path)} is not a finite number (JSON has no "
                             "Infinity or NaN, and numbers must fit a double)")
    elif isinstance(value, str) and _has_surrogate(value):
        raise UnreadableJSON(f"{_field(path)} holds a lone surrogate (a \\ud800 to "
                             "\\udfff escape without its pair), which is not a character; "
                             "send text in UTF-8")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _field(path: list[str]) -> str:
    """How a message names the part of a body at `path`: field 'glossary.dog'."""
    return f"field {'.'.join(path)!r}" if path else "the body"


class CheckedJSONRequest(Request):
    """A request whose JSON body FastAPI reads through read_json: a refusal is an HTTP 400
    naming the field instead of an error inside the app."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = read_json(await self.body())
            except UnreadableJSON as error:
                raise HTTPException(400, str(error)) from None
        return self._json


class CheckedJSONRoute(APIRoute):
    """A FastAPI route whose body is read by CheckedJSONRequest."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked_handler(request: Request) -> Response:
            return await handler(CheckedJSONRequest(request.scope, request.receive))

        return checked_handler


class TranslateRequest(BaseModel):
    """POST /v1/translate: one text or a list, and the decoding options a caller may set."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | list[str] = Field(description="a text or a list of texts; each may hold "
                                  "several sentences, lines and paragraphs")
    source: str | None = Field(None, description="source language code (needed on a server "
                               "with several models; GET /v1/models lists the pairs)")
    target: str | None = Field(None, description="target language code (needed on a server "
                               "with several models)")
    beam: int | None = Field(None, description="beam size, 1 for greedy search (default: "
                             "the server's)")
    alpha: float | None = Field(None, description="length penalty exponent (default: the "
                                "server's)")
    nbest: int | None = Field(None, description="alternatives per sentence, at most the beam "
                              "(default 1)")
    alignments: bool = Field(False, description="also return (source word, target word) "
                             "pairs of each sentence")
    attention: bool = Field(False, description="also return the encoder-decoder attention "
                            "of each sentence, per layer and head, between subword pieces "
                            "and between words, with the pieces of each word (413 when the "
                            "maps could pass the server's max_attention_cells, GET "
                            "/v1/model's limits)")
    glossary: dict[str, str] | None = Field(None, description="terminology: source term -> "
                                            "target term; the translation of a sentence "
                                            "that contains a source term (whole words, any "
                                            "case) contains its target term (lexically "
                                            "constrained beam search); 422 for target terms "
                                            "longer than the model's outputs can be")
