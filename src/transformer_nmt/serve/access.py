"""Who may translate: the API key, compared in constant time, and the one-line JSON
error every refusal gets."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request


def presented_key(request: Request, body_key: str | None = None) -> str | None:
    """The key a request carries: X-API-Key, `Authorization: Bearer KEY`, or (the
    LibreTranslate routes) the body's api_key field."""
    if request.headers.get("x-api-key"):
        return request.headers["x-api-key"]
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return body_key or None


def require_key(expected: str | None, presented: str | None) -> None:
    """HTTP 401 without a key, 403 with a wrong one; nothing when no key is required."""
    if expected is None:
        return
    if not presented:
        raise HTTPException(401, "this server needs an API key: send it as the X-API-Key "
                            "header (or api_key in LibreTranslate requests)")
    if not hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8")):
        raise HTTPException(403, "the API key is not valid")
