"""LibreTranslate's API, so that its clients (the libretranslatepy package, browser
extensions, CAT-tool plugins) work unchanged against a model trained here.

Every parameter is read as LibreTranslate reads it, from the query string and a JSON,
URL-encoded or multipart body (serve/parameters.py). POST /translate takes `q` (a text or
a list), `source` (a code, or "auto" to detect it), `target`, `format` (text or html),
`api_key` and `alternatives`, and answers {"translatedText": ...}, with "detectedLanguage"
for source=auto and extra fields its clients ignore: for a calibrated model "confidence",
the lowest confidence of a text's sentences (null for an empty text), and on a server with
a min_confidence "withheld", true where a sentence was left out for being below it.
POST /detect answers [{"language": ..., "confidence": percent}] among the languages the
server translates from (serve/detect.py); GET /languages lists every language with the
targets it reaches, directly or through a pivot (serve/pairs.py; a pivoted answer says
so in an extra "pivot" field).
Refusals have LibreTranslate's shape, {"error": "..."}.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Sequence

from fastapi import APIRouter, HTTPException, Request

from transformer_nmt.data.language_codes import language_name as iso_language_name
from transformer_nmt.serve.access import presented_key, require_key
from transformer_nmt.serve.detect import DetectionUnavailable, LanguageDetector
from transformer_nmt.serve.html_text import parse_html
from transformer_nmt.serve.pairs import NoRoute, PairRoutes, Route
from transformer_nmt.serve.parameters import request_parameters
from transformer_nmt.serve.service import Search, TooLarge
from transformer_nmt.serve.settings import ServeSettings

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish", "fr": "French",
    "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian",
    "zh": "Chinese", "auto": "Auto Detect",
}
"""English names of common language codes, as /languages shows them; others by ISO 639's
name, else by code."""

FRONTEND_TIMEOUT_MS = 500
"""How long a LibreTranslate web client waits after a keystroke before it translates."""
Translate = Callable[[list[str], Search, bool, Route], Awaitable[list[dict[str, Any]]]]
"""The pool's translate under the server's deadline and state checks."""


def libretranslate_routes(translate: Translate, settings: ServeSettings,
                          routes: PairRoutes, detector: LanguageDetector,
                          file_formats: Sequence[str] = ()) -> APIRouter:
    """POST /translate, POST /detect, GET /languages and GET /frontend/settings for the
    pairs of `routes`; detection chooses among the languages the server translates from;
    `file_formats`: what POST /translate_file takes (none: it is not served)."""
    router = APIRouter(tags=["LibreTranslate"])
    _add_text_routes(router, translate, settings, routes, detector)
    _add_language_routes(router, settings, routes, file_formats)
    return router


def _add_text_routes(router: APIRouter, translate: Translate, settings: ServeSettings,
                     routes: PairRoutes, detector: LanguageDetector) -> None:
    """POST /translate and POST /detect: what a client asks of a text."""

    @router.post("/translate", summary="LibreTranslate: translate text")
    async def translate_route(request: Request) -> dict[str, Any]:
        fields = await request_parameters(request)
        _require_key(request, fields, settings)
        q = _texts_of(fields, allow_empty=True)
        text_format = fields.get("format", "text")
        if text_format not in ("text", "html"):
            raise HTTPException(400, f"Invalid request: format must be text or html, not "
                                f"{text_format!r}")
        alternatives = _alternatives(fields.get("alternatives", 0), settings)
        texts = [q] if isinstance(q, str) else q
        if fields.get("source") == "auto":
            _check_characters(texts, settings)  # before detection reads them all
        route, detected = await pair_route(routes, detector, fields.get("source"),
                                           fields.get("target"), texts, text_format == "html")
        # A text in a language the model has not learned comes back as it was sent, as
        # LibreTranslate answers one in a language it does not have.
        results = await translate(texts, Search(nbest=alternatives + 1, keep_unreadable=True),
                                  text_format == "html", route)
        answer = _translation_answer(isinstance(q, str), results, settings, alternatives)
        if detected is not None:
            answer["detectedLanguage"] = detected if isinstance(q, str) else \
                [detected] * len(texts)
        if route.pivot is not None:  # an extra field, which LibreTranslate's clients ignore
            answer["pivot"] = route.pivot
        return answer

    @router.post("/detect", summary="LibreTranslate: detect the language of a text")
    async def detect_route(request: Request) -> list[dict[str, Any]]:
        fields = await request_parameters(request)
        _require_key(request, fields, settings)
        q = _texts_of(fields, allow_empty=False)
        texts = [q] if isinstance(q, str) else q
        _check_characters(texts, settings)
        try:
            return await asyncio.to_thread(detector.detect, texts)
        except DetectionUnavailable as error:
            raise HTTPException(501, str(error)) from None


def _add_language_routes(router: APIRouter, settings: ServeSettings, routes: PairRoutes,
                         file_formats: Sequence[str]) -> None:
    """GET /languages and GET /frontend/settings: what the server offers."""

    @router.get("/languages", summary="LibreTranslate: the languages served")
    async def languages() -> list[dict[str, Any]]:
        return [{"code": code, "name": language_name(code), "targets": routes.targets(code)}
                for code in routes.languages()]

    @router.get("/frontend/settings", summary="LibreTranslate: what its web clients ask "
                "of a server first")
    async def frontend_settings() -> dict[str, Any]:
        sources = routes.sources()
        source = sources[0] if sources else None
        targets = routes.targets(source) if source else []
        return {
            "charLimit": settings.max_characters,
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": settings.api_key is not None,
            "keyRequired": settings.api_key is not None,
            "suggestions": False,
            "filesTranslation": bool(file_formats),
            "supportedFilesFormat": list(file_formats),
            "language": {
                "source": {"code": source or "auto", "name": language_name(source or "auto")},
                "target": {"code": targets[0] if targets else "",
                           "name": language_name(targets[0]) if targets else ""}},
        }


async def pair_route(routes: PairRoutes, detector: LanguageDetector, source: Any, target: Any,
                     texts: list[str], html: bool = False
                     ) -> tuple[Route, dict[str, Any] | None]:
    """The route of a LibreTranslate request's `source` and `target`, and for source=auto
    the detected language (LibreTranslate's detectedLanguage; None where the server has no
    way to tell and no need to: one model whose file records no languages, or one source
    language for the target and no py3langid). HTTP 400 for a missing or unserved pair."""
    for name, value in (("source", source), ("target", target)):
        if value is None or value == "":
            raise HTTPException(400, f"Invalid request: missing {name} parameter")
        if not isinstance(value, str):  # a number, a list, a form's repeated field
            raise HTTPException(400, f"Invalid request: {name} must be a language "
                                f"code, not {value!r}")
    detected = None
    if source == "auto":
        # Detection weighs only the languages that reach the target.
        candidates = [code for code in routes.sources() if target in routes.targets(code)]
        if routes.sources() and not candidates:
            raise HTTPException(400, f"{target} is not supported as target language: this "
                                f"server translates {routes.described()}")
        detected = await _detected_source(detector, candidates, texts, html)
        source = detected["language"] if detected else (candidates[0] if candidates
                                                         else source)
    try:
        return routes.route(source, target), detected
    except NoRoute as error:
        raise HTTPException(400, str(error)) from None


def _require_key(request: Request, fields: dict[str, Any], settings: ServeSettings) -> None:
    """HTTP 401 or 403 unless the request carries the server's key (header or api_key)."""
    api_key = fields.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise HTTPException(400, "Invalid request: api_key must be a text")
    require_key(settings.api_key, presented_key(request, api_key))


def _check_characters(texts: list[str], settings: ServeSettings) -> None:
    """TooLarge (HTTP 413) for texts over the server's max_characters, as translating
    them would be."""
    characters = sum(len(text) for text in texts)
    if characters > settings.max_characters:
        raise TooLarge(f"the request has {characters} characters, more than the "
                       f"server's max_characters ({settings.max_characters})")


def _texts_of(fields: dict[str, Any], allow_empty: bool) -> str | list[str]:
    """The request's `q`: a text or a list of texts; HTTP 400 when missing (or empty, as
    LibreTranslate's /detect has it, unless `allow_empty`)."""
    q = fields.get("q")
    if q is None or (not allow_empty and not q):
        raise HTTPException(400, "Invalid request: missing q parameter")
    if not isinstance(q, str) and not (isinstance(q, list)
                                       and all(isinstance(text, str) for text in q)):
        raise HTTPException(400, "Invalid request: q must be a text or a list of texts")
    return q


async def _detected_source(detector: LanguageDetector, candidates: list[str],
                           texts: list[str], html: bool) -> dict[str, Any] | None:
    """The most likely of `candidates` (the languages the server translates from into the
    target) for the texts; None where there is no way to tell and no need to (one
    candidate or none, and no py3langid)."""
    if html:  # the text between the tags, not the markup's names
        texts = [" ".join(parse_html(text).texts) for text in texts]
    try:
        found = await asyncio.to_thread(detector.detect, texts, candidates)
    except DetectionUnavailable as error:
        if len(candidates) > 1:
            raise HTTPException(501, f"source=auto: {error}") from None
        return None
    return found[0] if found else None


def _translation_answer(single: bool, results: list[dict[str, Any]],
                        settings: ServeSettings, alternatives: int) -> dict[str, Any]:
    """LibreTranslate's answer to /translate from the service's `results` (one per text;
    `single`: q was one text, not a list): translatedText, and confidence, withheld and
    alternatives where they apply."""

    def shaped(values: list[Any]) -> Any:
        return values[0] if single else values

    answer: dict[str, Any] = {"translatedText": shaped([result["text"]
                                                        for result in results])}
    confidences = [_text_confidence(result) for result in results]
    if any(value is not None for value in confidences):  # the model is calibrated
        answer["confidence"] = shaped(confidences)
    if settings.min_confidence is not None:
        answer["withheld"] = shaped([any(sentence.get("withheld")
                                         for sentence in result["sentences"])
                                     or result.get("pivot", {}).get("withheld", False)
                                     for result in results])
    if alternatives:
        answer["alternatives"] = shaped([_alternative_texts(result, alternatives)
                                         for result in results])
    return answer


def language_name(code: str) -> str:
    """The English name of a language code (ISO 639's where the table has none, such as a
    multilingual model's targets), or the code itself."""
    return LANGUAGE_NAMES.get(code) or iso_language_name(code) or code


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
    """A text's confidence: its least confident sentence's, through a pivot the lower of
    both hops' (None without sentences or without confidences)."""
    found = [sentence["confidence"] for sentence in result["sentences"]]
    if "pivot" in result:
        found.append(result["pivot"]["confidence"])
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
