"""Text in, text out: normalize → sentencepiece encode → search → decode, in input order.

Lines are read ahead in a buffer, sorted by length into batches (little padding, so
little wasted compute), translated, and given back in their original order.
"""

from __future__ import annotations

import copy
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import normalize
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.decode.alignment import word_alignment
from transformer_nmt.decode.constrained import constrained_beam_search
from transformer_nmt.decode.ensemble import Ensemble
from transformer_nmt.decode.precision import prepare_model
from transformer_nmt.decode.search import Hypothesis, SpecialIds, attach_details, search
from transformer_nmt.decode.threads import default_workers
from transformer_nmt.errors import UserError
from transformer_nmt.memory import release_free_memory
from transformer_nmt.model_file import InferenceModel, load_for_inference, model_languages
from transformer_nmt.runtime import DEFAULT_DEVICE, resolve_runtime

logger = logging.getLogger(__name__)

ROWS_IN_FLIGHT = 128
"""Decoder rows (sentences × hypotheses per sentence) decoded at once by default,
shared by the workers: the matrix products of a step are faster per row with more rows,
so greedy search gets more sentences than beam search (see `sentences_in_flight`)."""


def sentences_in_flight(decode: DecodeConfig) -> int:
    """Sentences decoded at once by default, shared by the workers: ROWS_IN_FLIGHT rows,
    but at least 32 sentences and at most 96.

    Greedy search gets faster with more sentences at once up to about the upper bound,
    and hardly faster past it, while memory keeps growing: each sentence keeps its
    encoder-decoder keys and values whatever its rows. Beam search's hypotheses per
    sentence bring the count down, beam 4's to the lower bound (bench/RESULTS.md, "more
    sentences per batch for greedy search").
    """
    rows_per_sentence = decode.nbest if decode.sampling else decode.beam
    return min(max(ROWS_IN_FLIGHT // rows_per_sentence, 32), 96)


@dataclass
class Translation:
    """One translation of one input line."""

    text: str
    """The detokenized translation."""
    score: float
    """log P(Y | X) / lp(Y), see transformer_nmt.decode.search."""
    tokens: list[int]
    """The generated token ids, without BOS and EOS."""
    alignment: list[tuple[int, int]] | None = None
    """(source word, target word) pairs, 0-based over whitespace-separated words: each
    target subword aligned to the source subword it attends to most; when asked for."""
    token_scores: list[float] | None = None
    """log P of each token given the source and the tokens before it, the end of sentence
    last (len(tokens) + 1 values, summing to log P(Y | X); none for an empty input line,
    which is not translated); when asked for."""

    def pieces(self, vocab: Vocab) -> list[str]:
        """The subword pieces of `tokens` in `vocab` (▁ marks a word start)."""
        return [vocab.piece(token) for token in self.tokens]


@dataclass(frozen=True)
class TranslationRequest:
    """One line to translate, with what its output must contain."""

    text: str
    """The source sentence, raw text."""
    prefix: str = ""
    """Raw target text the translation must start with (its subword pieces are forced,
    then the search goes on freely); whole words, as a piece boundary inside a word
    may not be one the model would choose."""
    constraints: tuple[str, ...] = ()
    """Phrases, raw target text, that the translation must contain (terminology): beam
    search constrained to their subword pieces (transformer_nmt.decode.constrained)."""


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
    """(vocab,) True for the pieces that continue the word before them: no word-start
    mark ▁ and a letter or digit (punctuation pieces end a word; specials never continue)."""
    mask = torch.tensor([not piece.startswith("▁") and any(c.isalnum() for c in piece)
                         for piece in (vocab.piece(i) for i in range(len(vocab)))])
    mask[[special.pad, special.bos, special.eos, vocab.unk_id]] = False
    return mask


@dataclass(frozen=True)
class TranslatorOptions:
    """How a Translator decodes: the search, where and in which precision, and how lines
    are batched. Fields left None are decided by `resolved`."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    """Search settings: beam, length penalty, longest output, n-best."""
    device: str | torch.device | None = DEFAULT_DEVICE
    """'cpu', 'cuda', 'cuda:N', or None for CUDA when present (the CPU for int8), as
    transformer_nmt.runtime decides."""
    precision: str = "fp32"
    """fp32, bf16 or int8 (transformer_nmt.runtime.DECODE_PRECISIONS)."""
    batch_size: int | None = None
    """Most sentences per batch (None: `sentences_in_flight` shared by the workers: for
    two, 48 each for greedy search, 32 for beam 2, 16 for beam 4 or more)."""
    max_tokens: int | None = None
    """Most source tokens per batch as well, padding included (None: no such limit)."""
    alignments: bool = False
    """Also align each translation's words with the source's (Translation.alignment)."""
    token_scores: bool = False
    """Also score each translation's tokens (Translation.token_scores)."""
    buffer_size: int = 1024
    """Lines read ahead and sorted by length into batches; 1 translates line by line, as
    interactive use needs."""
    workers: int | None = None
    """Batches translated at once, by that many threads (None: `default_workers`, or 1
    with buffer_size 1); see `decoding_threads` for their share of the cores."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_tokens", "buffer_size", "workers"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise UserError(f"{name} must be at least 1, not {value!r}")

    def resolved(self) -> "TranslatorOptions":
        """These options with the device decided (UserError for a device or precision
        that cannot run well there) and workers and batch_size filled in."""
        device = resolve_runtime(self.device, self.precision).device
        workers = self.workers
        if workers is None:
            # Line by line there is only ever one batch, which should have every core.
            workers = default_workers(device) if self.buffer_size > 1 else 1
        batch_size = self.batch_size
        if batch_size is None:
            batch_size = max(sentences_in_flight(self.decode) // workers, 1)
        return replace(self, device=device, workers=workers, batch_size=batch_size)


class Translator:
    """Translates lines of raw text with a loaded model, batched by length, order kept."""

    def __init__(self, inference_model: InferenceModel,
                 options: TranslatorOptions = TranslatorOptions()) -> None:
        """A Translator decoding with `inference_model` as `options` say; `self.options`
        holds them resolved (see `TranslatorOptions.resolved`). The model is converted in
        place (see `prepare_model`).

        The process's thread count is left alone: to give each worker its share of the
        cores, translate inside `torch_threads(decoding_threads(workers, device))` (see
        transformer_nmt.decode.threads), as `nmt translate` does."""
        self.options = options = options.resolved()
        self.vocab = inference_model.vocab
        self.languages = model_languages(inference_model.payload_meta)
        """(source, target) languages the model was trained on, where its file says."""
        self.model = prepare_model(inference_model.model, options.device, options.precision)
        max_positions = inference_model.model.cfg.max_positions
        self.src_limit = source_limit(max_positions, options.decode)
        self.max_len_limit = max_positions - 1
        self.special = SpecialIds(self.vocab.pad_id, self.vocab.bos_id, self.vocab.eos_id)
        self.word_pieces = word_piece_mask(self.vocab, self.special).to(options.device)
        """(vocab,) True for pieces that continue a word: constraints end at word ends."""
        self._warned_long = False
        self._lines_seen = 0

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
        log-probabilities averaged at every step, see transformer_nmt.decode.ensemble);
        UserError unless they share one vocabulary."""
        if len(paths) == 1:
            return cls.from_file(paths[0], options)
        loaded = [load_for_inference(path, "cpu") for path in paths]
        vocab = loaded[0].vocab.to_bytes()
        for other in loaded[1:]:
            if other.vocab.to_bytes() != vocab:
                raise UserError(f"{other.path} has another vocabulary than {loaded[0].path}; "
                                "an ensemble's models must share one (trained on one data "
                                "directory)")
            if model_languages(other.payload_meta) != model_languages(loaded[0].payload_meta):
                raise UserError(f"{other.path} and {loaded[0].path} translate different "
                                "language pairs; an ensemble's models must translate one")
        ensemble = Ensemble([member.model for member in loaded])
        first = loaded[0]
        return cls(InferenceModel(ensemble, first.vocab, first.path, first.payload_meta),
                   options)

    def variant(self, decode: DecodeConfig, alignments: bool | None = None,
                workers: int | None = None) -> "Translator":
        """A Translator sharing this one's model and vocabulary that searches with `decode`
        (and aligns words when `alignments`, with `workers` workers; each unchanged when
        None): a server holds one model and decodes each request with the settings it
        asked for."""
        other = copy.copy(self)
        if alignments is None:
            alignments = self.options.alignments
        other.options = replace(self.options, decode=decode, alignments=alignments,
                                workers=workers or self.options.workers)
        other.src_limit = source_limit(self.max_len_limit + 1, decode)
        return other

    def translate(self, lines: Iterable[str]) -> Iterator[str]:
        """The best translation of each line, in order; an empty line gives an empty line."""
        for translations in self.translate_nbest(lines):
            yield translations[0].text

    def translate_nbest(self, lines: Iterable[str | TranslationRequest]
                        ) -> Iterator[list[Translation]]:
        """The decode.nbest best translations of each line, best first, in input order
        (samples, with decode.sampling); a line may be a TranslationRequest, to force
        a prefix."""
        buffer: list[str | TranslationRequest] = []
        for line in lines:
            buffer.append(line)
            if len(buffer) == self.options.buffer_size:
                yield from self._translate_buffer(buffer)
                buffer = []
        if buffer:
            yield from self._translate_buffer(buffer)

    def source_ids(self, lines: list[str]) -> list[list[int]]:
        """Subword ids of each line (normalized, without EOS), cut to what the model can
        translate, with a warning the first time."""
        ids = self.vocab.encode_batch([normalize(line) for line in lines])
        decode = self.options.decode
        for offset, sentence in enumerate(ids):
            if len(sentence) > self.src_limit:
                if not self._warned_long:
                    logger.warning(
                        "input line %d has %d subword tokens, more than the %d this model can "
                        "translate (max_positions %d, output up to %g * length + %d); "
                        "translating its first %d tokens; later long lines are truncated "
                        "without further warning", self._lines_seen + offset + 1,
                        len(sentence), self.src_limit, self.max_len_limit + 1,
                        decode.max_len_a, decode.max_len_b, self.src_limit)
                    self._warned_long = True
                del sentence[self.src_limit:]
        self._lines_seen += len(lines)
        return ids

    def batches(self, order: list[int], ids: list[list[int]]) -> Iterator[list[int]]:
        """Consecutive runs of `order` (indices into `ids`, longest first) within the
        options' batch limits."""
        batch: list[int] = []
        for index in order:
            width = len(ids[batch[0]]) + 1 if batch else len(ids[index]) + 1
            max_tokens = self.options.max_tokens
            too_many_tokens = max_tokens is not None and (len(batch) + 1) * width > max_tokens
            if batch and (len(batch) == self.options.batch_size or too_many_tokens):
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch

    def _translate_buffer(self, items: list[str | TranslationRequest]
                          ) -> list[list[Translation]]:
        requests = [item if isinstance(item, TranslationRequest) else TranslationRequest(item)
                    for item in items]
        first_line = self._lines_seen
        ids = self.source_ids([request.text for request in requests])
        prefixes = self._prefix_ids(requests)
        constraints = self._constraint_ids(requests, first_line)
        empty = [] if self.options.alignments else None
        results = [[Translation("", 0.0, [], empty, [] if self.options.token_scores else None)]
                   for _ in requests]
        order = sorted((i for i, sentence in enumerate(ids) if sentence),
                       key=lambda i: -len(ids[i]))
        batches = list(self.batches(order, ids))

        def search_batch(batch: list[int]) -> list[list[Hypothesis]]:
            # Samples are seeded by line number, so they do not depend on the batching.
            return self._search([ids[i] for i in batch],
                                [prefixes[i] for i in batch] if prefixes else None,
                                [first_line + i for i in batch],
                                [constraints[i] for i in batch] if constraints else None)

        if self.options.workers == 1 or len(batches) == 1:
            # In the calling thread, with the thread count it has (a server's decoding
            # slot, or interactive use): no pool to start for one batch at a time.
            found: Iterable[list[list[Hypothesis]]] = map(search_batch, batches)
            self._collect(results, ids, batches, found)
            return results
        with ThreadPoolExecutor(self.options.workers) as pool:
            # Tensor operations release the GIL, so the threads decode in parallel.
            self._collect(results, ids, batches, pool.map(search_batch, batches))
        return results

    def _collect(self, results: list[list[Translation]], ids: list[list[int]],
                 batches: list[list[int]], found: Iterable[list[list[Hypothesis]]]) -> None:
        """Each batch's hypotheses, as Translations, into `results` at their lines."""
        for batch, hyps_of_batch in zip(batches, found):
            for index, hyps in zip(batch, hyps_of_batch):
                results[index] = [self._translation(ids[index], hyp) for hyp in hyps]

    def _constraint_ids(self, requests: list[TranslationRequest], first_line: int
                        ) -> list[list[list[int]]] | None:
        """Each request's constraint phrases as target token ids; None when no request
        has any. Warns about a line whose phrases cannot all fit in the longest output
        the model's positions allow (the search then misses some, rather than hang)."""
        if not any(request.constraints for request in requests):
            return None
        if self.options.decode.sampling:
            raise UserError("constraints need beam search; leave out sampling")
        found = []
        for offset, request in enumerate(requests):
            phrases = [ids for ids in self.vocab.encode_batch(
                [normalize(phrase) for phrase in request.constraints]) if ids]
            needed = sum(len(phrase) for phrase in phrases)
            if needed > self.max_len_limit:
                logger.warning(
                    "the constraints of input line %d need %d subword tokens, more than the "
                    "%d this model's outputs can have; its translation will miss some",
                    first_line + offset + 1, needed, self.max_len_limit)
            found.append(phrases)
        return found

    def _prefix_ids(self, requests: list[TranslationRequest]) -> list[list[int]] | None:
        """Each request's prefix as target token ids, cut to the longest output the
        model's positions allow; None when no request has a prefix."""
        if not any(request.prefix for request in requests):
            return None
        prefixes = self.vocab.encode_batch([normalize(request.prefix) for request in requests])
        for prefix in prefixes:
            del prefix[self.max_len_limit:]
        return prefixes

    def source_tensor(self, batch: list[list[int]]) -> torch.Tensor:
        """(len(batch), longest + 1) on the translator's device: each sentence's ids, EOS,
        then PAD."""
        width = max(len(sentence) for sentence in batch) + 1
        src = torch.full((len(batch), width), self.special.pad, dtype=torch.long)
        for row, sentence in enumerate(batch):
            src[row, : len(sentence)] = torch.tensor(sentence, dtype=torch.long)
            src[row, len(sentence)] = self.special.eos
        return src.to(self.options.device)

    def _search(self, batch: list[list[int]], prefixes: list[list[int]] | None,
                seeds: list[int], constraints: list[list[list[int]]] | None
                ) -> list[list[Hypothesis]]:
        src = self.source_tensor(batch)
        if constraints is not None and any(constraints):
            found = constrained_beam_search(self.model, src, constraints, self.options.decode,
                                            self.special, self.max_len_limit,
                                            prefixes=prefixes, word_pieces=self.word_pieces)
            if self.options.alignments or self.options.token_scores:
                attach_details(self.model, src, found, self.special,
                               attention=self.options.alignments,
                               token_scores=self.options.token_scores)
        else:
            found = search(self.model, src, self.options.decode, self.special,
                           self.max_len_limit, need_attention=self.options.alignments,
                           need_token_scores=self.options.token_scores, prefixes=prefixes,
                           seeds=seeds)
        release_free_memory()
        return found

    def _translation(self, src_ids: list[int], hyp: Hypothesis) -> Translation:
        alignment = None
        if hyp.attention is not None:
            to_piece = self.vocab.processor.id_to_piece
            alignment = word_alignment([to_piece(i) for i in src_ids],
                                       [to_piece(i) for i in hyp.tokens], hyp.attention)
        return Translation(self.vocab.decode(hyp.tokens), hyp.score, hyp.tokens, alignment,
                           hyp.token_scores)

