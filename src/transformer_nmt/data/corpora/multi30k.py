"""The `multi30k` recipe: Multi30k task 1 image captions (29000 / 1014 / 1000; en, de, fr).

The raw gzipped captions are read from the multi30k/dataset repository on GitHub, or
from a copy of it given as the mirror option or NMT_MULTI30K_MIRROR (see `fetch`).
"""

from __future__ import annotations

from pathlib import Path

from transformer_nmt.data.corpora.base import Corpus, Pairs, SourceOptions, check_languages
from transformer_nmt.data.corpora.fetch import Remote, fetch
from transformer_nmt.data.text import read_parallel

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/"
MULTI30K_FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
"""Split -> the file name the repository gives it (test is the 2016 Flickr test set)."""
MULTI30K_LANGUAGES = ["en", "de", "fr"]
MULTI30K = Remote(
    url=MULTI30K_URL, env="NMT_MULTI30K_MIRROR", cache_name="multi30k",
    hint="set mirror (or NMT_MULTI30K_MIRROR) to a directory or URL holding a copy of the "
         "multi30k/dataset repository")


class Multi30k(Corpus):
    """Caption pairs line by line from the two languages' files of each split."""

    name = "multi30k"
    description = ("Multi30k task 1 image captions, 29000 / 1014 / 1000 pairs, en, de, fr; "
                   "mirror or NMT_MULTI30K_MIRROR for a local copy")

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        check_languages(self.name, src, tgt, MULTI30K_LANGUAGES)

    def identity(self) -> dict:
        """The repository paths of the splits' files."""
        return {"files": {split: f"data/task1/raw/{name}.{{lang}}.gz"
                          for split, name in MULTI30K_FILES.items()}}

    def _file(self, split: str, lang: str) -> Path:
        """The local file of `split` in `lang`, downloaded first if need be."""
        relative = f"data/task1/raw/{MULTI30K_FILES[split]}.{lang}.gz"
        return fetch(self.options, MULTI30K, relative, missing=lambda mirror: (
            f"{mirror / relative}: no such file; the mirror must be a copy of the "
            "multi30k/dataset repository (holding data/task1/raw/)"))

    def pairs(self, split: str) -> Pairs:
        """(source, target) captions of `split`, in file order."""
        return read_parallel(self._file(split, self.src), self._file(split, self.tgt),
                             self.options.errors)
