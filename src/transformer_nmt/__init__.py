"""transformer-nmt: the Transformer of "Attention Is All You Need" as translation software.

The Python API, the same functions the `nmt` command calls:

    from transformer_nmt import Translator, TranslatorOptions
    translator = Translator.from_file("quickstart/model.pt", TranslatorOptions())
    for line in translator.translate(["Peace be with you."]):
        print(line)

`Translator` and `TranslatorOptions` translate (transformer_nmt.decode.translator),
`DecodeConfig` sets the search (transformer_nmt.config), `prepare` with `PrepareOptions`
makes a data directory (transformer_nmt.data.prepare), and `train` trains a model
(transformer_nmt.train.session.train). They are imported on first use, so that importing
the package (as `nmt --help` does) does not import torch.

`train` is also the name of the training subpackage, which Python's import system binds
as this package's attribute `train`; that subpackage is callable as its session's train
(see transformer_nmt/train/__init__.py), so the name works however the imports went.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.data.prepare import PrepareOptions, prepare
    from transformer_nmt.decode.translator import Translator, TranslatorOptions

API: dict[str, str] = {
    "Translator": "transformer_nmt.decode.translator",
    "TranslatorOptions": "transformer_nmt.decode.translator",
    "DecodeConfig": "transformer_nmt.config",
    "prepare": "transformer_nmt.data.prepare",
    "PrepareOptions": "transformer_nmt.data.prepare",
}
"""Public name -> the module that defines it."""

__all__ = ["__version__", "train", *API]


def __getattr__(name: str) -> Any:
    """The API's names, imported from their modules when first asked for."""
    if name == "train":
        return importlib.import_module("transformer_nmt.train")
    if name not in API:
        raise AttributeError(f"module 'transformer_nmt' has no attribute {name!r}")
    value = getattr(importlib.import_module(API[name]), name)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API) | {"train"})
