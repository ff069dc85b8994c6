"""File plumbing: atomic writes that leave the old file on any failure and make their
renames durable, temporaries a killed writer leaves that the next one removes, the user's
usual permissions, and format tags."""

import errno
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transformer_nmt import files
from transformer_nmt.data.binarize import IdsWriter
from transformer_nmt.data.text import LineWriter
from transformer_nmt.errors import UserError
from transformer_nmt.files import (AllOrNothing, AtomicFile, atomic_link, atomic_write,
                                   check_format, write_json_atomic)


def test_a_full_disk_is_one_line_naming_the_file_and_the_old_file_stays(tmp_path):
    path = tmp_path / "checkpoint_3.pt"
    path.write_bytes(b"the old checkpoint")

    def fill_the_disk(handle):
        handle.write(b"part of a new one")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(UserError, match=r"checkpoint_3.pt: no space left on its disk \(\d+ MiB "
                                        r"free\); the previous file, if any, is kept"):
        atomic_write(path, fill_the_disk)
    assert path.read_bytes() == b"the old checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_3.pt"]


def test_json_is_written_whole(tmp_path):
    write_json_atomic(tmp_path / "a" / "x.json", {"ü": [1, 2]})
    assert json.loads((tmp_path / "a" / "x.json").read_text(encoding="utf-8")) == {"ü": [1, 2]}


def test_check_format_names_the_file_the_version_and_the_remedy(tmp_path):
    check_format({"format": "f", "version": 2}, "x", "f", 2, remedy="redo it")
    with pytest.raises(UserError, match="x: not a f file; redo it"):
        check_format({"format": "g", "version": 2}, "x", "f", 2, remedy="redo it")
    with pytest.raises(UserError, match="x: f version 1 is not supported by this release "
                                        r"\(it reads version 2\); redo it"):
        check_format({"format": "f", "version": 1}, "x", "f", 2, remedy="redo it")
    with pytest.raises(UserError, match="not a f file"):
        check_format([1, 2], "x", "f", 2, remedy="redo it")


class Recorder(AllOrNothing):
    def __init__(self, log):
        self.log = log

    def close(self):
        self.log.append("close")

    def abort(self):
        self.log.append("abort")


def test_all_or_nothing_closes_on_success_and_aborts_on_failure():
    log = []
    with Recorder(log):
        pass
    with pytest.raises(KeyError):
        with Recorder(log), Recorder(log):
            raise KeyError("x")
    assert log == ["close", "abort", "abort"]


def test_an_atomic_file_appears_whole_on_close_and_nothing_on_abort(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"old")
    with AtomicFile(path) as file:
        file.handle.write(b"new")
        assert path.read_bytes() == b"old"
    assert path.read_bytes() == b"new"
    with pytest.raises(KeyError):
        with AtomicFile(path) as file:
            file.handle.write(b"torn")
            raise KeyError("x")
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def write_lines(path):
    with LineWriter(path) as writer:
        writer.write("a line")


def write_ids(path):
    with IdsWriter(path, path.with_suffix(".idx"), np.uint16) as writer:
        writer.add([[1, 2, 3]])


def link(path):
    source = path.with_name("source")
    source.write_bytes(b"x")
    atomic_link(source, path)


@pytest.mark.parametrize("write", [lambda path: write_json_atomic(path, {}), write_lines,
                                   write_ids, link])
def test_every_writer_makes_its_rename_durable_by_syncing_the_directory(tmp_path, monkeypatch,
                                                                       write):
    synced = []
    monkeypatch.setattr(files, "fsync_dir", lambda path: synced.append(Path(path)))
    write(tmp_path / "out.bin")
    assert (tmp_path / "out.bin").is_file()
    assert synced and set(synced) == {tmp_path}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_the_temporaries_a_killed_writer_left_are_removed_and_nothing_else(tmp_path):
    writer = AtomicFile(tmp_path / "manifest.json")
    writer.handle.write(b"half")
    writer.handle.flush()
    writer.handle.close()  # the process dies here: the temporary is never renamed
    (tmp_path / "kept.json").write_text("{}")
    (tmp_path / ".hidden").write_text("")
    files.remove_leftover_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "kept.json"]


KILLED_MID_WRITE = """
import sys, time
from pathlib import Path
from transformer_nmt.files import AtomicFile, temporary_directory

directory = Path(sys.argv[1])
writer = AtomicFile(directory / "model.pt")
writer.handle.write(b"half a model")
writer.handle.flush()
with temporary_directory(directory / "export") as building:
    (building / "weights.bin").write_bytes(b"half the weights")
    print("writing", flush=True)
    time.sleep(120)
"""


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name.split(".")[1] for p in directory.iterdir()
                  if files.TEMPORARY.fullmatch(p.name))


def test_a_killed_writers_temporaries_are_removed_by_the_next_writer_of_the_same_target(
        tmp_path):
    child = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        # While it runs, its temporaries are locked: no one else's clean-up takes them.
        files.remove_leftover_temporaries(tmp_path)
        AtomicFile(tmp_path / "model.pt").abort()
        assert temporaries(tmp_path) == ["export", "model"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with AtomicFile(tmp_path / "model.pt") as writer:  # removes model.pt's only
        writer.handle.write(b"a whole model")
    assert temporaries(tmp_path) == ["export"]
    with files.temporary_directory(tmp_path / "export") as building:
        assert temporaries(tmp_path) == ["export"] and building.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_what_is_built_aside_gets_the_users_usual_permissions(tmp_path, umask):
    previous = os.umask(umask)
    try:
        with files.temporary_directory(tmp_path / "out") as building:
            assert stat.S_IMODE(building.stat().st_mode) == 0o777 & ~umask
            # As safetensors writes its files: private, whatever the umask.
            private = building / "model.safetensors"
            private.touch(mode=0o600)
            os.chmod(private, 0o600)
            files.give_usual_permissions(building)
            assert stat.S_IMODE(private.stat().st_mode) == 0o666 & ~umask
    finally:
        os.umask(previous)


def test_what_is_set_aside_comes_back_if_its_replacement_fails(tmp_path):
    out = tmp_path / "model-ct2"
    out.mkdir()
    (out / "model.bin").write_text("old")
    with pytest.raises(OSError):
        with files.set_aside(out) as aside:
            assert files.TEMPORARY.fullmatch(aside.name) and not out.exists()
            raise OSError("the new one could not be renamed")
    assert [p.name for p in tmp_path.iterdir()] == ["model-ct2"]
    with files.set_aside(out):
        out.mkdir()
    assert [p.name for p in tmp_path.iterdir()] == ["model-ct2"]
    assert list(out.iterdir()) == []
