"""The layout of a data directory and its manifest, the file that says it is finished.

```
DATA_DIR/
  manifest.json            written last, atomically: no manifest, not finished
  spm.model, spm.vocab     the shared sentencepiece BPE model and its vocabulary
  {split}.{lang}           normalized raw text, one sentence per line (BLEU references)
  {split}.{lang}.bin       token ids of every line, concatenated (dtype in the manifest)
  {split}.{lang}.idx       int64 offsets into .bin, one more than there are lines
  downloads/               what a recipe downloaded (multi30k, wmt14-en-de), kept for reruns
```
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformer_nmt.errors import UserError

FORMAT_VERSION = 1
"""Bumped whenever the layout or the meaning of a stored file changes."""
MANIFEST = "manifest.json"
SPM_MODEL = "spm.model"
SPM_VOCAB = "spm.vocab"
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


def fsync_dir(path: str | Path) -> None:
    """Make renames inside directory `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, value: Any) -> None:
    """Write `value` as JSON to `path` via a temporary file, fsync and rename: a reader
    sees the old file or the whole new one, never a part."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


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
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise UserError(
            f"{path}: data format version {version}, this transformer-nmt reads version "
            f"{FORMAT_VERSION}; prepare the data again with this version"
        )
    return manifest
