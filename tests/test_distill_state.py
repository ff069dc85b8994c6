"""DIR/distill.json: a stage is done when recorded with today's settings and its files are
there; redoing one forgets those made from its output (report and export: from the
student and its shortlist alone); another setting or a damaged file is refused in one line, or, where the
stage asks, redoes it."""

from __future__ import annotations

import pytest

from transformer_nmt.distill.state import STAGES, STATE, DistillState, made_from
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


def test_report_and_export_are_made_from_the_student_and_its_shortlist_alone():
    assert made_from("train") == ["shortlist", "report", "export"]
    assert made_from("shortlist") == ["report", "export"]
    assert made_from("report") == made_from("export") == []
    assert made_from("translate") == ["select", "train", "shortlist", "report", "export"]


def test_redoing_the_report_keeps_the_export_and_the_reverse(tmp_path):
    state = DistillState(tmp_path)
    for stage in STAGES:
        state.finish(stage, {}, [])
    state.finish("report", {}, [])
    state.finish("export", {}, [])
    assert set(DistillState(tmp_path).stages) == set(STAGES)


def test_a_stage_redone_when_changed_is_not_refused(tmp_path):
    DistillState(tmp_path).finish("export", {"formats": ["argos"]}, [])
    state = DistillState(tmp_path)
    assert state.done("export", {"formats": ["ctranslate2"]}, redo_if_changed=True) is None
    assert state.done("export", {"formats": ["argos"]}, redo_if_changed=True) is not None
