"""Export to safetensors: the weights, a JSON config and the sentencepiece model, in a
directory that `nmt translate --model DIR` reads back (format: transformer_nmt.model_dir)."""

from __future__ import annotations

from pathlib import Path

from transformer_nmt.export.output import export_directory
from transformer_nmt.export.provenance import provenance
from transformer_nmt.model_dir import write_model_dir
from transformer_nmt.model_file import read_model_file


def export_safetensors(model_path: str | Path, out: str | Path, force: bool = False) -> Path:
    """`nmt export --to safetensors`: the model file at `model_path` as a safetensors model
    directory `out`, with the source model's preset, steps and languages. Returns `out`."""
    payload = read_model_file(model_path)
    meta = {key: value for key, value in payload.items() if key not in ("model", "vocab")}
    record = provenance(meta, Path(model_path))
    # The languages also go where model files keep them, for the commands that read them.
    record.update(src_lang=meta.get("src_lang"), tgt_lang=meta.get("tgt_lang"))
    # As large as the model file's weights, which it writes again in another format.
    with export_directory(out, force, Path(model_path).stat().st_size) as building:
        write_model_dir(payload, building, record)
    return Path(out)
