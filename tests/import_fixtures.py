"""What a fresh interpreter imports: for the tests that keep slow imports (PyTorch, its
compiler) out of a command's start."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Iterable


def imported_after(code: str, modules: Iterable[str]) -> list[str]:
    """Those of `modules` that a fresh interpreter has imported once it has run `code`,
    sorted."""
    script = (f"{code}\nimport json, sys\n"
              f"print(json.dumps(sorted(m for m in {sorted(modules)!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
