"""DIR/distill.json: a stage is done when recorded with today's settings and its files are
there; redoing one forgets those after it; another setting or a damaged file is refused
in one line."""

from __future__ import annotations

import pytest

from transformer_nmt.distill.state import STATE, DistillState
from transformer_nmt.errors import UserError


def test_a_recorded_stage_is_done_while_its_files_are_there(tmp_path):
    made = tmp_path / "made.txt"
    made.write_text("x", encoding="utf-8")
    DistillState(tmp_path).finish("translate", {"beam": 4}, [made], summary="ok")
    state = DistillState(tmp_path)
    assert state.done("translate", {"beam": 4})["summary"] == "ok"
    assert state.done("select", {"drop": 0.05}) is None
    made.unlink()
    assert state.done("translate", {"beam": 4}) is None


def test_finishing_a_stage_forgets_the_later_ones(tmp_path):
    state = DistillState(tmp_path)
    for stage in ("translate", "select", "train"):
        state.finish(stage, {}, [])
    state.finish("select", {}, [])
    assert set(DistillState(tmp_path).stages) == {"translate", "select"}


def test_another_setting_is_refused_in_one_line(tmp_path):
    DistillState(tmp_path).finish("select", {"drop": 0.05}, [])
    with pytest.raises(UserError, match=r"stage select was done with other settings "
                                        r"\(drop: 0.05 -> 0.1\); distill into another --out"):
        DistillState(tmp_path).done("select", {"drop": 0.1})


def test_a_damaged_state_file_is_refused_in_one_line(tmp_path):
    (tmp_path / STATE).write_text("{", encoding="utf-8")
    with pytest.raises(UserError, match="cannot be read"):
        DistillState(tmp_path)
    (tmp_path / STATE).write_text('{"format": "other", "version": 1}', encoding="utf-8")
    with pytest.raises(UserError, match="not a nmt-distill file"):
        DistillState(tmp_path)
