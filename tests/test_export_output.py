"""Where an export goes (export/output.py): built aside, in place only when complete, with
the user's usual permissions."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.export.output import export_directory


def test_a_failed_export_leaves_the_old_output_and_no_leftovers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.bin").write_text("old")
    with pytest.raises(RuntimeError, match="converter failed"):
        with export_directory(out, force=True) as building:
            (building / "new.bin").write_text("half")
            raise RuntimeError("converter failed")
    assert [path.name for path in tmp_path.iterdir()] == ["out"]
    assert [path.name for path in out.iterdir()] == ["old.bin"]


def test_a_complete_export_replaces_the_old_one_with_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.bin").write_text("old")
    with export_directory(out, force=True) as building:
        (building / "new.bin").write_text("new")
    assert [path.name for path in out.iterdir()] == ["new.bin"]
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize("existing", ["file", "directory with a file"])
def test_something_there_is_refused_without_force(tmp_path, existing):
    out = tmp_path / "out"
    if existing == "file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "mine").write_text("mine")
    with pytest.raises(UserError, match="already exists and is not empty; .* --force"):
        with export_directory(out):
            pytest.fail("nothing should be built")


def test_an_empty_directory_is_filled(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with export_directory(out) as building:
        (building / "model.bin").write_text("new")
    assert (out / "model.bin").read_text() == "new"


def test_what_a_library_wrote_private_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    out = tmp_path / "out"
    with export_directory(out) as building:
        (building / "model.safetensors").touch(mode=0o600)
    assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    # As safetensors raises it: its own error, the OS's words inside.
    RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                 f"message: \"{os.strerror(errno.ENOSPC)}\" }})")], ids=["os", "wrapped"])
def test_a_full_disk_is_one_line_naming_the_export_and_the_space_it_needs(tmp_path, error):
    out = tmp_path / "model-ct2"
    with pytest.raises(UserError) as raised:
        with export_directory(out, needs_bytes=300 * 2**20) as building:
            (building / "model.bin").write_bytes(b"half")
            raise error
    message = str(raised.value)
    assert message.startswith(f"{out}: no space left on its disk (")
    assert "about 300 MiB needed" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []
