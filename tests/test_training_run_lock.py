"""One writer per run directory: a second holder is refused naming the first, and the
holder clears what a killed training left half written (the lock itself: tests/test_locks.py)."""

import os

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.training.run_lock import RunLock

def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    with RunLock(tmp_path / "run"):
        with pytest.raises(UserError, match=rf"run is being trained by another process "
                                            rf"\(PID {os.getpid()}\)"):
            RunLock(tmp_path / "run")
    RunLock(tmp_path / "run").release()


def test_the_holder_removes_what_a_killed_training_left_half_written(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint_7.pt").write_bytes(b"whole")
    # An AtomicFile's temporary whose process died: its name, and no lock on it.
    (run_dir / ".checkpoint_9.pt.12345.abc_9xyz.tmp").write_bytes(b"half")
    with RunLock(run_dir):
        assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "checkpoint_7.pt"]
