"""Who may translate (serve/access.py): the key a request presents, from a header or the
body, and the refusals: 401 without a key, 403 with a wrong one."""

from __future__ import annotations

import pytest
from fastapi import HTTPException, Request

from transformer_nmt.serve.access import presented_key, require_key


def request(*headers: tuple[str, str]) -> Request:
    """A request as the ASGI server hands it over: header names in lower case."""
    raw = [(name.lower().encode(), value.encode()) for name, value in headers]
    return Request({"type": "http", "method": "POST", "path": "/v1/translate", "headers": raw})


def test_the_key_comes_from_x_api_key_first_then_a_bearer_token_then_the_body():
    both = request(("X-API-Key", "header"), ("Authorization", "Bearer token"))
    assert presented_key(both, "body") == "header"
    assert presented_key(request(("Authorization", "bearer  token ")), "body") == "token"
    assert presented_key(request(("Authorization", "Basic dXNlcjpwdw==")), "body") == "body"
    assert presented_key(request(("Authorization", "Bearer ")), "body") == "body"
    assert presented_key(request(), "") is None
    assert presented_key(request()) is None


def test_no_key_required_lets_every_request_through():
    require_key(None, None)
    require_key(None, "anything")


def test_a_missing_key_is_401_and_a_wrong_one_403():
    require_key("secret", "secret")
    for missing in (None, ""):
        with pytest.raises(HTTPException) as refused:
            require_key("secret", missing)
        assert refused.value.status_code == 401 and "X-API-Key" in refused.value.detail
    for wrong in ("Secret", "secret ", "secre", "sécret"):
        with pytest.raises(HTTPException) as refused:
            require_key("secret", wrong)
        assert refused.value.status_code == 403
