"""An existing vocabulary to reuse (`nmt prepare --vocab FROM`), and its fingerprint.

A fine-tuned model keeps its embeddings, so new data must be encoded with the very
sentencepiece model the model was trained with. FROM may be a data directory of
`nmt prepare` or a sentencepiece `.model` file (read here), or a model file, whose
reading belongs to transformer_nmt.model_file (`vocab_source` there accepts all three).
The SHA-256 of the serialized sentencepiece model (and of the target side's, where it
has its own) identifies a vocabulary: data directories record it, and `nmt train
--init-from` compares it with the model's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_nmt.data.manifest import MANIFEST, SPM_MODEL, SPM_TARGET_MODEL, read_manifest
from transformer_nmt.data.bpe_vocab import BpeVocab
from transformer_nmt.data.stored_vocab import read_vocab
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError


def vocab_digest(model: bytes, target: bytes | None = None) -> str:
    """SHA-256 (hex) of a serialized sentencepiece model, followed by the target side's
    where it has one: the vocabulary's identity."""
    digest = hashlib.sha256(model)
    if target is not None:
        digest.update(b"\0target side\0" + target)
    return digest.hexdigest()


def load_data_vocab(data_dir: str | Path) -> Vocab | BpeVocab:
    """The vocabulary of a prepared data directory: spm.model, and spm.target.model
    where the target side has its own."""
    data_dir = Path(data_dir)
    return read_vocab((data_dir / SPM_MODEL).read_bytes(), str(data_dir / SPM_MODEL),
                      _target_model(data_dir))


def data_vocab_digest(data_dir: str | Path) -> str:
    """`vocab_digest` of a prepared data directory's vocabulary files."""
    data_dir = Path(data_dir)
    return vocab_digest((data_dir / SPM_MODEL).read_bytes(), _target_model(data_dir))


def _target_model(data_dir: Path) -> bytes | None:
    path = data_dir / SPM_TARGET_MODEL
    return path.read_bytes() if path.is_file() else None


@dataclass(frozen=True)
class VocabSource:
    """A vocabulary read from elsewhere: the sentencepiece model bytes and their origin."""

    model: bytes
    """The serialized sentencepiece model, as a data directory's spm.model holds it."""
    kind: str
    """'model file', 'data directory' or 'sentencepiece model'."""
    path: str
    """Where it was read, resolved."""
    target: bytes | None = None
    """The target side's serialized sentencepiece model, where it has its own."""

    @property
    def sha256(self) -> str:
        return vocab_digest(self.model, self.target)

    def vocab(self) -> Vocab | BpeVocab:
        """The vocabulary itself (UserError naming the path if the bytes are not a usable,
        complete one)."""
        return read_vocab(self.model, self.path, self.target)

    def record(self) -> dict[str, Any]:
        """What a manifest keeps of it: kind, path and checksum."""
        return {"kind": self.kind, "path": self.path, "sha256": self.sha256}


def read_vocab_file_or_dir(path: str | Path) -> VocabSource:
    """The vocabulary of a prepared data directory or of a sentencepiece model file;
    UserError naming `path` for anything else."""
    path = Path(path)
    if path.is_dir():
        if not (path / MANIFEST).exists():
            raise UserError(f"{path} is a directory but not a prepared data directory (no "
                            f"{MANIFEST}); give a data directory, a model file or a "
                            "sentencepiece .model file as the vocabulary")
        recorded = read_manifest(path).get("vocab")
        source = VocabSource((path / SPM_MODEL).read_bytes(), "data directory",
                             str(path.resolve()), _target_model(path))
        if isinstance(recorded, dict) and recorded.get("sha256") not in (None, source.sha256):
            raise UserError(f"{path / SPM_MODEL} is not the vocabulary the data directory was "
                            f"prepared with ({MANIFEST} records another checksum); prepare "
                            "the data again")
    elif path.is_file():
        source = VocabSource(path.read_bytes(), "sentencepiece model", str(path.resolve()))
    else:
        raise UserError(f"{path}: no such vocabulary; give a model file, a data directory "
                        "of `nmt prepare` or a sentencepiece .model file")
    source.vocab()
    return source
