"""Training: the loop, its schedule, checkpoints, validation and resuming.

`from transformer_nmt import train` gives this subpackage, because Python binds a
package's subpackage under its own name; so that the name also works as the Python API's
training function, the subpackage is callable: `train(**settings)` is
`transformer_nmt.train.session.train(**settings)`. Its modules stay what they are.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    """This subpackage, callable as its session.train."""

    def __call__(self, **settings: Any) -> Any:
        """Train a model: transformer_nmt.train.session.train(**settings), whose docstring
        lists the settings (out, data, preset, overrides, ...)."""
        # Imported on call: the session imports most of this package, which is still
        # being initialised here.
        return importlib.import_module("transformer_nmt.train.session").train(**settings)


sys.modules[__name__].__class__ = _CallablePackage
