"""Where an export goes (export/output.py): built aside, in place only when complete, with
the user's usual permissions."""

from __future__ import annotations

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
