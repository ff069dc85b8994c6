"""The layout of a data directory and its manifest, the file that says it is finished.

```
DATA_DIR/
  manifest.json            written last, atomically: no manifest, not finished
  spm.model, spm.vocab     the shared sentencepiece BPE model and its vocabulary
  spm.target.model         the target side's, where it has its own over the same ids
                           (a vocabulary reused from an imported model: data/vocab.py)
  {split}.{lang}           normalized raw text, one sentence per line (BLEU references)
  {split}.{lang}.bin       token ids of every line, concatenated (dtype in the manifest)
  {split}.{lang}.idx       int64 offsets into .bin, one more than there are lines
  downloads/               what a recipe downloaded (multi30k, wmt14-en-de), kept for reruns
```
"""

from __future__ import annotations

import json
from pathlib import Path

from transformer_nmt.errors import UserError
from transformer_nmt.files import check_format

FORMAT_VERSION = 1
"""Bumped whenever the layout or the meaning of a stored file changes."""
MANIFEST = "manifest.json"
SPM_MODEL = "spm.model"
SPM_VOCAB = "spm.vocab"
SPM_TARGET_MODEL = "spm.target.model"
SPLITS = ("train", "valid", "test")


def text_path(data_dir: str | Path, split: str, lang: str) -> Path:
    """The normalized raw text of one side of a split."""
    return Path(data_dir) / f"{split}.{lang}"


def bin_path(data_dir: str | Path, split: str, lang: str) -> Path:
    """The concatenated token ids of one side of a split."""
    return Path(data_dir) / f"{split}.{lang}.bin"


def idx_path(data_dir: str | Path, split: str, lang: str) -> Path:
    """The offsets index of one side of a split."""
    return Path(data_dir) / f"{split}.{lang}.idx"


def read_manifest(data_dir: str | Path) -> dict:
    """The manifest of a finished data directory; UserError if there is none or it is
    unreadable or of an unknown format version."""
    path = Path(data_dir) / MANIFEST
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        raise UserError(
            f"{data_dir} is not a prepared data directory (no {MANIFEST}); run `nmt prepare`"
        ) from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: unreadable manifest: {error}") from None
    check_format(manifest, path, "transformer-nmt data directory", FORMAT_VERSION,
                 name_key=None, version_key="format_version",
                 remedy="prepare the data again with this version of `nmt prepare`")
    return manifest
