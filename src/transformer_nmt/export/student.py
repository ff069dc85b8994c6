"""The exports of `nmt distill`'s stage 6, by the names `nmt export --to` gives them.

The distill layer lies below this one and cannot import it: the command hands the
pipeline `EXPORTER` (cli/distill.py), which the pipeline calls to check before any work
that the runtime is installed and can run the student, and to write each export once the
student is trained.
"""

from __future__ import annotations

from pathlib import Path

from transformer_nmt.config import ModelConfig
from transformer_nmt.errors import UserError
from transformer_nmt.export.argos import export_argos
from transformer_nmt.export.ctranslate2 import (config_unsupported_reason, export_ctranslate2,
                                                require_ctranslate2)


class StudentExporter:
    """Exports to CTranslate2 and to Argos Translate packages (whose runtime is
    CTranslate2), as `distill.pipeline.Exporter` asks."""

    formats = ("ctranslate2", "argos")

    def check(self, fmt: str, model: ModelConfig) -> None:
        """UserError when `fmt` is not one of ours, its runtime is not installed, or it
        cannot run a model of configuration `model`."""
        if fmt not in self.formats:
            raise UserError(f"cannot export to {fmt!r}; give one of {', '.join(self.formats)}")
        try:
            require_ctranslate2()
        except UserError as missing:
            # The default export needs it too: say how to distill without one.
            raise UserError(f"{missing}; or distill with --export none") from None
        reason = config_unsupported_reason(model)
        if reason is not None:
            raise UserError(f"the student cannot be exported to {fmt}, whose runtime is "
                            f"CTranslate2: {reason}; change its --set, or give --export none")

    def write(self, fmt: str, model: Path, out: Path, quantization: str) -> Path:
        """The model file `model` exported as `fmt` to `out` (replacing an earlier export
        there once the new one is complete), its weights stored as `quantization`."""
        if fmt == "ctranslate2":
            return export_ctranslate2(model, out, quantization, force=True)
        return export_argos(model, out, quantization, force=True)


EXPORTER = StudentExporter()
