"""Text in, text out: normalize (bidi controls left out) → sentencepiece encode → search →
decode, in input order.

A Translator's resources are fixed when it is built (the model, its precision and
device, the batching, the workers and their threads); the search settings are each
call's (`translate_nbest(lines, decode=...)`), as CTranslate2's translators take them,
made once (`settings`) and carried by the call's jobs. Lines are read ahead in a buffer,
made a job (`begin`), sorted by length into batches (transformer_nmt.decode.text.batches),
translated (`translate_job`, `finish`), and given back in their original order.
ARCHITECTURE.md, "The path of a sentence", follows one line through.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import model_input
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.data.words import continues_word
from transformer_nmt.decode.text.alignment import word_alignment
from transformer_nmt.decode.text.encodings import EncodingCache
from transformer_nmt.decode.text.batches import BatchBudget, buffers, length_batches, run_in_order
from transformer_nmt.decode.quality.confidence import ConfidenceEstimator
from transformer_nmt.decode.search.constrained import constrained_beam_search
from transformer_nmt.decode.search.ensemble import load_ensemble
from transformer_nmt.decode.quality.guard import Guarded, checks, fallback_config, guard
from transformer_nmt.decode.quality.unknown import mark_unreadable, unreadable
from transformer_nmt.decode.text.options import TranslatorOptions
from transformer_nmt.decode.text.job import (  # noqa: F401 (Translation is imported from here)
    CallSettings, Translation, TranslationJob, TranslationRequest, constraint_ids, prefix_ids)
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.runtime.choice import choose_engine
from transformer_nmt.decode.runtime.ctranslate2_search import CTranslate2Search, open_ctranslate2
from transformer_nmt.decode.search.base import Hypothesis, SpecialIds
from transformer_nmt.decode.search.searches import search
from transformer_nmt.decode.search.withdrawal import stop_if_withdrawn
from transformer_nmt.decode.search.teacher_forced import attach_details
from transformer_nmt.decode.device.threads import decoding_threads, torch_threads
from transformer_nmt.memory import release_free_memory
from transformer_nmt.model_file import InferenceModel, load_for_inference, model_languages

logger = logging.getLogger(__name__)

def source_limit(max_positions: int, cfg: DecodeConfig) -> int:
    """Most source tokens (EOS excluded) a line may have so that the encoder's input and
    the longest output the decode settings allow fit the model's positions.

    Decoder positions hold BOS and the output tokens before the forced EOS:
    max_len_a * length + max_len_b + 1 <= max_positions.
    """
    limit = max_positions - 1
    if cfg.max_len_a > 0:
        limit = min(limit, math.floor((max_positions - 1 - cfg.max_len_b) / cfg.max_len_a))
    return max(limit, 1)


def word_piece_mask(vocab: Vocab, special: SpecialIds) -> torch.Tensor:
    """(vocab,) True for the pieces that continue the word before them
    (transformer_nmt.data.words.continues_word)."""
    # Each piece alone: a vocabulary whose pieces mark where a word goes on (BPE's @@)
    # rather than where one starts has none that continues the word before it.
    mask = torch.tensor([continues_word(vocab.marked_pieces([i])[0])
                         for i in range(len(vocab))])
    # By id as well: an imported vocabulary may spell its specials otherwise.
    mask[[special.pad, special.bos, special.eos, vocab.unk_id]] = False
    return mask


class Translator:
    """Translates lines of raw text with a loaded model, batched by length, order kept."""

    def __init__(self, inference_model: InferenceModel,
                 options: TranslatorOptions = TranslatorOptions()) -> None:
        """A Translator decoding with `inference_model` as `options` say; `self.options`
        holds them resolved (see `TranslatorOptions.resolved`). The model is converted in
        place (see `prepare_model`).

        Each call sets the thread count of its decoding, each batch decoding at once on
        its share of the cores (transformer_nmt.decode.device.threads), and gives the calling
        thread its own count back when it is done."""
        self.options = options = options.resolved()
        asked_precision = options.asked_precision
        engine = choose_engine(options.engine, inference_model.model,
                               torch.device(options.device), asked_precision,
                               options.batch_invariant)
        self.options = options = replace(options, engine=engine)
        self.vocab = inference_model.vocab
        self.languages = model_languages(inference_model.payload_meta)
        """(source, target) languages the model was trained on, where its file says."""
        self.ctranslate2: CTranslate2Search | None = None
        """The CTranslate2 runtime, where the options chose it; None: torch searches."""
        if engine == "ctranslate2":
            self.ctranslate2 = open_ctranslate2(inference_model, torch.device(options.device),
                                                asked_precision, options.threads,
                                                options.shortlist)
        self.model = prepare_model(inference_model.model, options.device, options.precision,
                                   batch_invariant=options.batch_invariant)
        max_positions = inference_model.model.cfg.max_positions
        self.src_limit = source_limit(max_positions, options.decode)
        """Most source tokens of a line translated with the options' decode settings."""
        self.max_len_limit = max_positions - 1
        self.special = SpecialIds(self.vocab.pad_id, self.vocab.bos_id, self.vocab.eos_id)
        self.word_pieces = word_piece_mask(self.vocab, self.special).to(options.device)
        """(vocab,) True for pieces that continue a word: constraints end at word ends."""
        self._warned_long = False
        self._encodings = EncodingCache(self.vocab)
        self.budget = BatchBudget(options.batch_size, options.max_tokens)
        """What one batch may hold (transformer_nmt.decode.text.batches)."""
        self.confidence = (ConfidenceEstimator.of(inference_model, self.model, self.special)
                           if options.confidence else None)
        """Estimates each translation's confidence; None without a calibration, or where
        the options do not ask for it."""
        self._side_by_side = threading.local()
        """The batches the calling thread's call decodes at once (`translate_job`)."""

    @classmethod
    def from_file(cls, path: str | Path,
                  options: TranslatorOptions = TranslatorOptions()) -> "Translator":
        """A Translator for the model file at `path` (UserError if it is not one)."""
        # Loaded onto the CPU: prepare_model moves it after converting it, so that the
        # device never holds the float model and the converted one at once.
        return cls(load_for_inference(path, "cpu"), options)

    @classmethod
    def from_files(cls, paths: Sequence[str | Path],
                   options: TranslatorOptions = TranslatorOptions()) -> "Translator":
        """A Translator for one model file, or an ensemble of several (their
        log-probabilities averaged at every step, see transformer_nmt.decode.search.ensemble);
        UserError unless they share one vocabulary."""
        if len(paths) == 1:
            return cls.from_file(paths[0], options)
        return cls(load_ensemble(paths), options)

    @property
    def runtime(self) -> str:
        """Which runtime searches, in which precision, in words."""
        if self.ctranslate2 is not None:
            return f"CTranslate2 {self.ctranslate2.compute_type}"
        return f"PyTorch {self.options.precision}"

    def translate(self, lines: Iterable[str], decode: DecodeConfig | None = None
                  ) -> Iterator[str]:
        """The best translation of each line, in order; an empty line gives an empty line.
        `decode`: the search settings of this call (None: the options' decode)."""
        for translations in self.translate_nbest(lines, decode):
            yield translations[0].text

    def translate_nbest(self, lines: Iterable[str | TranslationRequest],
                        decode: DecodeConfig | None = None, *, alignments: bool | None = None,
                        token_scores: bool | None = None, first_line: int = 0
                        ) -> Iterator[list[Translation]]:
        """The decode.nbest best translations of each line, best first, in input order
        (samples, with decode.sampling, seeded by each line's number, counted from
        `first_line`: a part of a file translated on its own samples as the whole file
        does); a line may be a TranslationRequest, to force a prefix or require phrases.

        decode, alignments and token_scores are this call's settings (None: the
        options'). Lines are read ahead options.buffer_size at a time, sorted by length
        into batches, and translated by options.workers workers at once."""
        settings = self.settings(decode, alignments=alignments, token_scores=token_scores)
        for buffer in buffers(lines, self.options.buffer_size):
            numbers = list(range(first_line, first_line + len(buffer)))
            job = self.begin(buffer, settings, numbers)
            yield from self.translate_job(job, self.options.workers)
            first_line += len(buffer)

    def translate_batch(self, items: list[str | TranslationRequest],
                        decode: DecodeConfig | None = None, *, alignments: bool | None = None,
                        token_scores: bool | None = None, numbers: list[int] | None = None,
                        alone: bool = False) -> list[list[Translation]]:
        """The translations of `items` as translate_nbest gives them, decoded in the
        calling thread, batch after batch: for a caller that schedules its own workers
        (the server's batcher, holding its jobs already, calls `translate_job`).

        numbers: each item's line number, which seeds its samples and names it in
        warnings (None: 0, 1, ...). alone: no other call decodes beside this one, so it
        gets every core rather than one worker's share."""
        job = self.begin(items, self.settings(decode, alignments=alignments,
                                              token_scores=token_scores), numbers)
        return self.translate_job(job, 1, 1 if alone else self.options.workers)

    def settings(self, decode: DecodeConfig | None = None, *, alignments: bool | None = None,
                 token_scores: bool | None = None) -> CallSettings:
        """One call's settings, the options' where not given: made once, at the call's
        start, and carried by its job to the end."""
        options = self.options
        return CallSettings(options.decode if decode is None else decode,
                            options.alignments if alignments is None else alignments,
                            options.token_scores if token_scores is None else token_scores)

    def source_ids(self, lines: list[str], decode: DecodeConfig | None = None,
                   numbers: list[int] | None = None) -> list[list[int]]:
        """Subword ids of each line (`model_input`: normalized, without bidi controls;
        without EOS), cut to what the model can translate with `decode` (None: the
        options'), with a warning the first time that names the line by its number in
        `numbers` (None: 0, 1, ...)."""
        decode = self.options.decode if decode is None else decode
        limit = source_limit(self.max_len_limit + 1, decode)
        ids = self.encode_batch([model_input(line) for line in lines])
        for offset, sentence in enumerate(ids):
            if len(sentence) > limit:
                if not self._warned_long:
                    logger.warning(
                        "input line %d has %d subword tokens, more than the %d this model can "
                        "translate (max_positions %d, output up to %g * length + %d); "
                        "translating its first %d tokens; later long lines are truncated "
                        "without further warning",
                        (offset if numbers is None else numbers[offset]) + 1, len(sentence),
                        limit, self.max_len_limit + 1, decode.max_len_a, decode.max_len_b, limit)
                    self._warned_long = True
                del sentence[limit:]
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Each text's (`model_input`'s) subword ids, without EOS, each a list of its
        own; the ids of texts encoded lately are kept (decode/text/encodings.py)."""
        return self._encodings.encode(texts)

    def longest_output(self, source_tokens: int, decode: DecodeConfig,
                       phrase_tokens: int = 0) -> int:
        """Most output tokens (EOS excluded) a search with `decode` may give a line of
        `source_tokens` subword tokens (cut as source_ids cuts it) whose required phrases
        have `phrase_tokens` tokens: floor(max_len_a * length + max_len_b) as
        search_base.max_lengths, raised to fit the phrases as constrained search raises
        it, within the model's positions. A bound known before decoding."""
        length = min(source_tokens, source_limit(self.max_len_limit + 1, decode))
        longest = max(math.floor(decode.max_len_a * length + decode.max_len_b), phrase_tokens)
        return min(longest, self.max_len_limit)

    def begin(self, items: list[str | TranslationRequest], settings: CallSettings | None = None,
              numbers: list[int] | None = None) -> TranslationJob:
        """The work of translating `items` with `settings` (None: the options') before any
        search: their token ids, prefixes and constraints. numbers: each item's line
        number, which seeds its samples and names it in warnings (None: 0, 1, ...)."""
        settings = self.settings() if settings is None else settings
        numbers = list(range(len(items))) if numbers is None else numbers
        requests = [item if isinstance(item, TranslationRequest) else TranslationRequest(item)
                    for item in items]
        texts = [request.text for request in requests]
        ids = self.source_ids(texts, settings.decode, numbers)
        return TranslationJob(
            settings, ids, prefix_ids(self.vocab, requests, self.max_len_limit),
            constraint_ids(self.vocab, requests, settings.decode, numbers, self.max_len_limit),
            numbers, self.unreadable_lines(texts, ids))

    def unreadable_lines(self, texts: list[str], ids: list[list[int]]) -> list[bool] | None:
        """Whether the vocabulary cannot read each of `texts` (encoded, perhaps cut, as
        `ids`; transformer_nmt.decode.quality.unknown); None when none has an unknown
        piece, as most lines have none."""
        rows = [row for row, sentence in enumerate(ids) if self.vocab.unk_id in sentence]
        if not rows:
            return None
        # The whole encoding, not the one cut to the model's length: the cut pieces spell
        # characters of the text as well (kept from source_ids' encoding, mostly).
        texts = [model_input(texts[row]) for row in rows]
        flags = [False] * len(ids)
        for row, text, whole in zip(rows, texts, self.encode_batch(texts)):
            flags[row] = unreadable(text, whole, self.vocab)
        return flags

    def finish(self, job: TranslationJob, rows: list[int], found: list[list[Hypothesis]]
               ) -> list[list[Translation]]:
        """The translations of lines `rows` of `job` from what a search `found` for them:
        the guard (decoding degenerate ones again), alignments and token scores, the
        confidence (0 for a source the vocabulary cannot read)."""
        if not rows:
            return []
        settings = job.settings
        ids = job.pick(rows)[0]
        guarded = [Guarded(hyps, None) for hyps in found]
        if checks(settings.decode):
            fallback = replace(settings, decode=fallback_config(settings.decode))

            def decode_again(again: list[int]) -> list[list[Hypothesis]]:
                return self._search(fallback, *job.pick([rows[i] for i in again]))

            guarded = guard(ids, found, self.vocab.marked_pieces, decode_again)
        if settings.alignments or settings.token_scores:
            attach_details(self.model, self.source_tensor(ids),
                           [result.hypotheses for result in guarded], self.special,
                           attention=settings.alignments, token_scores=settings.token_scores)
        translations = [[self._translation(source, hyp, result) for hyp in result.hypotheses]
                        for source, result in zip(ids, guarded)]
        if self.confidence is not None:  # from what the search gathered, calibrated models only
            self.confidence.attach(ids, translations, self.source_tensor, self.vocab.marked_pieces,
                                   [[hyp.features for hyp in result.hypotheses]
                                    for result in guarded])
        if job.unreadable is not None:  # any model: it needs no calibration
            mark_unreadable(translations, [job.unreadable[row] for row in rows])
        return translations

    def translate_job(self, job: TranslationJob, workers: int, side_by_side: int | None = None
                      ) -> list[list[Translation]]:
        """The translations of `job`'s lines, in order: sorted by length into batches
        (`budget`) that `workers` threads translate, each on its share of the cores when
        `side_by_side` batches decode at once (None: as many as this call runs at once)."""
        batches = length_batches([len(ids) for ids in job.ids], job.searched, self.budget)
        if side_by_side is None:
            side_by_side = min(workers, len(batches))
        side_by_side = max(side_by_side, 1)

        def translate_rows(rows: list[int]) -> list[list[Translation]]:
            self._side_by_side.count = side_by_side
            return self.translate_rows(job, rows)

        # Each batch decoding at once gets its share of the cores, for this call only.
        with torch_threads(decoding_threads(side_by_side, self.options.device,
                                            self.options.threads)):
            return job.in_order(run_in_order(batches, translate_rows, workers))

    def translate_rows(self, job: TranslationJob, rows: list[int]) -> list[list[Translation]]:
        """The translations of lines `rows` of `job`, searched as one batch in the calling
        thread. Samples are seeded by line number, so they do not depend on the batching.
        Withdrawn (transformer_nmt.decode.search.withdrawal) if every request waiting
        for it has gone."""
        stop_if_withdrawn()
        return self.finish(job, rows, self._search(job.settings, *job.pick(rows)))

    def close(self) -> None:
        """Let CTranslate2's translators go."""
        if self.ctranslate2 is not None:
            self.ctranslate2.close()

    def source_tensor(self, batch: list[list[int]]) -> torch.Tensor:
        """(len(batch), longest + 1) on the translator's device: each sentence's ids, EOS,
        then PAD."""
        width = max(len(sentence) for sentence in batch) + 1
        src = torch.full((len(batch), width), self.special.pad, dtype=torch.long)
        for row, sentence in enumerate(batch):
            src[row, : len(sentence)] = torch.tensor(sentence, dtype=torch.long)
            src[row, len(sentence)] = self.special.eos
        return src.to(self.options.device)

    def _search(self, settings: CallSettings, batch: list[list[int]],
                prefixes: list[list[int]] | None, seeds: list[int],
                constraints: list[list[list[int]]] | None) -> list[list[Hypothesis]]:
        """The hypotheses of the sources `batch`, searched as one batch: by CTranslate2
        where it runs this call, else by the lockstep search."""
        if self._on_ctranslate2(settings.decode, constraints):
            decode = settings.decode
            return self.ctranslate2.search(
                decode, batch, [self.longest_output(len(ids), decode) for ids in batch],
                prefixes, getattr(self._side_by_side, "count", 1))
        src = self.source_tensor(batch)
        if constraints is not None and any(constraints):
            found = constrained_beam_search(self.model, src, constraints, settings.decode,
                                            self.special, self.max_len_limit,
                                            prefixes=prefixes, word_pieces=self.word_pieces,
                                            features=self.confidence is not None)
        else:
            found = search(self.model, src, settings.decode, self.special, self.max_len_limit,
                           prefixes=prefixes, seeds=seeds,
                           features=self.confidence is not None)
        release_free_memory()
        return found

    def _on_ctranslate2(self, decode: DecodeConfig,
                        constraints: list[list[list[int]]] | None) -> bool:
        """Whether CTranslate2 searches a call of these settings: it is the runtime, and
        the call neither samples (seeded per line, whatever the batching, by the torch
        search only) nor requires phrases."""
        return (self.ctranslate2 is not None and not decode.sampling
                and not (constraints is not None and any(constraints)))

    def _translation(self, src_ids: list[int], hyp: Hypothesis, guarded: Guarded
                     ) -> Translation:
        alignment = None
        if hyp.attention is not None:
            alignment = word_alignment(self.vocab.marked_pieces(src_ids),
                                       self.vocab.target.marked_pieces(hyp.tokens),
                                       hyp.attention)
        degenerate = None if guarded.degenerate is None else list(guarded.degenerate)
        return Translation(self.vocab.decode(hyp.tokens), hyp.score, hyp.tokens, alignment,
                           hyp.token_scores, degenerate=degenerate, fallback=guarded.fallback)

