"""Every model a server translates with: the files of --model and --models, each read and
checked once at start for its language pair; loaded when first needed (or at start),
each with its own queue and batches, its weights shared by all its decoding slots; the
least recently used unloaded beyond --max-models-loaded."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

from transformer_nmt.data.language_codes import target_languages
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.memory import release_free_memory
from transformer_nmt.model_dir import is_model_dir
from transformer_nmt.model_file import (inference_model_of, load_for_inference, model_languages,
                                        payload_vocab, read_model_file)
from transformer_nmt.serve.batcher import Batcher
from transformer_nmt.serve.metrics import ServerMetrics
from transformer_nmt.serve.model_card import file_card, model_card
from transformer_nmt.serve.pairs import ModelEntry, PairRoutes, Route
from transformer_nmt.serve.pivot import check_pivot_search, translate_through
from transformer_nmt.serve.service import Search, TranslationService
from transformer_nmt.serve.settings import ServeSettings

logger = logging.getLogger(__name__)


def model_paths(models: Sequence[str | Path], directories: Sequence[str | Path]) -> list[Path]:
    """The model files of a server: each of `models`, then in each of `directories` every
    .pt file and every safetensors model directory right under it, in name order.
    UserError for a directory that is missing or holds none, or a file given twice."""
    paths = [Path(model) for model in models]
    for directory in map(Path, directories):
        if not directory.is_dir():
            raise UserError(f"--models {directory}: no such directory; give a directory "
                            "holding model files (.pt) or exported model directories")
        found = sorted(path for path in directory.iterdir()
                       if (path.is_file() and path.suffix == ".pt") or is_model_dir(path))
        if not found:
            raise UserError(f"--models {directory}: no model files (.pt) or exported "
                            "model directories in it")
        paths += found
    seen: set[Path] = set()
    for path in paths:
        if path.resolve() in seen:
            raise UserError(f"{path}: given twice; give each model once")
        seen.add(path.resolve())
    if not paths:
        raise UserError("no model to serve: give --model MODEL.pt (repeatable) or --models DIR")
    return paths


@dataclass
class Scanned:
    """A model file read at start: its entry and its description, and its contents where
    it is loaded at start (read once, not twice)."""

    entry: ModelEntry
    card: dict[str, Any]
    payload: dict[str, Any] | None = None


def scan_models(paths: Sequence[Path], keep: int | None = None) -> list[Scanned]:
    """Each file read and checked (a one-line UserError naming the first that is not a
    model) for its language pair and description; the first `keep` (None: all) keep what
    was read, for ModelPool.load_at_start, and the others let it go: only the models in
    use stay in memory. Refuses two models of one pair, and, among several, a model that
    records no languages (nothing would say where to send a request)."""
    scanned = []
    for number, path in enumerate(paths):
        payload = read_model_file(path)
        languages = model_languages(payload) or (None, None)
        # read_model_file checked that the vocabulary has vocab_size pieces
        card = file_card(path, payload, payload["vocab_size"], None)
        kept = payload if keep is None or number < keep else None
        scanned.append(Scanned(ModelEntry(path, path.name, *languages,
                                          tokens=target_tokens(payload)), card, kept))
        del payload
    if len(scanned) > 1:
        pairs: dict[tuple[str | None, str | None], Path] = {}
        for item in scanned:
            entry = item.entry
            if entry.source is None or entry.target is None:
                raise UserError(f"{entry.path}: the model records no language pair, so a "
                                "server with several models cannot route to it; serve it "
                                "alone")
            for target in entry.targets:
                if (entry.source, target) in pairs:
                    raise UserError(f"{pairs[entry.source, target]} and {entry.path} both "
                                    f"translate {entry.source}-{target}; serve one of them")
                pairs[entry.source, target] = entry.path
    return scanned


def target_tokens(payload: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """(language, token) of each target-language token of a multilingual model's
    vocabulary, by the codes clients use ('fr', '>>fra<<'); none for a one-pair model."""
    vocab = payload_vocab(payload)
    return tuple(target_languages(vocab.language_tokens).items())


@dataclass
class LoadedModel:
    """A model in memory: its service (translator, queue and batches), its card, and who
    is using it."""

    service: TranslationService
    card: dict[str, Any]
    in_use: int = 0
    last_used: float = field(default_factory=time.monotonic)


class ModelUnavailable(Exception):
    """A model read at start could not be loaded when it was needed (its file changed or
    went away); the message names it and why."""


class ModelPool:
    """The server's models, loaded on demand and unloaded least recently used first once
    more than settings.max_models_loaded are in memory (never one a request is using: a
    pivot needs two at once, so the count can pass the limit while they work)."""

    def __init__(self, scanned: Sequence[Scanned], options: TranslatorOptions,
                 settings: ServeSettings, metrics: ServerMetrics) -> None:
        self.routes = PairRoutes([item.entry for item in scanned])
        self._read = {item.entry.path: item.payload for item in scanned
                      if item.payload is not None}
        self.cards = {item.entry.path: item.card for item in scanned}
        # The server has one token budget, its queue's: a translator cutting the batches it
        # is handed by another would split what the queue formed.
        self.options = replace(options, max_tokens=settings.max_batch_tokens)
        self.settings, self.metrics = settings, metrics
        self.loaded: dict[Path, LoadedModel] = {}
        self._loading: dict[Path, asyncio.Lock] = {}
        self._started = False
        self.defaults = options.decode

    def load_at_start(self) -> None:
        """Load the first models before serving: all of them, or the first
        max_models_loaded."""
        wanted = self.routes.entries[: self.settings.max_models_loaded]
        for entry in wanted:
            self.loaded[entry.path] = self._load(entry)
        self.metrics.models_loaded.set(len(self.loaded))
        self._read.clear()  # what was read for them and not used is let go

    @property
    def alive(self) -> bool:
        """Whether every loaded model's batcher is forming batches."""
        return all(model.service.batcher.alive for model in self.loaded.values())

    def card(self, entry: ModelEntry) -> dict[str, Any]:
        """What /v1/models says of `entry`: its card, the languages it translates into
        (a multilingual model's, by its tokens), whether it is loaded, and (once it was)
        the precision it decodes in."""
        return {**self.cards[entry.path], "target_languages": list(entry.targets),
                "loaded": entry.path in self.loaded}

    def start(self) -> None:
        """Start the loaded models' batchers on the running event loop."""
        self._started = True
        for model in self.loaded.values():
            model.service.batcher.start()

    async def stop(self) -> None:
        """Finish every queued sentence of every model, then stop."""
        for model in list(self.loaded.values()):
            await model.service.batcher.stop()

    async def translate(self, route: Route, texts: list[str], search: Search,
                        html: bool = False) -> list[dict[str, Any]]:
        """service.translate_texts of the route's model, or of its two through the pivot
        (serve/pivot.py)."""
        if route.pivot is None:
            async with self.using(route.hops[0]) as service:
                return await service.translate_texts(texts, search, html, route.tokens[0])
        check_pivot_search(search, route.pivot)
        async with self.using(route.hops[0]) as first, self.using(route.hops[1]) as second:
            return await translate_through(first, second, texts, search, html, route.pivot,
                                           route.tokens)

    @asynccontextmanager
    async def using(self, entry: ModelEntry) -> AsyncIterator[TranslationService]:
        """`entry`'s service, loaded first if it is not, kept loaded until the block ends."""
        model = await self._loaded(entry)
        model.in_use += 1
        model.last_used = time.monotonic()
        try:
            yield model.service
        finally:
            model.in_use -= 1
            model.last_used = time.monotonic()
        await self._unload_beyond_limit()

    async def _loaded(self, entry: ModelEntry) -> LoadedModel:
        lock = self._loading.setdefault(entry.path, asyncio.Lock())
        async with lock:  # two requests for one unloaded model load it once
            if entry.path not in self.loaded:
                started = time.perf_counter()
                try:
                    model = await asyncio.to_thread(self._load, entry)
                except UserError as error:
                    raise ModelUnavailable(f"the model for {entry.pair} could not be "
                                           f"loaded: {error}") from None
                if self._started:
                    model.service.batcher.start()
                self.loaded[entry.path] = model
                self.metrics.models_loaded.set(len(self.loaded))
                logger.info("loaded %s (%s) in %.1f s", entry.name, entry.pair,
                            time.perf_counter() - started)
            return self.loaded[entry.path]

    def _load(self, entry: ModelEntry) -> LoadedModel:
        """`entry`'s model in memory with its translator, batcher and service."""
        payload = self._read.pop(entry.path, None)
        inference_model = (load_for_inference(entry.path, "cpu") if payload is None
                           else inference_model_of(payload, entry.path, "cpu"))
        del payload
        translator = Translator(inference_model, self.options)
        card = model_card(inference_model, translator.options.precision)
        self.cards[entry.path] = card
        batcher = Batcher(translator, self.metrics, max_batch_tokens=self.settings.max_batch_tokens,
                          max_wait_s=self.settings.max_wait_ms / 1000,
                          max_queue=self.settings.max_queue, busy_elsewhere=self._busy_beside)
        service = TranslationService(translator, batcher, self.settings, card["source_language"])
        self.metrics.model_loads.inc()
        return LoadedModel(service, card)

    def _busy_beside(self, batcher: Batcher) -> int:
        """Slots at work in the other models' batchers than `batcher`."""
        return sum(model.service.batcher.busy_slots for model in self.loaded.values()
                   if model.service.batcher is not batcher)

    async def _unload_beyond_limit(self) -> None:
        """Unload idle models, least recently used first, while more than the limit are
        loaded."""
        limit = self.settings.max_models_loaded
        while limit is not None and len(self.loaded) > limit:
            idle = [(model.last_used, path) for path, model in self.loaded.items()
                    if model.in_use == 0]
            if not idle:
                return
            _, path = min(idle)
            model = self.loaded.pop(path)
            self.metrics.models_loaded.set(len(self.loaded))
            await model.service.batcher.stop()
            del model
            # The weights' pages go back to the OS now, not at some later allocation.
            release_free_memory()
            logger.info("unloaded %s: more than %d models were loaded", path.name, limit)
