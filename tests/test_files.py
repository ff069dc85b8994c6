"""File plumbing: atomic writes that leave the old file on any failure, and format tags."""

import errno
import json

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.files import AllOrNothing, atomic_write, check_format, write_json_atomic


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
