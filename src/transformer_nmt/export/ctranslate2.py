"""Export to CTranslate2: the model's CTranslate2 form (transformer_nmt.decode.runtime.ct2_spec,
which the CTranslate2 runtime converts with too) written with its sentencepiece pieces as
the vocabulary and a record of its source model, for `ctranslate2.Translator` and the
tools built on it (Argos Translate, LibreTranslate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

from transformer_nmt.config import Quantization
from transformer_nmt.decode.runtime.ct2_spec import (  # noqa: F401 (exporters import them here)
    config_unsupported_reason, convert, unsupported_reason)
from transformer_nmt.decode.runtime.vmap import model_shortlist, vmap_text
from transformer_nmt.errors import UserError
from transformer_nmt.export.output import export_directory
from transformer_nmt.export.provenance import provenance
from transformer_nmt.model_file import InferenceModel, load_for_inference

QUANTIZATIONS = get_args(Quantization)
"""CTranslate2's weight types (its ACCEPTED_MODEL_TYPES): the weights are stored so."""
PROVENANCE_FILE = "transformer_nmt.json"
"""The export's record of its source model, beside CTranslate2's own files."""


def require_ctranslate2() -> None:
    """UserError saying how to install CTranslate2 when it is missing."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UserError("exporting to CTranslate2 needs the ctranslate2 package: "
                        "pip install 'transformer-nmt[ctranslate2]'") from None


def write_ctranslate2(model: InferenceModel, directory: Path,
                      quantization: str = "float32", shortlist: bool = False) -> None:
    """Write `model` as a CTranslate2 model into `directory` (replacing whatever it holds:
    callers pass a directory of their own making), its weights stored as `quantization`,
    with the source model's record beside CTranslate2's files; with `shortlist`, the
    model's shortlist where it has one (UserError for one of another model) as
    CTranslate2's vocabulary map, vmap.txt, in the pieces' spelling."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, "
                        f"not {quantization!r}")
    vocab = model.vocab
    lexical_map = model_shortlist(model) if shortlist else None
    vmap = None if lexical_map is None else vmap_text(lexical_map, vocab.piece)
    convert(model.model, [vocab.piece(i) for i in range(len(vocab))], vocab.bos_id,
            vocab.eos_id, vocab.unk_id, str(directory), quantization, vmap)
    record = provenance(model.payload_meta, model.path)
    record["quantization"] = quantization
    record["shortlist"] = vmap is not None
    (directory / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n",
                                              encoding="utf-8")


def export_ctranslate2(model_path: str | Path, out: str | Path, quantization: str = "float32",
                       force: bool = False, shortlist: bool = True) -> Path:
    """`nmt export --to ctranslate2`: the model file at `model_path` as a CTranslate2
    model directory `out`, which `ctranslate2.Translator(out)` loads; with `shortlist`,
    the model's shortlist where it has one as its vmap.txt (translate_batch's use_vmap).
    Returns `out`."""
    require_ctranslate2()
    model = load_for_inference(model_path)
    reason = unsupported_reason(model.model)
    if reason is not None:
        raise UserError(f"{model_path}: cannot export to CTranslate2: {reason}")
    # At most as large as the model file (float32 weights; quantized ones are smaller).
    with export_directory(out, force, Path(model_path).stat().st_size) as building:
        write_ctranslate2(model, building, quantization, shortlist)
    return Path(out)
