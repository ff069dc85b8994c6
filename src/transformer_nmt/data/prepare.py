"""`nmt prepare`: turn a corpus into a data directory, resumably.

Stream the corpus -> normalize whitespace -> write the raw text of every split -> learn
the shared BPE on train (both sides) -> encode every split, filtering train -> move the
files into place -> write manifest.json last, atomically. All work happens in
DATA_DIR/.work, and DATA_DIR/.in-progress marks a preparation that has not finished: a
directory with a manifest is finished, one with the marker is an interrupted run that
the next run redoes, anything else is refused rather than overwritten. One process
prepares a directory at a time (an OS lock, DATA_DIR/.lock): a second one is refused,
rather than taking the first's marker for an interrupted run's. Memory holds one chunk
of lines at a time, whatever the corpus size.
"""

from __future__ import annotations

import datetime
import itertools
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from tqdm import tqdm

from transformer_nmt.version import __version__
from transformer_nmt.config import TrainConfig, differences
from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.binarize import IdsWriter, ids_dtype, read_ids
from transformer_nmt.data.corpora import Corpus, SourceOptions, get_corpus
from transformer_nmt.data.manifest import (FORMAT_VERSION, MANIFEST, SPM_MODEL, SPM_TARGET_MODEL,
                                            SPM_VOCAB, SPLITS,
                                           bin_path, idx_path, read_manifest, text_path)
from transformer_nmt.data.prepare_options import PrepareOptions
from transformer_nmt.data.text import CleaningFilters, LineWriter, normalize
from transformer_nmt.data.vocab import (BOS_ID, EOS_ID, PAD_ID, UNK_ID,
                                        Vocab, default_character_coverage, train_vocab)
from transformer_nmt.data.vocab_source import VocabSource, vocab_digest
from transformer_nmt.errors import UserError
from transformer_nmt.files import fsync_dir, remove_leftover_temporaries, write_json_atomic
from transformer_nmt.locks import LOCK_FILE, DirectoryLock

IN_PROGRESS = ".in-progress"
WORK = ".work"
DOWNLOADS = "downloads"
CHUNK_PAIRS = 10_000
"""Pairs encoded per call of sentencepiece's batch encoder: large enough to keep its
threads busy, small enough that a chunk's Python lists stay small."""


@dataclass
class PrepareResult:
    """The manifest of the data directory, and whether this call found it already made."""

    manifest: dict
    already_prepared: bool


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _recipe(options: PrepareOptions, corpus: Corpus) -> dict:
    """Everything that determines the directory's contents, as JSON."""
    if options.vocab is not None:
        # The reused vocabulary, by checksum, replaces the settings that would learn one.
        return {
            "corpus": options.corpus, "src_lang": options.src, "tgt_lang": options.tgt,
            "source": corpus.identity(), "vocab_sha256": options.vocab.sha256,
            "max_len": options.max_len, "max_ratio": options.max_ratio, "seed": options.seed,
            "errors": options.errors,
        }
    return {
        "corpus": options.corpus, "src_lang": options.src, "tgt_lang": options.tgt,
        "source": corpus.identity(), "vocab_size": options.vocab_size,
        "character_coverage": (options.character_coverage
                               if options.character_coverage is not None
                               else default_character_coverage(options.vocab_size)),
        "sample_sentences": options.sample_sentences, "max_len": options.max_len,
        "max_ratio": options.max_ratio, "seed": options.seed, "errors": options.errors,
    }


def _outputs(src: str, tgt: str) -> list[str]:
    """Names of every file a finished directory may hold besides the manifest."""
    names = [SPM_MODEL, SPM_VOCAB, SPM_TARGET_MODEL]
    for split in SPLITS:
        for lang in (src, tgt):
            names += [f"{split}.{lang}", f"{split}.{lang}.bin", f"{split}.{lang}.idx"]
    return names


def _remove_partial(out: Path) -> None:
    """Delete what an unfinished run left (its downloads stay)."""
    marker = out / IN_PROGRESS
    try:
        recipe = json.loads(marker.read_text(encoding="utf-8"))["recipe"]
        names = _outputs(recipe["src_lang"], recipe["tgt_lang"])
    except (OSError, ValueError, KeyError, TypeError):
        names = []
    shutil.rmtree(out / WORK, ignore_errors=True)
    for name in names:
        (out / name).unlink(missing_ok=True)
    remove_leftover_temporaries(out)
    marker.unlink(missing_ok=True)


def _check_out(out: Path, recipe: dict, log: Callable[[str], None]) -> dict | None:
    """The manifest if `out` is finished with the same recipe; None if there is work to
    do (after removing an interrupted run's files); UserError for anything else."""
    if (out / MANIFEST).exists():
        manifest = read_manifest(out)
        if manifest.get("recipe") == recipe:
            return manifest
        changes = differences(manifest.get("recipe", {}), recipe)
        raise UserError(
            f"{out} already holds data prepared with a different recipe "
            f"({'; '.join(changes)}); choose another out directory, or delete {out} to prepare "
            "it again"
        )
    if (out / IN_PROGRESS).exists():
        log(f"{out}: found an unfinished preparation (interrupted run); starting it again")
        _remove_partial(out)
        return None
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file; out must be a directory, new or empty")
    if out.exists() and any(p.name not in (DOWNLOADS, LOCK_FILE) for p in out.iterdir()):
        raise UserError(
            f"{out} exists, is not empty and holds no prepared data (no {MANIFEST}); "
            "choose an empty or new out directory"
        )
    return None


def _may_hold_data(out: Path) -> bool:
    """Whether `out` is a place `prepare` may lock: missing, or a directory holding a
    preparation (finished or not) or nothing but downloads. Anything else is refused by
    `_check_out` and must not even get a lock file."""
    if not out.exists():
        return True
    return out.is_dir() and ((out / MANIFEST).exists() or (out / IN_PROGRESS).exists() or all(
        path.name in (DOWNLOADS, LOCK_FILE) for path in out.iterdir()))


def _read_corpus(corpus: Corpus, work: Path, src: str, tgt: str, progress: bool) -> dict[str, int]:
    """Pass 1: normalized text of every split into `work`; train goes to
    train.unfiltered.* until the length filters, which need the vocabulary, have run."""
    counts = {}
    for split in corpus.splits:
        name = "train.unfiltered" if split == "train" else split
        pairs = corpus.pairs(split)
        count = 0
        with LineWriter(work / f"{name}.{src}") as src_out, \
                LineWriter(work / f"{name}.{tgt}") as tgt_out, \
                tqdm(desc=f"read {split}", unit=" pairs", disable=None if progress else True,
                     file=sys.stderr) as bar:
            while chunk := list(itertools.islice(pairs, CHUNK_PAIRS)):
                src_out.write_lines([normalize(s) for s, _ in chunk])
                tgt_out.write_lines([normalize(t) for _, t in chunk])
                count += len(chunk)
                bar.update(len(chunk))
        counts[split] = count
    return counts


def _chunks(src_file: Path, tgt_file: Path, size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Aligned chunks of `size` lines of two text files written by pass 1. Normalized
    text has no control character but the "\\n" ending each line, so Python's fast
    text-mode reader (splitting on "\\n" only) reads it safely."""
    with open(src_file, encoding="utf-8", newline="\n") as src, \
            open(tgt_file, encoding="utf-8", newline="\n") as tgt:
        while src_lines := [line[:-1] for line in itertools.islice(src, size)]:
            yield src_lines, [line[:-1] for line in itertools.islice(tgt, size)]


def _encoded(chunks: Iterator[tuple[list[str], list[str]]], vocab: Vocab
             ) -> Iterator[tuple[list[str], list[str], list[list[int]], list[list[int]]]]:
    """(src lines, tgt lines, src ids, tgt ids) per chunk. sentencepiece releases the GIL
    while it encodes, so the next chunk is encoded in the background while the caller
    writes this one: reading, filtering and writing no longer leave the cores idle."""
    def encode(chunk: tuple[list[str], list[str]]):
        src_lines, tgt_lines = chunk
        if vocab.target is not vocab:
            return (src_lines, tgt_lines, vocab.encode_batch(src_lines),
                    vocab.target.encode_batch(tgt_lines))
        # One call for both sides keeps every sentencepiece thread busy.
        ids = vocab.encode_batch(src_lines + tgt_lines)
        return src_lines, tgt_lines, ids[:len(src_lines)], ids[len(src_lines):]

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for chunk in chunks:
            ahead = pool.submit(encode, chunk)
            if pending is not None:
                yield pending.result()
            pending = ahead
        if pending is not None:
            yield pending.result()


def _binarize(split: str, work: Path, src: str, tgt: str, vocab: Vocab, dtype: np.dtype,
              filters: CleaningFilters | None, pairs: int, progress: bool
              ) -> tuple[dict, dict[str, int]]:
    """Pass 2: encode a split into .bin/.idx; for train, also apply `filters` and write
    the kept pairs' text. Returns the split's sizes and the pairs each filter removed."""
    name = "train.unfiltered" if filters else split
    removed: dict[str, int] = {}
    unk = [0, 0]
    chunks = _chunks(work / f"{name}.{src}", work / f"{name}.{tgt}", CHUNK_PAIRS)
    with ExitStack() as files:
        # Every writer is closed if the split is complete and aborted otherwise.
        text_writers = [files.enter_context(LineWriter(text_path(work, split, lang)))
                        for lang in (src, tgt)] if filters else []
        src_out = files.enter_context(
            IdsWriter(bin_path(work, split, src), idx_path(work, split, src), dtype))
        tgt_out = files.enter_context(
            IdsWriter(bin_path(work, split, tgt), idx_path(work, split, tgt), dtype))
        bar = files.enter_context(tqdm(total=pairs, desc=f"encode {split}", unit=" pairs",
                                       disable=None if progress else True, file=sys.stderr))
        for src_lines, tgt_lines, src_ids, tgt_ids in _encoded(chunks, vocab):
            bar.update(len(src_lines))
            if filters:
                keep, chunk_removed = filters.apply(
                    np.fromiter(map(len, src_ids), np.int64, len(src_ids)),
                    np.fromiter(map(len, tgt_ids), np.int64, len(tgt_ids)))
                removed = {k: removed.get(k, 0) + v for k, v in chunk_removed.items()}
                if not keep.all():
                    src_lines, tgt_lines, src_ids, tgt_ids = (
                        list(itertools.compress(x, keep))
                        for x in (src_lines, tgt_lines, src_ids, tgt_ids))
                text_writers[0].write_lines(src_lines)
                text_writers[1].write_lines(tgt_lines)
            unk[0] += int(np.count_nonzero(src_out.add(src_ids) == UNK_ID))
            unk[1] += int(np.count_nonzero(tgt_out.add(tgt_ids) == UNK_ID))
    sizes = {"pairs": src_out.sequences, "src_tokens": src_out.tokens,
             "tgt_tokens": tgt_out.tokens, "src_max_len": src_out.max_length,
             "tgt_max_len": tgt_out.max_length, "src_unk": unk[0], "tgt_unk": unk[1]}
    return sizes, removed


def prepare(options: PrepareOptions, *, command: str | None = None, progress: bool = True,
            log: Callable[[str], None] = _stderr) -> PrepareResult:
    """Make (or find already made) the data directory `options.out`.

    A finished directory with the same recipe is returned as is; one with another recipe
    is a UserError; an interrupted run's leftovers are removed and the work redone.
    `command` is recorded in the manifest; `log` receives progress messages.
    """
    started = time.time()
    src, tgt, out = options.src, options.tgt, Path(options.out)
    for lang in (src, tgt):
        if not lang or not all(c.isalnum() or c in "-_" for c in lang):
            raise UserError(f"language code {lang!r} must be letters, digits, '-' or '_'")
    if src == tgt:
        raise UserError(f"source and target language are both {src!r}; they must differ")
    filters = CleaningFilters(options.max_len, options.max_ratio)
    filters.validate()
    corpus = get_corpus(options.corpus, src, tgt, SourceOptions(
        mirror=options.mirror, cache_dir=out / DOWNLOADS, errors=options.errors,
        seed=options.seed, files=dict(options.files), valid_size=options.valid_size))
    recipe = _recipe(options, corpus)
    lock = (DirectoryLock(out, "prepared", "prepare into another directory")
            if _may_hold_data(out) else nullcontext())
    with lock:
        finished = _check_out(out, recipe, log)
        if finished is not None:
            log(f"{out} is already prepared with these settings; nothing to do")
            return PrepareResult(finished, already_prepared=True)
        manifest = _prepare_into(out, options, corpus, recipe, filters, progress, log,
                                 command=command, started=started)
    for note in corpus.notes:
        log(note)
    return PrepareResult(manifest, already_prepared=False)


def _prepare_into(out: Path, options: PrepareOptions, corpus: Corpus, recipe: dict,
                  filters: CleaningFilters, progress: bool, log: Callable[[str], None], *,
                  command: str | None, started: float) -> dict:
    """The work of `prepare` in the locked `out`, from the marker to the manifest (which
    records `command` and the seconds since `started`), which it returns. A mistake in
    the input leaves nothing behind but the downloads."""
    work = out / WORK
    work.mkdir(parents=True)
    write_json_atomic(out / IN_PROGRESS, {"recipe": recipe})
    try:
        manifest = _make(options, corpus, recipe, filters, work, progress, log)
    except UserError:
        _remove_partial(out)
        raise
    manifest["command"] = command
    manifest["seconds"] = round(time.time() - started, 1)
    for name in _outputs(options.src, options.tgt):
        if (work / name).exists():
            (work / name).replace(out / name)
    fsync_dir(out)
    write_json_atomic(out / MANIFEST, manifest)
    (out / IN_PROGRESS).unlink()
    shutil.rmtree(work)
    return manifest


def _make(options: PrepareOptions, corpus: Corpus, recipe: dict, filters: CleaningFilters,
          work: Path, progress: bool, log: Callable[[str], None]) -> dict:
    """The work of `prepare` inside `work`; returns the manifest (without command/time)."""
    src, tgt = options.src, options.tgt
    read = _read_corpus(corpus, work, src, tgt, progress)
    if read["train"] == 0:
        raise UserError(f"corpus {options.corpus} {src}-{tgt} gave no training pairs")
    vocab = _vocab_for(options, recipe, work, log)
    log(f"encoding {sum(read.values())} pairs with {vocab.threads} thread(s)")
    dtype = ids_dtype(len(vocab))
    splits, removed = {}, {}
    for split in corpus.splits:
        splits[split], removed[split] = _binarize(
            split, work, src, tgt, vocab, dtype, filters if split == "train" else None,
            read[split], progress)
    for lang in (src, tgt):
        (work / f"train.unfiltered.{lang}").unlink()
    if splits["train"]["pairs"] == 0:
        raise UserError(f"every training pair was removed by the filters {removed['train']}; "
                        "raise max_len or max_ratio")
    # The paper's batch, cut as one process without a memory cap cuts it.
    budget = TrainConfig().batch_tokens
    efficiency = _padding_efficiency(work, src, tgt, dtype, budget, options.seed)
    return {
        "format_version": FORMAT_VERSION,
        "corpus": options.corpus,
        "src_lang": src,
        "tgt_lang": tgt,
        "splits": splits,
        "filters": {
            "max_len": options.max_len,
            "max_ratio": options.max_ratio,
            "applied_to": "train",
            "removed": removed["train"],
            "read": read,
            "dropped_by_corpus": corpus.dropped,
        },
        "vocab": _vocab_record(options, recipe, vocab),
        "dtype": dtype.str,
        "padding_efficiency": {"max_tokens": budget, "train": round(efficiency, 4)},
        "notes": corpus.notes,
        "recipe": recipe,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "transformer_nmt_version": __version__,
    }


def _vocab_for(options: PrepareOptions, recipe: dict, work: Path,
               log: Callable[[str], None]) -> Vocab:
    """The vocabulary to encode with: the one `options` reuses, or one learned from the
    unfiltered train split in `work`; with `options`' threads."""
    src, tgt = options.src, options.tgt
    if options.vocab is not None:
        vocab = _reuse_vocab(options.vocab, work, log)
    else:
        log(f"learning a {options.vocab_size}-piece BPE vocabulary from up to "
            f"{options.sample_sentences} sentences of train")
        vocab = train_vocab([work / f"train.unfiltered.{src}", work / f"train.unfiltered.{tgt}"],
                            work / Path(SPM_MODEL).stem, options.vocab_size,
                            character_coverage=recipe["character_coverage"],
                            sample_sentences=options.sample_sentences, seed=options.seed,
                            threads=options.threads)
    if options.threads:
        vocab.threads = vocab.target.threads = options.threads
    return vocab


def _padding_efficiency(work: Path, src: str, tgt: str, dtype: np.dtype, budget: int,
                        seed: int) -> float:
    """The share of real tokens in batches of `budget` tokens of the binarized train
    split in `work`."""
    # (n,) token counts of the kept training pairs: the only memory here that grows with
    # the corpus, a few tens of bytes a pair while the batches are estimated.
    src_lengths, tgt_lengths = (
        np.diff(read_ids(bin_path(work, "train", lang), idx_path(work, "train", lang), dtype)[1])
        .astype(np.int32) for lang in (src, tgt))
    return TokenBatchSampler(src_lengths, tgt_lengths, budget, seed=seed).padding_efficiency()


def _reuse_vocab(source: VocabSource, work: Path, log: Callable[[str], None]) -> Vocab:
    """Write `source`'s sentencepiece model (and its piece list, as sentencepiece's own
    .vocab file has it) into `work`; return the vocabulary."""
    vocab = source.vocab()
    log(f"encoding with the {len(vocab)}-piece vocabulary of {source.kind} {source.path}")
    (work / SPM_MODEL).write_bytes(source.model)
    if source.target is not None:
        (work / SPM_TARGET_MODEL).write_bytes(source.target)
    (work / SPM_VOCAB).write_text(
        "".join(f"{vocab.piece(i)}\t{vocab.score(i):g}\n" for i in range(len(vocab))),
        encoding="utf-8")
    return vocab


def _vocab_record(options: PrepareOptions, recipe: dict, vocab: Vocab) -> dict:
    """The manifest's "vocab": the file, its size and ids, its checksum, and how it was
    made: learned here with these settings, or reused from `options.vocab`."""
    record = {"file": SPM_MODEL, "size": len(vocab), "model_type": "bpe",
              "pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID,
              "sha256": vocab_digest(vocab.to_bytes(), vocab.target_bytes())}
    if vocab.target_bytes() is not None:
        record["target_file"] = SPM_TARGET_MODEL
    if options.vocab is not None:
        record["source"] = options.vocab.record()
    else:
        record.update(character_coverage=recipe["character_coverage"],
                      sample_sentences=options.sample_sentences, source={"kind": "learned"})
    return record
