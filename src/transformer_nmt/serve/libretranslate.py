"""LibreTranslate's API, so that its clients (the libretranslatepy package, browser
extensions, CAT-tool plugins) work unchanged against a model trained here.

POST /translate takes `q` (a text or a list), `source`, `target`, `format` (text or html),
`api_key` and `alternatives`, as JSON or as a form, and answers {"translatedText": ...},
with extra fields its clients ignore: for a calibrated model "confidence", the lowest
confidence of a text's sentences (null for an empty text), and on a server with a min_confidence
"withheld", true where a sentence was left out for being below it;
GET /languages lists the pair the model serves. Refusals have LibreTranslate's shape,
{"error": "..."}.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request

from transformer_nmt.serve.access import presented_key, require_key
from transformer_nmt.serve.requests import UnreadableJSON, read_json
from transformer_nmt.serve.service import Search
from transformer_nmt.serve.settings import ServeSettings

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish", "fr": "French",
    "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian",
    "zh": "Chinese",
}
"""English names of common language codes, as /languages shows them; others by code."""

Translate = Callable[[list[str], Search, bool], Awaitable[list[dict[str, Any]]]]


async def request_fields(request: Request) -> dict[str, Any]:
    """The request's fields, from a JSON object or a URL-encoded form (what
    libretranslatepy sends); a repeated form field becomes a list."""
    body = await request.body()
    if not body:
        return {}
    if request.headers.get("content-type", "").startswith("application/json"):
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
    try:
        form = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise HTTPException(400, "Invalid request: the body is not UTF-8") from None
    return {name: values[0] if len(values) == 1 else values for name, values in form.items()}


def libretranslate_routes(translate: Translate, settings: ServeSettings,
                          card: dict[str, Any]) -> APIRouter:
    """POST /translate and GET /languages for the model `card` describes."""
    router = APIRouter(tags=["LibreTranslate"])
    source_language, target_language = card["source_language"], card["target_language"]

    def check_pair(source: Any, target: Any) -> None:
        for name, value, served in (("source", source, source_language),
                                    ("target", target, target_language)):
            if value is None or value == "":
                raise HTTPException(400, f"Invalid request: missing {name} parameter")
            if not isinstance(value, str):  # a number, a list, a form's repeated field
                raise HTTPException(400, f"Invalid request: {name} must be a language "
                                    f"code, not {value!r}")
            if served is not None and value != served and not (name == "source"
                                                                and value == "auto"):
                raise HTTPException(400, f"{value} is not supported as {name} language: "
                                    f"this server translates {source_language} to "
                                    f"{target_language}")

    @router.post("/translate", summary="LibreTranslate: translate text")
    async def translate_route(request: Request) -> dict[str, Any]:
        fields = await request_fields(request)
        api_key = fields.get("api_key")
        if api_key is not None and not isinstance(api_key, str):
            raise HTTPException(400, "Invalid request: api_key must be a text")
        require_key(settings.api_key, presented_key(request, api_key))
        q = fields.get("q")
        if q is None:
            raise HTTPException(400, "Invalid request: missing q parameter")
        if not isinstance(q, str) and not (isinstance(q, list)
                                           and all(isinstance(text, str) for text in q)):
            raise HTTPException(400, "Invalid request: q must be a text or a list of texts")
        check_pair(fields.get("source"), fields.get("target"))
        text_format = fields.get("format", "text")
        if text_format not in ("text", "html"):
            raise HTTPException(400, f"Invalid request: format must be text or html, not "
                                f"{text_format!r}")
        alternatives = _alternatives(fields.get("alternatives", 0), settings)
        search = Search(nbest=alternatives + 1)
        texts = [q] if isinstance(q, str) else q
        results = await translate(texts, search, text_format == "html")
        translated = [result["text"] for result in results]
        answer: dict[str, Any] = {"translatedText": translated[0] if isinstance(q, str)
                                  else translated}
        confidences = [_text_confidence(result) for result in results]
        if any(value is not None for value in confidences):  # the model is calibrated
            answer["confidence"] = confidences[0] if isinstance(q, str) else confidences
        if settings.min_confidence is not None:
            withheld = [any(sentence.get("withheld") for sentence in result["sentences"])
                        for result in results]
            answer["withheld"] = withheld[0] if isinstance(q, str) else withheld
        if alternatives:
            others = [_alternative_texts(result, alternatives) for result in results]
            answer["alternatives"] = others[0] if isinstance(q, str) else others
        return answer

    @router.get("/languages", summary="LibreTranslate: the languages served")
    async def languages() -> list[dict[str, Any]]:
        if source_language is None or target_language is None:
            return []
        return [{"code": source_language, "name": language_name(source_language),
                 "targets": [target_language]},
                {"code": target_language, "name": language_name(target_language),
                 "targets": []}]

    return router


def language_name(code: str) -> str:
    """The English name of a language code, or the code itself."""
    return LANGUAGE_NAMES.get(code, code)


def _alternatives(value: Any, settings: ServeSettings) -> int:
    """LibreTranslate's `alternatives`: extra translations per text, 0 to max_nbest - 1."""
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise HTTPException(400, f"Invalid request: alternatives must be a number, not "
                            f"{value!r}") from None
    if not 0 <= count < settings.max_nbest:
        raise HTTPException(400, f"Invalid request: alternatives must be between 0 and "
                            f"{settings.max_nbest - 1}")
    return count


def _text_confidence(result: dict[str, Any]) -> float | None:
    """A text's confidence: its least confident sentence's (None without sentences or
    without confidences)."""
    found = [sentence["confidence"] for sentence in result["sentences"]]
    if not found or any(value is None for value in found):
        return None
    return min(found)


def _alternative_texts(result: dict[str, Any], alternatives: int) -> list[str]:
    """The next-best translations of a one-sentence text; for several sentences, the
    alternatives of each sentence joined with the best of the others is ambiguous, so only
    one-sentence texts get them."""
    sentences = result["sentences"]
    if len(sentences) != 1:
        return []
    return [entry["text"] for entry in sentences[0]["nbest"][1: alternatives + 1]]
