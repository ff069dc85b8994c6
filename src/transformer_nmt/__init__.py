"""transformer-nmt: the Transformer of "Attention Is All You Need" as translation software.

The Python API, the same functions the `nmt` command calls:

    from transformer_nmt import Translator, TranslatorOptions
    translator = Translator.from_file("quickstart/model.pt", TranslatorOptions())
    for line in translator.translate(["Peace be with you."]):
        print(line)

`Translator` and `TranslatorOptions` translate (transformer_nmt.decode.text.translator),
`DecodeConfig` sets the search (transformer_nmt.config), `prepare` with `PrepareOptions`
makes a data directory (transformer_nmt.data.prepare), and `train` trains a model
(transformer_nmt.training.session). They are imported on first use, so that importing
the package (as `nmt --help` does) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from transformer_nmt.version import __version__

if TYPE_CHECKING:
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.data.prepare import PrepareOptions, prepare
    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
    from transformer_nmt.training.session import train

API: dict[str, str] = {
    "Translator": "transformer_nmt.decode.text.translator",
    "TranslatorOptions": "transformer_nmt.decode.text.translator",
    "DecodeConfig": "transformer_nmt.config",
    "prepare": "transformer_nmt.data.prepare",
    "PrepareOptions": "transformer_nmt.data.prepare",
    "train": "transformer_nmt.training.session",
}
"""Public name -> the module that defines it."""

__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    """The API's names, imported from their modules when first asked for."""
    if name not in API:
        raise AttributeError(f"module 'transformer_nmt' has no attribute {name!r}")
    value = getattr(importlib.import_module(API[name]), name)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API))
