"""Who may translate: the API key, compared in constant time, and the one-line JSON
error every refusal gets; credentials in URLs kept out of the log and of error messages."""

from __future__ import annotations

import hmac
import logging
import re
from urllib.parse import unquote_plus

from fastapi import HTTPException, Request

REDACTED = "***"
"""What a credential's value is shown as in a log line or an error message."""
CREDENTIAL_WORDS = ("key", "token", "secret", "passw", "pwd", "auth", "credential",
                    "signature")
"""A parameter whose name holds one of these (any case, `_`, `-` and `.` left out: api_key,
apiKey, access-token, X-Auth) is taken for a credential. A few harmless names (keyword)
are hidden too: a log line missing a value costs less than a key in clear."""
QUERY_PARAMETER = re.compile(r"(?<![^?&;\s])(?P<name>[^?&;=\s]+)=(?P<value>[^&\s]*)")
"""name=value in a URL's query string (or a text quoting one): the pair starts a text, or
follows ?, &, ; or a space, and its value runs to the next & or space, as the server reads
a value (a ; or # inside it is part of the key)."""


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


def redact_credentials(text: str) -> str:
    """`text` with the value of every query parameter named like a credential replaced by
    REDACTED: `/translate?api_key=SECRET&q=hi` becomes `/translate?api_key=***&q=hi`.
    LibreTranslate's clients may send api_key in the URL, which uvicorn's access log
    writes whole; the key must not end up in a log file that more people read."""
    return QUERY_PARAMETER.sub(_redacted_pair, text)


def _redacted_pair(match: re.Match) -> str:
    # The server reads a name percent-decoded (api%5Fkey is api_key): so is it judged.
    name = re.sub(r"[-_.\s]", "", unquote_plus(match["name"])).lower()
    if any(word in name for word in CREDENTIAL_WORDS):
        return f"{match['name']}={REDACTED}"
    return match.group()


class RedactCredentials(logging.Filter):
    """A log filter that redacts credentials (redact_credentials) from a record's message,
    its arguments and its traceback, leaving the arguments' shape as it is: uvicorn's
    access formatter takes its five arguments apart by position."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_credentials(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted_argument(value) for value in record.args)
        elif isinstance(record.args, dict):
            record.args = {name: _redacted_argument(value)
                           for name, value in record.args.items()}
        if record.exc_info and not record.exc_text:
            # Formatters reuse exc_text once set: the traceback is written redacted.
            record.exc_text = redact_credentials(
                logging.Formatter().formatException(record.exc_info))
        return True


def _redacted_argument(value):
    """A log record's argument redacted where it is a text; other values as they are."""
    return redact_credentials(value) if isinstance(value, str) else value
