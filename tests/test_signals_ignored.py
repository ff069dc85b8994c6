"""The tests that send SIGINT, run once more in a pytest started with SIGINT ignored, as a
background job of a non-interactive shell or some CI runners start it: each sets the
handler it relies on (tests/signal_fixtures.py), so they pass either way."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def ignore_sigint() -> None:
    """In the child, before it runs Python: SIGINT ignored, inherited across exec."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_the_sigint_tests_pass_when_the_session_starts_with_sigint_ignored(tmp_path):
    # Only the files that hold them: collecting the whole suite costs more than they do.
    files = [str(path) for path in sorted(TESTS.glob("test_*.py"))
             if path.name != Path(__file__).name
             and "mark.sigint" in path.read_text(encoding="utf-8")]
    result = subprocess.run(
        # -n 0: in the process started with SIGINT ignored, not in workers of its own.
        [sys.executable, "-m", "pytest", "-q", "-m", "sigint", "-n", "0", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "pytest"), *files],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=600,
        preexec_fn=ignore_sigint, env={**os.environ, "OMP_NUM_THREADS": "1"})
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    # Every test marked `sigint` ran (none skipped, none deselected by accident).
    assert passed and int(passed.group(1)) >= 4, summary
