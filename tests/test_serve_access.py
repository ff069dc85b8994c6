"""Who may translate (serve/access.py): the key a request presents, from a header or the
body, and the refusals: 401 without a key, 403 with a wrong one; credentials redacted
from what the server logs."""

from __future__ import annotations

import logging
import sys

import pytest
from fastapi import HTTPException, Request

from transformer_nmt.serve.access import (RedactCredentials, presented_key,
                                          redact_credentials, require_key)


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


def test_credentials_in_a_query_string_are_redacted_and_other_parameters_kept():
    assert redact_credentials("/translate?api_key=SECRET&q=Guten+Tag&source=de") == \
        "/translate?api_key=***&q=Guten+Tag&source=de"
    shown = redact_credentials("/x?apikey=S1&Token=S2&key=S3&password=S4&api%5Fkey=S5"
                               "&access-token=S6&client_secret=S7;x&q=key=word")
    assert not any(f"S{number}" in shown for number in range(1, 8)), shown
    assert shown.endswith("&q=key=word")  # a text to translate that quotes key= is kept
    assert redact_credentials("api_key=SECRET") == "api_key=***"
    assert redact_credentials("GET /health HTTP/1.1") == "GET /health HTTP/1.1"


def test_the_log_filter_redacts_an_access_line_and_keeps_its_five_arguments():
    # uvicorn's access log: client, method, the whole path with its query, version, status
    record = logging.LogRecord("uvicorn.access", logging.INFO, "h11_impl.py", 1,
                               '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "POST",
                               "/translate?api_key=SECRET&q=hi", "1.1", 403), None)
    assert RedactCredentials().filter(record)
    assert record.args == ("127.0.0.1:5", "POST", "/translate?api_key=***&q=hi", "1.1", 403)
    try:
        raise ValueError("cannot read /translate?token=SECRET")
    except ValueError:
        failed = logging.LogRecord("uvicorn.error", logging.ERROR, "x.py", 1,
                                   "failed: %(url)s", ({"url": "/?secret=SECRET"},),
                                   sys.exc_info())
    RedactCredentials().filter(failed)
    assert "SECRET" not in logging.Formatter().format(failed)
