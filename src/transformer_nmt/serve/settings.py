"""What a server may be asked and how much: the limits, batching and access settings of
`nmt serve`, checked once when the server starts. Each has an environment variable,
NMT_ and its name in capitals (NMT_PORT, NMT_MAX_QUEUE, ...), so that a container can be
configured without a command line; a command-line flag overrides its variable."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from transformer_nmt.errors import UserError
from transformer_nmt.fields import check_types, parse_text, setting

ENVIRONMENT_PREFIX = "NMT_"
LogLevel = Literal["critical", "error", "warning", "info", "debug"]
DEADLINES = ("headers_timeout_s", "body_timeout_s", "keep_alive_s")
"""The settings that bound how long a client may hold a connection without sending."""


@dataclass(frozen=True)
class ServeSettings:
    """Settings of one server; every field is checked in `__post_init__`. The group mark
    files a field under one of `nmt serve`'s option groups."""

    host: str = "127.0.0.1"
    """Address to listen on (127.0.0.1: this machine only, so that nothing is exposed by
    accident; 0.0.0.0 for every interface)."""
    port: int = 8080
    """TCP port to listen on."""
    max_models_loaded: int | None = setting(None, group="models", metavar="N")
    """Most models kept in memory at once (None: every model, loaded at start); with N,
    the first N are loaded at start, others when first asked for, and the least recently
    used idle one is unloaded beyond N (a pivot uses two at once, and a model that is
    translating is never unloaded, so the count may pass N while they work)."""
    max_batch_tokens: int = setting(4096, group="batching")
    """Most source tokens (padding and EOS included) of one batch, sentences of every
    request together, and of one piece of a request taken into a decoder at once (a longer
    request is cut by length into pieces that several decoders share, by the rule offline
    batches follow); the server's one token budget, which `nmt translate`'s --max-tokens
    is offline."""
    max_wait_ms: float = setting(5.0, group="batching", metavar="MS")
    """Longest a sentence waits for others to share its batch while the decoders are
    busy (while one is idle, a sentence goes at once)."""
    max_characters: int = setting(20000, group="limits")
    """Most characters of text in one request (413 beyond)."""
    max_sentences: int = setting(200, group="limits")
    """Most sentences in one request after splitting its documents (413 beyond)."""
    max_attention_cells: int = setting(20000, group="limits", metavar="N")
    """Most attention-map cells one request may ask for with `attention`: the sum over its
    sentences of (source pieces + 1) × (the longest output the search allows them + 1),
    counted before decoding, so that a request is refused up front (413 beyond) rather
    than answered with a huge map after holding the server's memory and CPU. Each layer
    and head sends a map of that many weights (and one per pair of words)."""
    max_queue: int = setting(2000, group="limits")
    """Most sentences waiting to be decoded across all requests (429 beyond)."""
    timeout_s: float = setting(60.0, group="limits", flag="--timeout", metavar="SECONDS")
    """Longest a request may wait for its translations (504 beyond)."""
    max_beam: int = setting(16, group="limits")
    """Widest beam a caller may ask for."""
    max_nbest: int = setting(16, group="limits")
    """Most alternatives a caller may ask for (never more than its beam)."""
    headers_timeout_s: float = setting(10.0, group="connections", flag="--headers-timeout",
                                       metavar="SECONDS")
    """Longest a client may take to send a request's headers, from opening the connection
    or from its previous answer (the connection is closed beyond)."""
    body_timeout_s: float = setting(30.0, group="connections", flag="--body-timeout",
                                    metavar="SECONDS")
    """Longest a client may take to send a request's body once its headers are in (HTTP
    408 and the connection closed beyond)."""
    keep_alive_s: float = setting(5.0, group="connections", flag="--keep-alive",
                                  metavar="SECONDS")
    """Longest a connection is kept open, idle, for a next request after an answer."""
    min_confidence: float | None = setting(None, group="limits", metavar="X")
    """Sentences whose confidence (0-1, the estimated probability that a reader would
    accept them; needs a model calibrated by `nmt calibrate`) is below X come back empty,
    marked "withheld" with the reason (None: every sentence comes back)."""
    api_key: str | None = setting(None, group="access", metavar="KEY")
    """The key every translation endpoint then requires, in an X-API-Key header or
    LibreTranslate's api_key (401 without, 403 wrong; None: no key); best given as
    NMT_API_KEY, so that it does not show in `ps`."""
    cors_origins: tuple[str, ...] = setting((), group="access", flag="--cors-origin",
                                            metavar="ORIGIN")
    """Origins whose web pages may call the API (repeatable; NMT_CORS_ORIGINS
    comma-separated; none by default)."""
    log_level: LogLevel = "info"
    """uvicorn's log level."""

    def __post_init__(self) -> None:
        check_types(self)
        if self.max_models_loaded is not None and self.max_models_loaded < 1:
            raise UserError(f"max_models_loaded must be at least 1, not "
                            f"{self.max_models_loaded!r}")
        for name in ("port", "max_batch_tokens", "max_characters", "max_sentences",
                     "max_attention_cells", "max_queue", "max_beam", "max_nbest"):
            value = getattr(self, name)
            if value < 1:
                raise UserError(f"{name} must be a whole number of at least 1, not {value!r}")
        if self.port > 65535:
            raise UserError(f"port must be at most 65535, not {self.port}")
        for name in ("max_wait_ms", "timeout_s", *DEADLINES):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise UserError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.min_confidence is not None and not 0 <= self.min_confidence <= 1:
            raise UserError(f"min_confidence must be between 0 and 1, not "
                            f"{self.min_confidence!r}")
        for name in ("timeout_s", *DEADLINES):
            if getattr(self, name) == 0:
                raise UserError(f"{name} must be more than 0")
        if self.api_key is not None and not self.api_key.strip():
            raise UserError("the API key is empty; give a non-empty key or none at all")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], **given: Any) -> ServeSettings:
        """The settings of `environ`'s NMT_* variables, the defaults for those not set,
        and `given` (command-line flags; None: not given) over both. A variable that
        cannot be read or is out of range is a UserError naming it."""
        values = {}
        for field in dataclasses.fields(cls):
            variable = environment_variable(field.name)
            if variable not in environ:
                continue
            try:
                values[field.name] = parse_text(cls, field.name, environ[variable])
                cls(**{field.name: values[field.name]})
            except UserError as error:
                raise UserError(f"environment variable {variable}: {error}") from None
        values.update({name: value for name, value in given.items() if value is not None})
        return cls(**values)


def environment_variable(name: str) -> str:
    """The environment variable of ServeSettings field `name`: NMT_ and the name in
    capitals."""
    return ENVIRONMENT_PREFIX + name.upper()
