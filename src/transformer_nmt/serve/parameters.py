"""LibreTranslate's parameters, read as its server reads them: the URL's query string
merged with the body, whether the body is JSON, a URL-encoded form or a multipart form,
or empty (a POST whose parameters are all in its URL).

The precedence is LibreTranslate's. For a form, Flask's `request.values`: the query
string first, the form filling in the names it lacks. A JSON body (Flask's `is_json`:
application/json or application/*+json) is read on its own by LibreTranslate; here its
fields come first and the query string fills in the names it lacks, so that every
request LibreTranslate answers is answered the same way. A name given several times in
a query string or form is a list of its values (a list of texts for `q`); a file part of
a multipart form is no parameter, as in Flask's `request.values`. Every text is held to
what read_json holds JSON to: UTF-8, nesting, finite numbers, real characters.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from fastapi import HTTPException, Request
from python_multipart import FormParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import Field, File, parse_options_header

from transformer_nmt.serve.requests import UnreadableJSON, read_json

MAX_FORM_FIELDS = 1000
"""Most fields a query string or form may have; LibreTranslate's requests have six."""


async def request_parameters(request: Request) -> dict[str, Any]:
    """The parameters of a LibreTranslate request, merged from its query string and body;
    HTTP 400 naming what is wrong with either."""
    query = _form_fields(request.scope.get("query_string", b""), "the query string")
    body = await request.body()
    if not body:
        return query
    media_type, options = parse_options_header(request.headers.get("content-type", ""))
    if _is_json(media_type.decode("latin-1")):
        return {**query, **_json_fields(body)}
    if media_type == b"multipart/form-data":
        return {**_multipart_fields(body, options.get(b"boundary")), **query}
    # LibreTranslate's clients send forms URL-encoded, some without saying so.
    return {**_form_fields(body, "the body"), **query}


def _is_json(media_type: str) -> bool:
    """Whether a body of `media_type` is JSON, by Flask's rule for `request.is_json`."""
    return media_type == "application/json" or (media_type.startswith("application/")
                                                and media_type.endswith("+json"))


def _json_fields(body: bytes) -> dict[str, Any]:
    try:
        fields = read_json(body)
    except UnreadableJSON as error:
        raise HTTPException(400, f"Invalid request: {error}") from None
    except ValueError as error:  # invalid UTF-8 included
        raise HTTPException(400, f"Invalid request: the body is not JSON ({error})") \
            from None
    if not isinstance(fields, dict):
        raise HTTPException(400, "Invalid request: the body must be a JSON object")
    return fields


def _form_fields(encoded: bytes, where: str) -> dict[str, Any]:
    """The fields of a URL-encoded query string or form in UTF-8."""
    try:
        form = parse_qs(encoded.decode("utf-8"), keep_blank_values=True, errors="strict",
                        max_num_fields=MAX_FORM_FIELDS)
    except UnicodeDecodeError:
        raise HTTPException(400, f"Invalid request: {where} is not UTF-8") from None
    except ValueError:
        raise HTTPException(400, f"Invalid request: {where} has more than "
                            f"{MAX_FORM_FIELDS} fields") from None
    return _single_or_list(form)


def _multipart_fields(body: bytes, boundary: bytes | None) -> dict[str, Any]:
    """The text fields of a multipart/form-data body (files are skipped), in UTF-8."""
    if not boundary:
        raise HTTPException(400, "Invalid request: a multipart body needs a boundary in "
                            "its Content-Type header")
    parts: list[tuple[bytes, bytes]] = []

    def on_field(field: Field) -> None:
        parts.append((field.field_name or b"", field.value or b""))

    def on_file(file: File) -> None:
        file.close()

    parser = FormParser("multipart/form-data", on_field, on_file, boundary=boundary,
                        config={"MAX_FIELDS": MAX_FORM_FIELDS,
                                # the body is in memory already: no temporary files
                                "MAX_MEMORY_FILE_SIZE": len(body) + 1})
    try:
        parser.write(body)
        parser.finalize()
    except FormParserError as error:
        raise HTTPException(400, f"Invalid request: the multipart body cannot be read "
                            f"({error})") from None
    fields: dict[str, list[str]] = {}
    for name, value in parts:
        try:
            text_name = name.decode("utf-8")
            fields.setdefault(text_name, []).append(value.decode("utf-8"))
        except UnicodeDecodeError:
            shown = name.decode("utf-8", "replace")
            raise HTTPException(400, f"Invalid request: the multipart field {shown!r} is "
                                "not UTF-8") from None
    return _single_or_list(fields)


def _single_or_list(fields: dict[str, list[str]]) -> dict[str, Any]:
    """A name given once is its value; given several times, the list of its values."""
    return {name: values[0] if len(values) == 1 else values
            for name, values in fields.items()}
