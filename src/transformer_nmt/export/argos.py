"""Export to an Argos Translate package (.argosmodel), which argostranslate and through it
LibreTranslate install and run.

A package is a zip archive of one directory holding metadata.json (the language codes,
the package version, ...), the CTranslate2 model in model/ and the sentencepiece model as
sentencepiece.model; Argos Translate encodes text with the latter, translates the pieces
with CTranslate2 (which appends the end-of-sentence token, see export/ctranslate2.py) and
decodes the result.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from transformer_nmt.data.bpe_vocab import BpeVocab
from transformer_nmt.errors import UserError
from transformer_nmt.export.ctranslate2 import (require_ctranslate2, unsupported_reason,
                                                write_ctranslate2)
from transformer_nmt.export.output import check_destination, replace_path
from transformer_nmt.export.provenance import provenance
from transformer_nmt.files import temporary_directory
from transformer_nmt.model_file import load_for_inference, model_languages

SUFFIX = ".argosmodel"


def package_metadata(from_code: str, to_code: str, package_version: str,
                     record: dict) -> dict:
    """metadata.json of a translation package, with the source model's record."""
    return {
        "package_version": package_version,
        "argos_version": "1.0",
        "type": "translate",
        "from_code": from_code,
        "from_name": from_code,
        "to_code": to_code,
        "to_name": to_code,
        "code": f"{from_code}_{to_code}",
        "name": f"{from_code} to {to_code} (transformer-nmt)",
        "description": f"{from_code} to {to_code}, a Transformer trained with transformer-nmt",
        "transformer_nmt": record,
    }


def _language_code(code: str | None, side: str, flag: str) -> str:
    if not code:
        raise UserError(f"the model file does not record its {side} language; give it "
                        f"with {flag}")
    if not all(c.isalnum() or c in "-_" for c in code):
        raise UserError(f"{flag} {code!r} must be letters, digits, '-' or '_'")
    return code


def export_argos(model_path: str | Path, out: str | Path, quantization: str = "float32",
                 force: bool = False, *, from_code: str | None = None,
                 to_code: str | None = None, package_version: str = "1.0") -> Path:
    """`nmt export --to argos`: the model file at `model_path` as the Argos Translate
    package `out` (a .argosmodel zip); the language codes default to the model's own.
    Returns `out`."""
    out = Path(out)
    if out.suffix != SUFFIX:
        raise UserError(f"{out}: an Argos Translate package's name ends with {SUFFIX}")
    check_destination(out, force)
    require_ctranslate2()
    model = load_for_inference(model_path)
    if isinstance(model.vocab, BpeVocab):
        raise UserError(f"{model_path}: cannot export to Argos Translate, which cuts text with "
                        "a sentencepiece model, while this model's text is Moses tokens cut by "
                        "BPE codes; export it --to ctranslate2 instead")
    reason = unsupported_reason(model.model)
    if reason is not None:
        raise UserError(f"{model_path}: cannot export to Argos Translate, whose runtime is "
                        f"CTranslate2: {reason}")
    languages = model_languages(model.payload_meta) or (None, None)
    from_code = _language_code(from_code or languages[0], "source", "--from-code")
    to_code = _language_code(to_code or languages[1], "target", "--to-code")
    record = provenance(model.payload_meta, Path(model_path))
    record["quantization"] = quantization
    # Built aside, as every export is (see export/output.py): only the archive moves out.
    # The CTranslate2 model (at most the model file's size) and the archive of it.
    with temporary_directory(out, 2 * Path(model_path).stat().st_size) as work:
        # The archive's one top-level directory, as argospm's packages have.
        root = work / out.stem
        root.mkdir()
        write_ctranslate2(model, root / "model", quantization)
        (root / "sentencepiece.model").write_bytes(model.vocab.to_bytes())
        metadata = package_metadata(from_code, to_code, package_version, record)
        (root / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n",
                                            encoding="utf-8")
        (root / "README.md").write_text(
            f"# {metadata['name']}\n\nExported by {record['exported_by']} from "
            f"{record['source_model']} (preset {record['preset']}, "
            f"{record['training_steps']} training steps).\n", encoding="utf-8")
        archive = work / "package.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as package:
            for path in sorted(root.rglob("*")):
                package.write(path, path.relative_to(work).as_posix())
        replace_path(archive, out)
    return out
