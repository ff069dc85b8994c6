"""The exports of `nmt distill`'s stage 6 (export/student.py): what is checked before any
work (a format of ours, its runtime installed, a student it can run), each refusal saying
how to distill without it, and each format written by its own exporter, replacing an
earlier export. (Through the whole distillation: tests/test_distill_export.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from transformer_nmt.config import get_preset
from transformer_nmt.errors import UserError
from transformer_nmt.export import student
from transformer_nmt.export.student import EXPORTER

TINY = get_preset("tiny").model


def test_an_unknown_format_is_refused_naming_ours():
    with pytest.raises(UserError, match="cannot export to 'onnx'; give one of ctranslate2, "
                                        "argos"):
        EXPORTER.check("onnx", TINY)


def test_a_missing_runtime_says_how_to_distill_without_an_export(monkeypatch):
    def missing() -> None:
        raise UserError("exporting to CTranslate2 needs the ctranslate2 package")

    monkeypatch.setattr(student, "require_ctranslate2", missing)
    for fmt in EXPORTER.formats:
        with pytest.raises(UserError, match="needs the ctranslate2 package; or distill with "
                                            "--export none"):
            EXPORTER.check(fmt, TINY)


def test_a_student_the_runtime_cannot_run_is_refused_saying_what_to_change(monkeypatch):
    monkeypatch.setattr(student, "require_ctranslate2", lambda: None)
    EXPORTER.check("argos", TINY)  # one width for queries, keys and values: runs
    with pytest.raises(UserError, match=r"^the student cannot be exported to argos, whose "
                                        r"runtime is CTranslate2: .*d_v = 16.*change its "
                                        r"--set, or give --export none$"):
        EXPORTER.check("argos", replace(TINY, d_v=16))


def test_each_format_is_written_by_its_own_exporter_replacing_an_earlier_one(monkeypatch,
                                                                            tmp_path):
    calls = []

    def exporter(name):
        def export(model, out, quantization, force=False):
            calls.append((name, model, out, quantization, force))
            return out
        return export

    monkeypatch.setattr(student, "export_ctranslate2", exporter("ctranslate2"))
    monkeypatch.setattr(student, "export_argos", exporter("argos"))
    model = tmp_path / "student.pt"
    for fmt in EXPORTER.formats:
        out = tmp_path / fmt
        assert EXPORTER.write(fmt, model, out, "int8") == out
    assert calls == [("ctranslate2", model, tmp_path / "ctranslate2", "int8", True),
                     ("argos", model, tmp_path / "argos", "int8", True)]
