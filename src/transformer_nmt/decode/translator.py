"""Text in, text out: normalize → sentencepiece encode → search → decode, in input order.

Lines are read ahead in a buffer, sorted by length into batches (little padding, so
little wasted compute), translated, and given back in their original order.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import normalize
from transformer_nmt.decode.alignment import word_alignment
from transformer_nmt.decode.precision import prepare_model
from transformer_nmt.decode.search import Hypothesis, SpecialIds, search
from transformer_nmt.errors import UserError
from transformer_nmt.memory import release_free_memory
from transformer_nmt.model_file import InferenceModel, load_for_inference
from transformer_nmt.runtime import resolve_runtime

logger = logging.getLogger(__name__)

_PROCESS_THREADS = torch.get_num_threads()
"""The threads PyTorch had when this module was imported: the cores decoding may use
(workers > 1 change the process's setting, so it is read once)."""

SENTENCES_IN_FLIGHT = 32
"""Sentences decoded at once by default, shared by the workers."""


def default_workers(device: str | torch.device) -> int:
    """Batches decoded at once by default: two on a CPU with two or more cores, else one.

    Decoding multiplies a few dozen rows by each weight matrix per step, products that
    split poorly across cores. On a 2-core CPU, two batches of 16 sentences, one per
    core, translated 1.3-1.4 times as fast as one batch of 32 on both cores, in less
    peak memory (bench/RESULTS.md).
    """
    return 2 if torch.device(device).type == "cpu" and _PROCESS_THREADS >= 2 else 1


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


class Translator:
    """Translates lines of raw text with a loaded model, batched by length, order kept."""

    def __init__(self, inference_model: InferenceModel, decode: DecodeConfig = DecodeConfig(),
                 device: str | torch.device | None = "cpu", precision: str = "fp32",
                 batch_size: int | None = None, max_tokens: int | None = None,
                 alignments: bool = False, buffer_size: int = 1024,
                 workers: int | None = None) -> None:
        """batch_size: most sentences per batch (None: SENTENCES_IN_FLIGHT shared by the
        workers, so 16 each for two); max_tokens: most padded source tokens per batch as
        well (None: no such limit); buffer_size: lines read ahead and sorted by length (1
        translates line by line, as interactive use needs); workers: batches translated
        at once by that many threads (None: `default_workers`, or 1 with buffer_size 1),
        each running its tensor operations on its share of the cores: on a CPU, above 1
        it sets torch.set_num_threads(cores // workers) for the whole process.

        A decoding step is many small operations, which keep cores busier as separate
        streams than split across cores: on a 2-core CPU, 2 workers with batches of 32
        translated 1.5-2.1 times faster than 1 worker using both cores, at the price of
        two batches' memory, and 2 workers with batches of 16 (the default) 1.3-1.4
        times faster in less memory (bench/RESULTS.md)."""
        self.device = resolve_runtime(device, precision).device
        if workers is None:
            # Line by line there is only ever one batch, which should have every core.
            workers = default_workers(self.device) if buffer_size > 1 else 1
        if workers < 1 or any(limit is not None and limit < 1
                              for limit in (batch_size, max_tokens)):
            raise UserError("--batch-size, --max-tokens and --workers must be at least 1")
        if batch_size is None:
            batch_size = max(SENTENCES_IN_FLIGHT // workers, 1)
        self.vocab = inference_model.vocab
        self.model = prepare_model(inference_model.model, device, precision)
        self.precision = precision
        self.decode = decode
        self.batch_size, self.max_tokens = batch_size, max_tokens
        self.alignments = alignments
        self.buffer_size = max(buffer_size, 1)
        max_positions = inference_model.model.cfg.max_positions
        self.src_limit = source_limit(max_positions, decode)
        self.max_len_limit = max_positions - 1
        self.special = SpecialIds(self.vocab.pad_id, self.vocab.bos_id, self.vocab.eos_id)
        self._warned_long = False
        self._lines_seen = 0
        self.workers = workers
        if workers > 1 and self.device.type == "cpu":
            torch.set_num_threads(max(_PROCESS_THREADS // workers, 1))

    @classmethod
    def from_file(cls, path: str | Path, decode: DecodeConfig = DecodeConfig(),
                  device: str | torch.device | None = "cpu", precision: str = "fp32",
                  batch_size: int | None = None, max_tokens: int | None = None,
                  alignments: bool = False, buffer_size: int = 1024,
                  workers: int | None = None) -> "Translator":
        """A Translator for the model file at `path` (UserError if it is not one)."""
        # Loaded onto the CPU: prepare_model moves it after converting it, so that the
        # device never holds the float model and the converted one at once.
        return cls(load_for_inference(path, "cpu"), decode, device, precision,
                   batch_size, max_tokens, alignments, buffer_size, workers)

    def translate(self, lines: Iterable[str]) -> Iterator[str]:
        """The best translation of each line, in order; an empty line gives an empty line."""
        for translations in self.translate_nbest(lines):
            yield translations[0].text

    def translate_nbest(self, lines: Iterable[str]) -> Iterator[list[Translation]]:
        """The decode.nbest best translations of each line, best first, in input order."""
        buffer: list[str] = []
        for line in lines:
            buffer.append(line)
            if len(buffer) == self.buffer_size:
                yield from self._translate_buffer(buffer)
                buffer = []
        if buffer:
            yield from self._translate_buffer(buffer)

    def _encode(self, lines: list[str]) -> list[list[int]]:
        ids = self.vocab.encode_batch([normalize(line) for line in lines])
        for offset, sentence in enumerate(ids):
            if len(sentence) > self.src_limit:
                if not self._warned_long:
                    logger.warning(
                        "input line %d has %d subword tokens, more than the %d this model can "
                        "translate (max_positions %d, output up to %g * length + %d); "
                        "translating its first %d tokens; later long lines are truncated "
                        "without further warning", self._lines_seen + offset + 1,
                        len(sentence), self.src_limit, self.max_len_limit + 1,
                        self.decode.max_len_a, self.decode.max_len_b, self.src_limit)
                    self._warned_long = True
                del sentence[self.src_limit:]
        self._lines_seen += len(lines)
        return ids

    def _batches(self, order: list[int], ids: list[list[int]]) -> Iterator[list[int]]:
        """Consecutive runs of `order` (longest first) within the batch limits."""
        batch: list[int] = []
        for index in order:
            width = len(ids[batch[0]]) + 1 if batch else len(ids[index]) + 1
            too_many_tokens = self.max_tokens is not None and (len(batch) + 1) * width > self.max_tokens
            if batch and (len(batch) == self.batch_size or too_many_tokens):
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch

    def _translate_buffer(self, lines: list[str]) -> list[list[Translation]]:
        ids = self._encode(lines)
        empty = [] if self.alignments else None
        results = [[Translation("", 0.0, [], empty)] for _ in lines]
        order = sorted((i for i, sentence in enumerate(ids) if sentence),
                       key=lambda i: -len(ids[i]))
        batches = list(self._batches(order, ids))
        with ThreadPoolExecutor(self.workers) as pool:
            # Tensor operations release the GIL, so the threads decode in parallel.
            found = pool.map(lambda batch: self._search([ids[i] for i in batch]), batches)
            for batch, hyps_of_batch in zip(batches, found):
                for index, hyps in zip(batch, hyps_of_batch):
                    results[index] = [self._translation(ids[index], hyp) for hyp in hyps]
        return results

    def _search(self, batch: list[list[int]]) -> list[list[Hypothesis]]:
        width = max(len(sentence) for sentence in batch) + 1
        src = torch.full((len(batch), width), self.special.pad, dtype=torch.long)
        for row, sentence in enumerate(batch):
            src[row, : len(sentence)] = torch.tensor(sentence, dtype=torch.long)
            src[row, len(sentence)] = self.special.eos
        found = search(self.model, src.to(self.device), self.decode, self.special,
                       self.max_len_limit, need_attention=self.alignments)
        release_free_memory()
        return found

    def _translation(self, src_ids: list[int], hyp: Hypothesis) -> Translation:
        alignment = None
        if hyp.attention is not None:
            to_piece = self.vocab.processor.id_to_piece
            alignment = word_alignment([to_piece(i) for i in src_ids],
                                       [to_piece(i) for i in hyp.tokens], hyp.attention)
        return Translation(self.vocab.decode(hyp.tokens), hyp.score, hyp.tokens, alignment)

