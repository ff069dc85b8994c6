"""One writing process per directory (locks.py): a second holder is refused naming the
first's PID and what to do, a killed holder leaves no stale lock, and a refused or failed
run leaves no directory of its own behind."""

import os
import signal
import subprocess
import sys

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.locks import LOCK_FILE, DirectoryLock

HOLD = ("import sys, time; from transformer_nmt.locks import DirectoryLock; "
        "lock = DirectoryLock(sys.argv[1], 'written', 'elsewhere'); print('held', flush=True); "
        "time.sleep(60)")


def test_a_second_holder_is_refused_naming_the_first_and_what_to_do(tmp_path):
    with DirectoryLock(tmp_path, "prepared", "give another --out"):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(UserError) as error:
            DirectoryLock(tmp_path, "prepared", "give another --out")
    assert str(error.value) == (f"{tmp_path} is being prepared by another process (PID "
                                f"{os.getpid()}); wait for it to finish or stop it, or give "
                                "another --out")
    DirectoryLock(tmp_path, "prepared", "give another --out").release()  # free again


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=f"PID {holder.pid}"):
            DirectoryLock(tmp_path, "written", "elsewhere")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with DirectoryLock(tmp_path, "written", "elsewhere"):
        pass


def test_a_directory_the_lock_made_goes_again_unless_something_was_written(tmp_path):
    lock = DirectoryLock(tmp_path / "new" / "deeper", "written", "elsewhere")
    lock.release()
    lock.release()  # a second release does nothing
    assert not (tmp_path / "new" / "deeper").exists()
    with DirectoryLock(tmp_path / "kept", "written", "elsewhere"):
        (tmp_path / "kept" / "result").write_text("done")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [LOCK_FILE, "result"]
    with DirectoryLock(tmp_path / "kept", "written", "elsewhere"):
        pass  # a directory it did not make stays, lock file and all
    assert (tmp_path / "kept" / LOCK_FILE).exists()
