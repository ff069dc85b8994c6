"""Token ids ⇄ memory-mapped arrays with an offsets index.

One side of one split is two files: `{split}.{lang}.bin`, the ids of every sentence
concatenated (little-endian uint16, or int32 when the vocabulary has more than 65535
pieces), and `{split}.{lang}.idx`, little-endian int64 offsets into it, one more than
there are sentences: sentence i is ids[offsets[i]:offsets[i + 1]]. Stored ids carry no
BOS or EOS. Reading maps the files into memory, so opening a split of 36M pairs costs
nothing until pairs are touched, and worker processes share the pages.
"""

from __future__ import annotations

import itertools
import mmap
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from transformer_nmt.data.manifest import bin_path, idx_path, read_manifest, text_path
from transformer_nmt.errors import UserError
from transformer_nmt.files import AllOrNothing, AtomicFile

OFFSET_DTYPE = np.dtype("<i8")


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest stored dtype that holds every id of a vocabulary of `vocab_size`."""
    return np.dtype("<u2") if vocab_size <= 65535 else np.dtype("<i4")


class IdsWriter(AllOrNothing):
    """Streams sequences of token ids into a .bin/.idx pair.

    Both files are written as `AtomicFile`s and renamed into place by `close`, so an
    interrupted run never leaves a file that looks complete. Use as a context manager:
    an exception inside the block deletes the temporary files.
    """

    def __init__(self, bin_file: str | Path, idx_file: str | Path, dtype: np.dtype) -> None:
        self.bin_file, self.idx_file = Path(bin_file), Path(idx_file)
        self.dtype = np.dtype(dtype)
        self._files = (AtomicFile(self.bin_file), AtomicFile(self.idx_file))
        self._bin, self._idx = (file.handle for file in self._files)
        self.sequences = 0
        """Sequences written so far."""
        self.tokens = 0
        """Ids written so far."""
        self.max_length = 0
        """Length of the longest sequence written so far."""
        self._idx.write(np.zeros(1, OFFSET_DTYPE).tobytes())

    def add(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """Append a chunk of sequences (lists of ids, as `Vocab.encode_batch` returns);
        returns their ids as the flat array that was written."""
        lengths = np.fromiter(map(len, sequences), np.int64, count=len(sequences))
        flat = np.fromiter(itertools.chain.from_iterable(sequences), self.dtype,
                           count=int(lengths.sum()))
        self._bin.write(flat.tobytes())
        offsets = self.tokens + np.cumsum(lengths)
        self._idx.write(offsets.astype(OFFSET_DTYPE).tobytes())
        self.sequences += len(sequences)
        self.tokens += int(lengths.sum())
        if len(lengths):
            self.max_length = max(self.max_length, int(lengths.max()))
        return flat

    def close(self) -> None:
        """Flush, fsync and rename both files into place."""
        for file in self._files:
            file.close()

    def abort(self) -> None:
        """Close and delete the temporary files."""
        for file in self._files:
            file.abort()


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    """A read-only array over the whole file, backed by mmap (an empty file cannot be mapped)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return np.zeros(0, dtype)
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise UserError(f"{path}: missing from the data directory; prepare it again") from None
    if size % dtype.itemsize:
        raise UserError(f"{path}: size {size} is not a multiple of {dtype.itemsize}; prepare again")
    return np.frombuffer(mapped, dtype)


def read_ids(bin_file: str | Path, idx_file: str | Path,
             dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The memory-mapped (ids, offsets) of one side, checked against each other."""
    ids = _map(Path(bin_file), np.dtype(dtype))
    offsets = _map(Path(idx_file), OFFSET_DTYPE)
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids):
        raise UserError(f"{idx_file} does not match {bin_file}; prepare the data again")
    return ids, offsets


class ParallelData:
    """One split of a data directory: aligned source and target token ids, memory-mapped.

    `pair(i)` returns views into the mapped files (no copy); `src_lengths` and
    `tgt_lengths` are computed on first use, 4 bytes per pair and side.
    """

    def __init__(self, data_dir: str | Path, split: str, src_lang: str, tgt_lang: str,
                 dtype: np.dtype) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.src_lang = src_lang
        self.tgt_lang = tgt_lang
        self.dtype = np.dtype(dtype)
        self._src, self._src_offsets = read_ids(bin_path(data_dir, split, src_lang),
                                                idx_path(data_dir, split, src_lang), self.dtype)
        self._tgt, self._tgt_offsets = read_ids(bin_path(data_dir, split, tgt_lang),
                                                idx_path(data_dir, split, tgt_lang), self.dtype)
        if len(self._src_offsets) != len(self._tgt_offsets):
            raise UserError(
                f"{self.data_dir}: {split} has {len(self._src_offsets) - 1} {src_lang} and "
                f"{len(self._tgt_offsets) - 1} {tgt_lang} sentences; prepare the data again"
            )

    def __len__(self) -> int:
        return len(self._src_offsets) - 1

    def __reduce__(self):
        # Pickled for DataLoader workers as a recipe to map the files again, never as data.
        return (ParallelData, (self.data_dir, self.split, self.src_lang, self.tgt_lang,
                               self.dtype.str))

    @cached_property
    def src_lengths(self) -> np.ndarray:
        """(n,) int32 source token counts, specials excluded."""
        return np.diff(self._src_offsets).astype(np.int32)

    @cached_property
    def tgt_lengths(self) -> np.ndarray:
        """(n,) int32 target token counts, specials excluded."""
        return np.diff(self._tgt_offsets).astype(np.int32)

    @property
    def src_text_path(self) -> Path:
        """The split's normalized source text, line i belonging to pair i."""
        return text_path(self.data_dir, self.split, self.src_lang)

    @property
    def tgt_text_path(self) -> Path:
        """The split's normalized target text (the BLEU references), line i for pair i."""
        return text_path(self.data_dir, self.split, self.tgt_lang)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, target ids) of pair `i`, read-only views without BOS or EOS."""
        if not 0 <= i < len(self):
            raise IndexError(f"pair {i} out of range for {len(self)} pairs")
        i = int(i)
        return (self._src[self._src_offsets[i]:self._src_offsets[i + 1]],
                self._tgt[self._tgt_offsets[i]:self._tgt_offsets[i + 1]])

    __getitem__ = pair

    def check_ids(self, vocab_size: int) -> None:
        """UserError if a token id lies outside the vocabulary (a damaged or foreign
        .bin file), before an embedding lookup fails on it. One pass over the mapped
        ids: a fraction of a second even for the paper's corpus."""
        for lang, ids in ((self.src_lang, self._src), (self.tgt_lang, self._tgt)):
            if len(ids) and int(ids.max()) >= vocab_size:
                raise UserError(
                    f"{bin_path(self.data_dir, self.split, lang)}: token id {int(ids.max())} "
                    f"is outside the vocabulary of {vocab_size}; the file is damaged or from "
                    "another data directory: prepare the data again")


def load_split(data_dir: str | Path, split: str) -> ParallelData:
    """Open split 'train', 'valid' or 'test' of a finished data directory."""
    manifest = read_manifest(data_dir)
    splits = manifest["splits"]
    if split not in splits:
        raise UserError(
            f"{data_dir} has no {split!r} split; it has {', '.join(splits) or 'none'}"
        )
    data = ParallelData(data_dir, split, manifest["src_lang"], manifest["tgt_lang"],
                        np.dtype(manifest["dtype"]))
    data.check_ids(manifest["vocab"]["size"])
    return data
