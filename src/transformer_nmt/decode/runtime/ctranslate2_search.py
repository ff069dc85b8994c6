"""The CTranslate2 runtime: a batch of token ids searched by `ctranslate2.Translator`
(beam or greedy search, n-best, a forced prefix, no repeated n-grams, a minimum length),
its hypotheses given back as the PyTorch searches give them.

What differs from the paper's search (transformer_nmt.decode.search.searches): beams are
ranked by CTranslate2's length penalty, log P / |Y|^alpha, rather than GNMT's; the score
each Hypothesis reports is still GNMT's, log P / lp(|Y|), from the same log P. One batch
has one longest output, its longest sentence's; a sentence's output that runs past its
own is cut there and scored again, EOS after it, as the paper's search would have ended
it (CTranslate2 reports the log P of tokens beyond, without EOS). PAD and BOS are left
to the model, which gives them next to nothing once trained: CTranslate2 suppresses a
token by renormalizing the rest, which would change every log P it reports, where the
paper's search only never picks them. Greedy search's score leaves out EOS's log P.
With the model's shortlist (`use_vmap`), a batch's output layer holds only the pieces its
sources offer, and log P is normalized over those.

CTranslate2 keeps `replicas` copies of the model's state, each decoding one batch at a
time on its share of the cores; calls from several threads run side by side, the GIL
released. A call that decodes alone gets a translator whose one replica has every core,
unless one thread decodes the model faster: a short search is timed both ways when that
translator is made (`faster_threads`), as on some CPUs CTranslate2's threads cost more than
they give on a lone sentence's small products (bench/RESULTS.md).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.runtime.choice import compute_type, storage_type
from transformer_nmt.decode.runtime.ct2_cache import converted_model
from transformer_nmt.decode.runtime.vmap import model_shortlist, vmap_text
from transformer_nmt.decode.search.base import Hypothesis, SpecialIds, length_penalty
from transformer_nmt.model_file import InferenceModel


class CTranslate2Search:
    """Searches with the CTranslate2 model in `directory` on `device` ('cpu' or 'cuda';
    GPU number `device_index`), computing in `compute_type`, on `cores` threads in all;
    `use_vmap`: each batch's output layer cut to its sources' shortlist (the model's
    vmap.txt, transformer_nmt.decode.runtime.vmap)."""

    def __init__(self, directory: Path, device: str, compute_type: str, cores: int,
                 device_index: int = 0, use_vmap: bool = False) -> None:
        self.directory = directory
        self.use_vmap = use_vmap
        self.device = device
        self.device_index = device_index
        self.compute_type = compute_type
        self.cores = cores
        self._translators: dict[int, object] = {}
        self.threads_per_replica: dict[int, int] = {}
        """Per count of replicas made, the threads each has (`faster_threads`'s choice)."""
        self._lock = threading.Lock()

    def translator(self, side_by_side: int) -> object:
        """The ctranslate2.Translator for `side_by_side` batches decoded at once: that many
        replicas, each on its share of the cores; made on first use and kept."""
        import ctranslate2

        replicas = max(min(side_by_side, self.cores), 1)
        with self._lock:
            if replicas not in self._translators:
                # CTranslate2 sets the OpenMP thread count it shares with torch: the
                # calling thread gets its own back.
                threads = torch.get_num_threads()

                def make(per_replica: int) -> object:
                    return ctranslate2.Translator(
                        str(self.directory), device=self.device,
                        device_index=self.device_index, compute_type=self.compute_type,
                        inter_threads=replicas, intra_threads=per_replica)

                share = max(self.cores // replicas, 1)
                per_replica, made = faster_threads(make, share, self.probe_seconds)
                self._translators[replicas] = made
                self.threads_per_replica[replicas] = per_replica
                torch.set_num_threads(threads)
            return self._translators[replicas]

    def probe_seconds(self, translator: object) -> float:
        """Seconds `translator` takes to search one PROBE_STEPS-token sentence with beam 4
        for PROBE_STEPS steps, its fastest of PROBE_REPEATS (after one untimed run)."""
        # Any ids past the special ones (an id past the vocabulary reads as unk): only
        # the time counts, not the words.
        source = [[str(token) for token in range(4, 4 + PROBE_STEPS)]]
        times = []
        for _ in range(PROBE_REPEATS + 1):
            start = time.perf_counter()
            translator.translate_batch(source, beam_size=4, min_decoding_length=PROBE_STEPS,
                                       max_decoding_length=PROBE_STEPS,
                                       use_vmap=self.use_vmap)
            times.append(time.perf_counter() - start)
        return min(times[1:])

    def search(self, decode: DecodeConfig, batch: list[list[int]], limits: list[int],
               prefixes: list[list[int]] | None, side_by_side: int = 1
               ) -> list[list[Hypothesis]]:
        """decode.nbest hypotheses of each source in `batch` (token ids without EOS), best
        first, each at most limits[i] tokens before EOS, starting with prefixes[i] where
        given; `side_by_side`: batches decoded at once by the caller's threads."""
        source = [[str(token) for token in sentence] for sentence in batch]
        target_prefix = None
        if prefixes is not None:
            target_prefix = [[str(token) for token in prefix] or None for prefix in prefixes]
            # A forced prefix is kept whole, as the PyTorch search lengthens its limit.
            limits = [max(limit, len(prefix)) for limit, prefix in zip(limits, prefixes)]
        longest = max(limits)
        translator = self.translator(side_by_side)
        results = translator.translate_batch(
            source, target_prefix, beam_size=decode.beam, num_hypotheses=decode.nbest,
            length_penalty=decode.alpha, no_repeat_ngram_size=decode.no_repeat_ngram,
            # The maximum length wins over the minimum (CTranslate2 refuses a minimum
            # beyond it); each sentence is cut at its own below.
            min_decoding_length=min(decode.min_len, longest),
            max_decoding_length=longest + 1,
            max_input_length=0, use_vmap=self.use_vmap, return_scores=True)
        found = [[_hypothesis(tokens, score, decode.alpha) for tokens, score in
                  zip(result.hypotheses, result.scores)] for result in results]
        _end_at_limits(translator, source, found, limits, decode.alpha)
        # Best first by GNMT's score, as the paper's search orders its n-best.
        return [sorted(nbest, key=lambda hypothesis: -hypothesis.score) for nbest in found]

    def close(self) -> None:
        """Let the translators go (their memory with them)."""
        with self._lock:
            self._translators.clear()


PROBE_STEPS = 16
"""Source tokens and decoding steps of the search that times a lone translator's threads:
enough steps for the thread count's cost per step to show, few enough to take a blink."""
PROBE_REPEATS = 3
"""Timed searches per thread count; the fastest counts (the others met interruptions)."""


def faster_threads(make: Callable[[int], object], share: int,
                   seconds: Callable[[object], float]) -> tuple[int, object]:
    """(threads, translator): `make(share)` when its replicas have more than one thread
    and it searches faster (`seconds`) than `make(1)`, else `make(1)`."""
    if share == 1:
        return 1, make(1)
    every, one = make(share), make(1)
    if seconds(one) <= seconds(every):
        return 1, one
    return share, every


def _hypothesis(pieces: list[str], score: float, alpha: float) -> Hypothesis:
    """Our Hypothesis of CTranslate2's output `pieces` (ids as strings, without EOS) and
    `score`, log P / |Y|^alpha with |Y| counting EOS."""
    tokens = [int(piece) for piece in pieces]
    log_prob = score * (len(tokens) + 1) ** alpha
    return Hypothesis(tokens, log_prob / length_penalty(len(tokens) + 1, alpha), log_prob)


def _end_at_limits(translator: object, source: list[list[str]],
                   found: list[list[Hypothesis]], limits: list[int], alpha: float) -> None:
    """Each hypothesis in `found` (per source) longer than its sentence's limit, in place:
    cut there and ended with EOS, as the paper's search ends it, its log P that of the
    tokens kept and EOS after them (CTranslate2's own was of tokens beyond, without EOS),
    scored over the whole vocabulary."""
    cut = [(row, rank) for row, (nbest, limit) in enumerate(zip(found, limits))
           for rank, hypothesis in enumerate(nbest) if len(hypothesis.tokens) > limit]
    if not cut:
        return
    kept = [found[row][rank].tokens[:limits[row]] for row, rank in cut]
    scored = translator.score_batch([source[row] for row, _ in cut],
                                    [[str(token) for token in tokens] for tokens in kept],
                                    max_input_length=0)
    for (row, rank), tokens, result in zip(cut, kept, scored):
        log_prob = sum(result.log_probs)  # EOS's included
        found[row][rank] = Hypothesis(tokens, log_prob / length_penalty(len(tokens) + 1, alpha),
                                      log_prob)


def open_ctranslate2(model: InferenceModel, device: torch.device, precision: str,
                     cores: int, shortlist: bool = True) -> CTranslate2Search:
    """The CTranslate2 runtime of `model` (as read, before decoding's layout changes it)
    on `device` in the precision asked for (see transformer_nmt.decode.runtime.choice),
    on `cores` threads in all on a CPU, converted now unless the cache holds it; with
    `shortlist`, its output layer cut to the model's shortlist where it has one
    (transformer_nmt.decode.runtime.vmap; UserError for one of another model)."""
    compute = compute_type(device, precision)
    vocab = model.vocab
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    lexical_map = model_shortlist(model) if shortlist else None
    vmap = None if lexical_map is None else vmap_text(lexical_map, str)
    directory = converted_model(model.model, model.payload_meta, special, vocab.unk_id,
                                len(vocab), storage_type(compute), vmap)
    on_gpu = device.type == "cuda"
    return CTranslate2Search(directory, "cuda" if on_gpu else "cpu", compute,
                             1 if on_gpu else cores, device.index or 0, vmap is not None)
