"""The `files` recipe: the user's own parallel text, as two plain files per split or one
TSV file (source<TAB>target) per split; plain or gzipped.

Without valid files, a seeded random slice of train is held out as valid.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from transformer_nmt.data.corpora.base import Corpus, Pairs, SourceOptions
from transformer_nmt.data.text import count_lines, read_parallel, read_tsv
from transformer_nmt.errors import UserError


def default_valid_size(train_pairs: int) -> int:
    """Pairs held out of train for valid when none is given: 5%, at most 1000."""
    return min(1000, max(1, train_pairs // 20))


class Files(Corpus):
    """The splits the user gave; valid is always there (held out of train if not given),
    test only when given."""

    name = "files"
    description = ("your own text: files['train_src'] and files['train_tgt'] (and valid, "
                   "test) plain files, or files['train_tsv'] (and valid, test) with "
                   "source<TAB>target lines")

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        self.inputs: dict[str, tuple[Path, ...]] = {}
        files = options.files
        for split in ("train", "valid", "test"):
            plain = [files.get(f"{split}_src"), files.get(f"{split}_tgt")]
            tsv = files.get(f"{split}_tsv")
            if tsv and any(plain):
                raise UserError(f"give either files['{split}_tsv'] or files['{split}_src'] and "
                                f"files['{split}_tgt'], not both")
            if any(plain) and not all(plain):
                missing = "files['{}_{}']".format(split, "tgt" if plain[0] else "src")
                raise UserError(f"files['{split}_src'] and files['{split}_tgt'] go together; "
                                f"{missing} is missing")
            paths = (Path(tsv),) if tsv else tuple(Path(p) for p in plain) if all(plain) else ()
            for path in paths:
                if not path.is_file():
                    raise UserError(f"{path}: no such file")
            if paths:
                self.inputs[split] = paths
        if "train" not in self.inputs:
            raise UserError("the files corpus needs files['train_src'] and files['train_tgt'], "
                            "or files['train_tsv']")
        self._held_out: np.ndarray | None = None
        self.splits = tuple(split for split in ("train", "valid", "test")
                            if split in self.inputs or split == "valid")

    def identity(self) -> dict:
        """Each input file's absolute path, size and modification time, and how valid is
        made, so that changed files call for a new data directory."""
        inputs = {}
        for split, paths in self.inputs.items():
            inputs[split] = [{"path": str(path.resolve()), "bytes": path.stat().st_size,
                              "mtime_ns": path.stat().st_mtime_ns} for path in paths]
        held_out = None if "valid" in self.inputs else self.options.valid_size or "default"
        return {"inputs": inputs, "valid_held_out_of_train": held_out}

    def _held_out_lines(self) -> np.ndarray:
        """(size,) sorted line numbers of train that form valid, chosen on first use (it
        takes counting the lines of train, which a finished directory need not pay)."""
        if self._held_out is None:
            count = count_lines(self.inputs["train"][0])
            if count < 2:
                raise UserError(f"{self.inputs['train'][0]} has {count} line(s): too few to "
                                "hold some out for validation; give valid files too "
                                "(files['valid_src'] and files['valid_tgt'], or "
                                "files['valid_tsv'])")
            size = min(self.options.valid_size or default_valid_size(count), count - 1)
            rng = np.random.default_rng(self.options.seed)
            self._held_out = np.sort(rng.choice(count, size, replace=False))
            self.notes.append(f"no valid files given: {size} random pairs of train (seed "
                              f"{self.options.seed}) held out as the valid split")
        return self._held_out

    def _read(self, split: str) -> Pairs:
        """All pairs of the files given for `split`."""
        paths = self.inputs[split]
        if len(paths) == 1:
            return read_tsv(paths[0], self.options.errors)
        return read_parallel(paths[0], paths[1], self.options.errors)

    def pairs(self, split: str) -> Pairs:
        """(source, target) lines of `split`, in file order."""
        if "valid" in self.inputs:
            yield from self._read(split)
            return
        if split == "test":
            yield from self._read("test")
            return
        # Train with a held-out slice: valid takes the listed line numbers, train the rest.
        held = self._held_out_lines()
        cursor = 0
        for number, pair in enumerate(self._read("train")):
            is_held = cursor < len(held) and held[cursor] == number
            cursor += is_held
            if is_held == (split == "valid"):
                yield pair
