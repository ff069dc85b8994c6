"""`nmt import`: a pretrained model of another toolkit written as one of our model files,
complete or not at all, never over a user's file unless asked to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer_nmt.errors import UserError
from transformer_nmt.model_file import save_model_file
from transformer_nmt.pretrained.fairseq import read_fairseq_checkpoint
from transformer_nmt.pretrained.huggingface import read_marian_dir
from transformer_nmt.pretrained.marian import read_marian_release

SOURCES = ("huggingface", "marian", "fairseq")
"""The toolkits `nmt import` reads."""
READERS = {"huggingface": read_marian_dir, "marian": read_marian_release}
"""The reader of each source that is one directory -> a model file's payload (fairseq's
checkpoint takes its dictionaries and sentencepiece model besides)."""


def import_model(source: str, path: str | Path, out: str | Path, force: bool = False,
                 languages: tuple[str | None, str | None] = (None, None), *,
                 dict_dir: str | Path | None = None, bpe: str = "sentencepiece",
                 bpe_model: str | Path | None = None,
                 bpe_codes: str | Path | None = None) -> dict[str, Any]:
    """Read the pretrained model at `path` (a directory of `source`'s format; fairseq: its
    checkpoint file, with its dictionaries in `dict_dir`, default the checkpoint's
    directory, and its `bpe` sentencepiece model `bpe_model` or BPE codes `bpe_codes`)
    and write it as the model file `out`;
    returns its payload. `languages` (source, target) replace what the model records,
    where given."""
    path, out = Path(path), Path(out)
    if source not in SOURCES:
        raise UserError(f"cannot import from {source!r}; choose one of {', '.join(SOURCES)}")
    if source == "fairseq":
        if not path.is_file():
            raise UserError(f"{path}: no such file; give the fairseq checkpoint file "
                            "(checkpoint_best.pt)")
    elif not path.is_dir():
        raise UserError(f"{path}: no such directory; give the model's directory (what "
                        "save_pretrained wrote, or what a Marian release unzips to)")
    if source != "fairseq" and (dict_dir or bpe_model or bpe_codes):
        raise UserError("--dict-dir, --bpe-model and --bpe-codes are for --from fairseq")
    if out.exists() and not force:
        raise UserError(f"{out} already exists; choose another --out or pass --force to "
                        "replace it")
    if source == "fairseq":
        payload = read_fairseq_checkpoint(path, Path(dict_dir) if dict_dir else path.parent,
                                          bpe, Path(bpe_model) if bpe_model else None,
                                          languages, Path(bpe_codes) if bpe_codes else None)
    else:
        payload = READERS[source](path)
    src_lang, tgt_lang = languages
    if src_lang or tgt_lang:
        recorded = (payload.get("src_lang"), payload.get("tgt_lang"))
        src_lang, tgt_lang = src_lang or recorded[0], tgt_lang or recorded[1]
        if not (src_lang and tgt_lang):
            raise UserError("give both --src-lang and --tgt-lang: the model records no "
                            "languages of its own")
        payload["src_lang"], payload["tgt_lang"] = src_lang, tgt_lang
    save_model_file(payload, out)
    return payload
