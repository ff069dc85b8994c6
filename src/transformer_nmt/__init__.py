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
as this package's attribute `train` whenever it is first imported. So that
`from transformer_nmt import train` gives something to call however the imports went,
the subpackage itself is made callable: `transformer_nmt.train(...)` is
`transformer_nmt.train.session.train(...)`, and `transformer_nmt.train.session` etc.
stay the modules they are.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.data.prepare import PrepareOptions, prepare
    from transformer_nmt.decode.translator import Translator, TranslatorOptions
    from transformer_nmt.train.progress import TrainSummary

API: dict[str, str] = {
    "Translator": "transformer_nmt.decode.translator",
    "TranslatorOptions": "transformer_nmt.decode.translator",
    "DecodeConfig": "transformer_nmt.config",
    "prepare": "transformer_nmt.data.prepare",
    "PrepareOptions": "transformer_nmt.data.prepare",
}
"""Public name -> the module that defines it."""

__all__ = ["__version__", "train", *API]


class _TrainPackage(types.ModuleType):
    """The subpackage transformer_nmt.train, callable as its session.train."""

    def __call__(self, **settings: Any) -> TrainSummary:
        """Train a model: transformer_nmt.train.session.train(**settings), whose docstring
        lists the settings (out, data, preset, overrides, ...)."""
        return importlib.import_module("transformer_nmt.train.session").train(**settings)


class _Package(types.ModuleType):
    """This package's module type: it makes the `train` subpackage callable when the
    import system binds it here."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "train" and type(value) is types.ModuleType:
            value.__class__ = _TrainPackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
