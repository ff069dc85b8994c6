"""Benchmark `nmt prepare` on a synthetic corpus: throughput and peak memory.

Writes N pairs of ~25 words a side (Zipf-distributed word-like strings, a different
word list per language) into a temporary directory, prepares them with the `files`
recipe, and prints one JSON line per figure: corpus size, pairs/s overall and per
phase, peak RSS (this process plus children, so it covers sentencepiece's threads and
anything spawned) and the CPU cores used on average.

    python bench/prepare.py --pairs 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from transformer_nmt.data.prepare import PrepareOptions, prepare

LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyzäöüéè"))


def word_list(rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` distinct word-like strings of 1 to 12 letters, shorter ones first."""
    words: set[str] = set()
    while len(words) < size:
        length = int(rng.integers(1, 13))
        words.add("".join(rng.choice(LETTERS, length)))
    return np.array(sorted(words, key=lambda word: (len(word), word)))


def write_corpus(folder: Path, pairs: int, seed: int = 0, words: int = 30_000,
                 chunk: int = 20_000) -> tuple[Path, Path]:
    """Write train.src/train.tgt of `pairs` lines, streaming chunk by chunk."""
    rng = np.random.default_rng(seed)
    vocab = [word_list(rng, words), word_list(rng, words)]
    zipf = 1.0 / np.arange(1, words + 1) ** 1.1
    zipf /= zipf.sum()
    paths = folder / "train.src", folder / "train.tgt"
    handles = [open(path, "w", encoding="utf-8") for path in paths]
    for start in range(0, pairs, chunk):
        count = min(chunk, pairs - start)
        src_lengths = np.clip(rng.normal(25, 10, count).astype(int), 1, 120)
        # The target is about as long as the source, as in a real translation.
        tgt_lengths = np.clip((src_lengths * rng.normal(1.05, 0.15, count)).astype(int), 1, 150)
        for side, lengths in enumerate((src_lengths, tgt_lengths)):
            ids = rng.choice(words, int(lengths.sum()), p=zipf)
            tokens = vocab[side][ids]
            cuts = np.cumsum(lengths)[:-1]
            handles[side].write("".join(" ".join(sentence) + "\n"
                                        for sentence in np.split(tokens, cuts)))
    for handle in handles:
        handle.close()
    return paths


def peak_rss_mb() -> float:
    """Peak resident memory of this process plus that of its largest child, in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1024  # ru_maxrss is in KiB on Linux


def emit(figure: str, **fields) -> None:
    print(json.dumps({"figure": figure, **fields}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="corpus size (default 1M)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="BPE size (default 8000)")
    parser.add_argument("--threads", type=int, help="sentencepiece threads (default: all cores)")
    parser.add_argument("--workdir", help="where to write the corpus and the data directory "
                        "(default: a temporary directory, deleted afterwards)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        src, tgt = write_corpus(folder, args.pairs)
        emit("synthetic_corpus", pairs=args.pairs,
             megabytes=round((src.stat().st_size + tgt.stat().st_size) / 2**20, 1),
             seconds=round(time.perf_counter() - start, 1),
             peak_rss_mb=round(peak_rss_mb(), 1))

        marks: list[tuple[str, float]] = []

        def log(message: str) -> None:
            marks.append((message.split()[0], time.perf_counter()))
            print(message, file=sys.stderr, flush=True)

        cpu_start = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        result = prepare(PrepareOptions(
            corpus="files", src="src", tgt="tgt", out=folder / "data",
            vocab_size=args.vocab_size, threads=args.threads,
            files={"train_src": str(src), "train_tgt": str(tgt)}), progress=False, log=log)
        seconds = time.perf_counter() - start
        cpu_end = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu_end.ru_utime - cpu_start.ru_utime) + (cpu_end.ru_stime - cpu_start.ru_stime)

        emit("prepare_pairs_per_s", pairs=args.pairs, value=round(args.pairs / seconds),
             seconds=round(seconds, 1))
        starts = {word: at for word, at in marks}
        phases = [("read_and_normalize", start, starts.get("learning")),
                  ("learn_bpe", starts.get("learning"), starts.get("encoding")),
                  ("encode_filter_write", starts.get("encoding"), start + seconds)]
        for phase, begin, end in phases:
            if begin is not None and end is not None:
                emit("prepare_phase", phase=phase, seconds=round(end - begin, 1),
                     pairs_per_s=round(args.pairs / max(end - begin, 1e-9)))
        emit("prepare_peak_rss_mb", value=round(peak_rss_mb(), 1))
        emit("prepare_cpu_cores_used", value=round(cpu / seconds, 2))
        emit("padding_efficiency", max_tokens=result.manifest["padding_efficiency"]["max_tokens"],
             value=result.manifest["padding_efficiency"]["train"])


if __name__ == "__main__":
    main()
