"""Whole files, as LibreTranslate translates them: POST /translate_file takes a
multipart form (`file`, `source`, `target`, optional `api_key`) and answers
{"translatedFileUrl": ".../download_file/ID-NAME"}; GET /download_file/ID-NAME gives the
translated file once, then it is deleted (unfetched, after the store's time limit).

The file is read and written by transformer_nmt.documents (the formats it lists); its
paragraphs are cut into sentences (data/sentences.py, as `nmt translate --file` cuts
them) and translated through the same service and batcher as every other request, so
they share batches with them, a chunk at a time within the server's per-request limits.
The service, told they are sentences already, only halves one too long for the model.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.datastructures import UploadFile

from transformer_nmt.data.sentences import sentences_of
from transformer_nmt.documents.formats import (EXTENSIONS, SUPPORTED, Document, FileLimits,
                                               UnsafeFile, read_document)
from transformer_nmt.documents.runs import Run, pending, put_back, source_text
from transformer_nmt.documents.sentences import Joined, join_sentences
from transformer_nmt.errors import UserError
from transformer_nmt.serve.access import presented_key, require_key
from transformer_nmt.serve.detect import LanguageDetector
from transformer_nmt.serve.file_store import FileStore, StoreFull, client_key, safe_name
from transformer_nmt.serve.libretranslate import Translate, pair_route
from transformer_nmt.serve.pairs import PairRoutes
from transformer_nmt.serve.pivot import sentences_joined
from transformer_nmt.serve.service import Search, TooLarge
from transformer_nmt.serve.settings import ServeSettings

TranslateTexts = Callable[[list[str], Search], Awaitable[list[dict[str, Any]]]]
"""A route's translation of texts under the server's deadline and state checks."""
DETECTION_SAMPLE = 2000
"""Characters of a document's text that source=auto detects its language from."""
FILE_LIMITS = FileLimits()
"""How large a file the server translates."""
MAX_FORM_FIELDS = 20
FILE_FORMATS = EXTENSIONS
"""The file types POST /translate_file takes."""


def file_routes(translate: Translate, settings: ServeSettings, routes: PairRoutes,
                detector: LanguageDetector, store: FileStore) -> APIRouter:
    """POST /translate_file and GET /download_file/... for the pairs of `routes`."""
    router = APIRouter(tags=["LibreTranslate"])

    @router.post("/translate_file", summary="LibreTranslate: translate a file "
                 f"({SUPPORTED})")
    async def translate_file(request: Request) -> dict[str, str]:
        upload, fields = await _read_form(request)
        require_key(settings.api_key, presented_key(request, fields.get("api_key")))
        source, target = fields.get("source"), fields.get("target")
        # A pair the server lacks is refused before the file is read, unless the file's
        # text must say which language it is in.
        route = None if source == "auto" else (
            await pair_route(routes, detector, source, target, []))[0]
        client = client_key(request.client.host if request.client else None)
        try:  # before the work of translating a file the store could not keep
            store.check_room(client)
        except StoreFull as error:
            raise _busy(error) from None
        data = await upload.read(FILE_LIMITS.max_bytes + 1)
        name = upload.filename or "document"
        try:
            document = await asyncio.to_thread(read_document, data, name, FILE_LIMITS)
        except UserError as error:
            status = (413 if len(data) > FILE_LIMITS.max_bytes
                      else 422 if isinstance(error, UnsafeFile) else 400)
            raise HTTPException(status, str(error)) from None
        wanted = pending(document.paragraphs)
        sources = [source_text(runs) for runs in wanted]
        if route is None:
            route = (await pair_route(routes, detector, source, target,
                                      [" ".join(sources)[:DETECTION_SAMPLE]]))[0]
        results = await _translate_paragraphs(
            lambda texts, search: translate(texts, search, False, route), sources, settings,
            route.hops[0].source or "en")
        translated = await asyncio.to_thread(_written, document, wanted, results)
        try:
            path = store.put(translated, safe_name(name, document.kind), client)
        except StoreFull as error:
            raise _busy(error) from None
        asyncio.get_running_loop().call_later(store.keep_s + 1, store.remove_expired)
        base = str(request.base_url).rstrip("/")
        return {"translatedFileUrl": f"{base}/download_file/{quote(path)}"}

    @router.get("/download_file/{download}", summary="LibreTranslate: a translated file, "
                "once")
    async def download_file(download: str) -> Response:
        found = store.take(download)
        if found is None:
            raise HTTPException(404, "no such file: it was downloaded already, its time "
                                "ran out, or the address is wrong; translate it again")
        name, content = found
        return Response(content, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    return router


def _busy(error: StoreFull) -> HTTPException:
    """HTTP 429 for a store with no room, saying in Retry-After when it will have."""
    return HTTPException(429, f"the server is busy: {error}",
                         headers={"Retry-After": str(error.retry_after_s)})


def _written(document: Document, wanted: list[list[Run]], results: list[Joined]) -> bytes:
    """The document with each paragraph's translation put back, as a file (work for a
    thread, not the event loop: thousands of paragraphs)."""
    for runs, result in zip(wanted, results):
        put_back(runs, result)
    return document.to_bytes()


async def _read_form(request: Request) -> tuple[UploadFile, dict[str, str]]:
    """The uploaded `file` and the other fields (text) of a multipart form."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise HTTPException(400, "Invalid request: send the file as multipart/form-data "
                            "with fields file, source and target")
    try:
        form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    except HTTPException:
        raise
    except Exception as error:  # python-multipart's parse errors have no common base
        raise HTTPException(400, f"Invalid request: the form cannot be read ({error})") \
            from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise HTTPException(400, "Invalid request: missing file parameter")
    fields = {key: value for key, value in form.items() if isinstance(value, str)}
    return upload, fields


async def _translate_paragraphs(translate: TranslateTexts, paragraphs: list[str],
                                settings: ServeSettings, language: str) -> list[Joined]:
    """Each paragraph's translation, its sentences sent in chunks within the server's
    max_characters and max_sentences, one chunk after another."""
    split = await asyncio.to_thread(
        lambda: [sentences_of(paragraph, language) for paragraph in paragraphs])
    flat = [sentence for sentences in split for sentence in sentences]
    found: list[Joined] = []
    for chunk in _chunks(flat, settings.max_characters, max(1, settings.max_sentences // 2)):
        found += await _translate_chunk(translate, chunk)
    joined, offset = [], 0
    for sentences in split:
        joined.append(join_sentences(sentences, found[offset: offset + len(sentences)]))
        offset += len(sentences)
    return joined


async def _translate_chunk(translate: TranslateTexts, chunk: list[str]) -> list[Joined]:
    """One translation per sentence of `chunk` (a sentence too long for the model, which
    the service halves, comes back joined); the chunk halved and sent again where the
    service finds it too large."""
    try:
        # A sentence the model cannot read stays as it is, as LibreTranslate's /translate
        # gives it back.
        results = await translate(chunk, Search(alignments=True, already_split=True,
                                                keep_unreadable=True))
    except TooLarge:
        if len(chunk) == 1:
            raise
        middle = len(chunk) // 2
        return (await _translate_chunk(translate, chunk[:middle])
                + await _translate_chunk(translate, chunk[middle:]))
    return [_joined(result) for result in results]


def _joined(result: dict[str, Any]) -> Joined:
    """One sentence's translation with its alignment over the sentence's words: its
    pieces' joined, or through a pivot the one composed over the whole text."""
    if "pivot" in result:
        alignment = result.get("alignment")
        return Joined(result["text"], None if alignment is None
                      else [tuple(pair) for pair in alignment])
    return sentences_joined(result)


def _chunks(sentences: list[str], max_characters: int, max_count: int) -> list[list[str]]:
    """`sentences` in order, in chunks of at most `max_count` and (but for a sentence
    longer alone) `max_characters`."""
    chunks: list[list[str]] = [[]]
    characters = 0
    for sentence in sentences:
        if chunks[-1] and (len(chunks[-1]) >= max_count
                           or characters + len(sentence) > max_characters):
            chunks.append([])
            characters = 0
        chunks[-1].append(sentence)
        characters += len(sentence)
    return [chunk for chunk in chunks if chunk]
