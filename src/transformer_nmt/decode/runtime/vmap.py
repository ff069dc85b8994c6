"""A model's lexical shortlist (transformer_nmt.data.shortlist), stored beside its model
file, and CTranslate2's vocabulary map made of it.

The shortlist of MODEL.pt is MODEL.shortlist.npz (of a safetensors model directory,
DIR/shortlist.npz): numpy arrays, read without pickle, holding the map, the settings it was
built with and the checksum of the model's weights, so that a map built for another model
(or for this one before it was trained further or calibrated) is refused rather than
used. `nmt shortlist` writes it; the CTranslate2 runtime uses it where present
(ctranslate2_search.open_ctranslate2), and `nmt export --to ctranslate2` puts it in the
exported model as CTranslate2's vmap.txt.

CTranslate2's vocabulary map is a text file of lines `SOURCE<TAB>TARGET TARGET ...`: a
source token and the target tokens it allows; the line whose source is empty lists the
tokens every sentence allows (unk, BOS and EOS it allows itself). With `use_vmap`, each
batch's output layer is cut to the targets of its sources' tokens.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from transformer_nmt.data.manifest import read_manifest
from transformer_nmt.data.shortlist import (DEFAULT_BEST, DEFAULT_FREQUENT, LexicalMap,
                                            MapStats, build_map)
from transformer_nmt.data.vocab_source import vocab_digest
from transformer_nmt.decode.runtime.ct2_cache import model_key
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_write, check_format
from transformer_nmt.model_file import InferenceModel, load_for_inference

FORMAT = "transformer-nmt-shortlist"
VERSION = 1
SUFFIX = ".shortlist.npz"
"""MODEL.pt's shortlist is MODEL.shortlist.npz."""
IN_DIRECTORY = "shortlist.npz"
"""A safetensors model directory's shortlist, inside it."""


def shortlist_path(model_path: str | Path) -> Path:
    """Where the shortlist of the model file (or safetensors directory) `model_path` is."""
    path = Path(model_path)
    return path / IN_DIRECTORY if path.is_dir() else path.with_suffix(SUFFIX)


def _remedy(model_path: str | Path) -> str:
    return (f"build it again with `nmt shortlist --model {model_path} --data DATA_DIR`, "
            "or decode with --no-shortlist")


def save_shortlist(path: str | Path, lexical_map: LexicalMap, checksum: str,
                   settings: dict[str, int | str]) -> None:
    """Write `lexical_map` of the model whose weights' checksum (hex) is `checksum` to
    `path` atomically, with the `settings` it was built with (numbers and strings)."""
    arrays = {"format": np.array(FORMAT), "version": np.array(VERSION),
              "checksum": np.array(checksum), "always": lexical_map.always,
              "offsets": lexical_map.offsets, "targets": lexical_map.targets}
    arrays.update({f"setting_{name}": np.array(value) for name, value in settings.items()})
    atomic_write(path, lambda handle: np.savez(handle, **arrays))


def read_shortlist(path: str | Path, checksum: str, vocab_size: int,
                   model_path: str | Path) -> LexicalMap:
    """The map stored at `path` for the model at `model_path` (weights' checksum
    `checksum`, hex; `vocab_size` pieces): a one-line UserError when it is damaged, of
    another format or version, or built for another model."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            record = {name: stored[name] for name in stored.files}
        check_format({"format": str(record.get("format")),
                      "version": int(record.get("version", -1))}, path, FORMAT, VERSION,
                     remedy=_remedy(model_path))
        built_for = str(record["checksum"])
        lexical_map = LexicalMap(record["always"].astype(np.int32),
                                 record["offsets"].astype(np.int64),
                                 record["targets"].astype(np.int32))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise UserError(f"{path}: damaged shortlist ({error}); {_remedy(model_path)}") from None
    if built_for != checksum:
        raise UserError(f"{path}: the shortlist of another model (weights {built_for[:12]}, "
                        f"{model_path}'s {checksum[:12]}); {_remedy(model_path)}")
    _check_map(lexical_map, vocab_size, path, model_path)
    return lexical_map


def _check_map(lexical_map: LexicalMap, vocab_size: int, path: str | Path,
               model_path: str | Path) -> None:
    """UserError unless the map's arrays fit each other and a vocabulary of `vocab_size`."""
    offsets, targets = lexical_map.offsets, lexical_map.targets
    pieces = np.concatenate([lexical_map.always, targets])
    if (len(offsets) != vocab_size + 1 or offsets[0] != 0 or offsets[-1] != len(targets)
            or np.any(np.diff(offsets) < 0)
            or (len(pieces) and (pieces.min() < 0 or pieces.max() >= vocab_size))):
        raise UserError(f"{path}: damaged shortlist (its arrays do not fit a vocabulary of "
                        f"{vocab_size}); {_remedy(model_path)}")


def model_shortlist(model: InferenceModel) -> LexicalMap | None:
    """The shortlist stored beside `model`'s file, checked against it; None where there
    is none."""
    path = shortlist_path(model.path)
    if not path.is_file():
        return None
    return read_shortlist(path, model_key(model.model, model.payload_meta), len(model.vocab),
                          model.path)


def vmap_text(lexical_map: LexicalMap, token: Callable[[int], str]) -> str:
    """`lexical_map` as CTranslate2's vocabulary map, piece i written as token(i) (which
    must hold no whitespace: CTranslate2 splits the lines at it)."""
    names = [token(i) for i in range(lexical_map.vocab_size)]
    spaced = [name for name in names if not name or any(c.isspace() for c in name)]
    if spaced:
        raise UserError(f"the piece {spaced[0]!r} cannot be written in CTranslate2's "
                        "vocabulary map, which splits at whitespace; export with "
                        "--no-shortlist")
    lines = []
    if len(lexical_map.always):
        lines.append("\t" + " ".join(names[i] for i in lexical_map.always))
    for source in range(lexical_map.vocab_size):
        entries = lexical_map.entries(source)
        if len(entries):
            lines.append(f"{names[source]}\t" + " ".join(names[i] for i in entries))
    return "".join(line + "\n" for line in lines)


def make_shortlist(model_path: str | Path, data_dir: str | Path, split: str = "train",
                   best: int = DEFAULT_BEST, frequent: int = DEFAULT_FREQUENT,
                   progress: bool = False) -> tuple[Path, MapStats]:
    """`nmt shortlist`: the shortlist of the model at `model_path` counted on `split` of
    the data directory `data_dir` (which must be encoded with the model's vocabulary;
    see transformer_nmt.data.shortlist), written beside the model (`shortlist_path`),
    where decoding finds it; `progress`: a progress bar. Returns where it went and what
    building it found."""
    model = load_for_inference(model_path)
    recorded = read_manifest(data_dir)["vocab"].get("sha256")
    ours = vocab_digest(model.vocab.to_bytes(), model.vocab.target_bytes())
    if recorded is not None and recorded != ours:
        raise UserError(f"{data_dir} was encoded with another vocabulary than {model_path} "
                        f"(SHA-256 {recorded[:12]}, the model's {ours[:12]}); give the data "
                        "directory the model was trained on")
    lexical_map, stats = build_map(data_dir, split, best, frequent, progress)
    if lexical_map.vocab_size != len(model.vocab):
        raise UserError(f"{data_dir} has a vocabulary of {lexical_map.vocab_size} pieces, "
                        f"{model_path} one of {len(model.vocab)}; give the data directory "
                        "the model was trained on")
    path = shortlist_path(model_path)
    save_shortlist(path, lexical_map, model_key(model.model, model.payload_meta),
                   {"best": best, "frequent": frequent, "split": split,
                    "data": str(Path(data_dir).resolve())})
    return path, stats
