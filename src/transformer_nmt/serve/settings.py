"""What a server may be asked and how much: the limits, batching and access settings of
`nmt serve`, checked once when the server starts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformer_nmt.errors import UserError


@dataclass(frozen=True)
class ServeSettings:
    """Settings of one server; every field is checked in `__post_init__`."""

    host: str = "127.0.0.1"
    """Address to listen on; loopback unless told otherwise, so nothing is exposed by
    accident."""
    port: int = 8080
    """TCP port to listen on."""
    max_batch_tokens: int = 4096
    """Most source tokens (padding excluded) decoded in one batch across requests; the
    Translator's batch size caps its sentences."""
    max_wait_ms: float = 5.0
    """Longest a sentence waits for others to share its batch while the decoder is idle."""
    max_characters: int = 20000
    """Most characters of text in one request (413 beyond)."""
    max_sentences: int = 200
    """Most sentences in one request after splitting its documents (413 beyond)."""
    max_queue: int = 2000
    """Most sentences waiting to be decoded across all requests (429 beyond)."""
    timeout_s: float = 60.0
    """Longest a request may wait for its translations (504 beyond)."""
    max_beam: int = 16
    """Widest beam a caller may ask for."""
    max_nbest: int = 16
    """Most alternatives a caller may ask for (never more than its beam)."""
    api_key: str | None = None
    """When set, every translation endpoint needs this key (401 without, 403 wrong)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed to call the API from a browser page of theirs; none by default."""

    def __post_init__(self) -> None:
        for name in ("port", "max_batch_tokens", "max_characters", "max_sentences",
                     "max_queue", "max_beam", "max_nbest"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise UserError(f"{name} must be a whole number of at least 1, not {value!r}")
        if self.port > 65535:
            raise UserError(f"port must be at most 65535, not {self.port}")
        for name in ("max_wait_ms", "timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise UserError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.timeout_s == 0:
            raise UserError("timeout_s must be more than 0")
        if self.api_key is not None and not self.api_key.strip():
            raise UserError("the API key is empty; give a non-empty key or none at all")
