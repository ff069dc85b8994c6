"""`nmt distill`'s stage 6: the student exported to CTranslate2 by default, in int8 with its
shortlist as vmap.txt, and as an Argos Translate package when asked, recorded in
distill.json like the other stages; asked for on a finished distillation it runs alone, a
rerun skips it, a missing output is rebuilt, other settings redo it (they are not
refused), --export none skips it, and a missing runtime is refused before any work."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest

from distill_fixtures import (STUDENT_SETTINGS, copy_of, options, options_for, run,
                              started)
from transformer_nmt.cli import main
from transformer_nmt.distill.pipeline import EXPORTS, _finish
from transformer_nmt.distill.state import STAGES, DistillState
from transformer_nmt.errors import UserError
from transformer_nmt.export.student import EXPORTER
from transformer_nmt.model_file import load_for_inference

needs_ctranslate2 = pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None,
                                       reason="the ctranslate2 extra is not installed")


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


class FakeExporter:
    """Writes a small file in place of each export, and remembers what it wrote."""

    def __init__(self, missing: str | None = None) -> None:
        self.missing = missing
        self.written: list[tuple[str, str]] = []

    def check(self, fmt: str, model) -> None:
        if fmt == self.missing:
            raise UserError(f"exporting to {fmt} needs a package that is not installed")

    def write(self, fmt: str, model: Path, out: Path, quantization: str) -> Path:
        out.write_text(f"{fmt} {quantization}", encoding="utf-8")
        self.written.append((fmt, quantization))
        return out


def translate_one(directory: Path, student: Path, use_vmap: bool = False) -> list[str]:
    """CTranslate2's translation of one sentence, in pieces, by the export `directory`
    (`use_vmap`: through its vocabulary map)."""
    import ctranslate2

    vocab = load_for_inference(student).vocab
    translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)
    [result] = translator.translate_batch(
        [vocab.processor.encode("the cat sees a dog", out_type=str)], max_decoding_length=20,
        use_vmap=use_vmap)
    return result.hypotheses[0]


def command_line(distilled, out: Path) -> list[str]:
    """`nmt distill` with the fixture's settings, into `out`."""
    opts = options_for(distilled, out)
    words = ["distill", "--teacher", opts.teachers[0], "--data", str(opts.data), "--out",
             str(out), "--nbest", "2", "--beam", "2", "--drop", "0.1", "--average-last", "1",
             "--workers", "1", "--shard-lines", "100", "--report-beam", "2", "--device", "cpu"]
    for name, value in STUDENT_SETTINGS:
        words += ["--set", f"{name}={value}"]
    return words


@needs_ctranslate2
def test_exports_asked_of_a_finished_distillation_run_stage_5_alone_and_load(
        distilled, tmp_path, capsys):
    out = copy_of(distilled, tmp_path)
    assert main(command_line(distilled, out) + ["--export", "ctranslate2",
                                                "--export", "argos"]) == 0
    printed = capsys.readouterr().out
    assert sum("done already" in line for line in printed.splitlines()) == len(STAGES) - 1
    assert "[6/6] exporting the student (int8 weights) to ctranslate2 and argos" in printed
    stages = DistillState(out).stages
    assert stages["export"]["settings"]["formats"] == ["ctranslate2", "argos"]
    assert "report" in stages  # the report is not redone for an export
    student = out / "student.pt"
    ct2 = out / "student-ctranslate2"
    assert json.loads((ct2 / "transformer_nmt.json").read_text())["quantization"] == "int8"
    assert (ct2 / "vmap.txt").exists()
    assert isinstance(translate_one(ct2, student), list)
    with zipfile.ZipFile(out / "student.argosmodel") as package:
        metadata = json.loads(package.read("student/metadata.json"))
        package.extractall(tmp_path / "argos")
    assert (metadata["from_code"], metadata["to_code"]) == ("en", "xx")
    assert metadata["transformer_nmt"]["quantization"] == "int8"
    assert isinstance(translate_one(tmp_path / "argos" / "student" / "model", student), list)


@needs_ctranslate2
def test_by_default_the_student_is_exported_to_ctranslate2_in_int8_with_its_shortlist(
        distilled, tmp_path, capsys):
    out = copy_of(distilled, tmp_path)
    assert main(command_line(distilled, out)) == 0
    printed = capsys.readouterr().out
    assert "[6/6] exporting the student (int8 weights) to ctranslate2" in printed
    assert "translate_batch(..., use_vmap=True) uses its shortlist" in printed
    assert sum("done already" in line for line in printed.splitlines()) == len(STAGES) - 1
    ct2 = out / "student-ctranslate2"
    record = json.loads((ct2 / "transformer_nmt.json").read_text())
    assert (record["quantization"], record["shortlist"]) == ("int8", True)
    vmap = (ct2 / "vmap.txt").read_text(encoding="utf-8").splitlines()
    assert vmap and all("\t" in line for line in vmap)
    student = out / "student.pt"
    assert translate_one(ct2, student, use_vmap=True)
    stages = DistillState(out).stages
    assert stages["export"]["settings"]["shortlist"] is not None
    assert not (out / EXPORTS["argos"]).exists()


def test_export_none_exports_nothing_and_is_given_alone(distilled, tmp_path, capsys):
    out = copy_of(distilled, tmp_path)
    assert main(command_line(distilled, out) + ["--export", "none"]) == 0
    assert "[6/6] exporting the student: none asked for" in capsys.readouterr().out
    assert not (out / EXPORTS["ctranslate2"]).exists()
    assert main(command_line(distilled, out) + ["--export", "none", "--export", "argos"]) == 2
    assert capsys.readouterr().err.strip() == (
        "nmt distill: error: --export none argos: none exports nothing; give it alone, or "
        "leave it out")


def test_a_rerun_skips_the_export_and_a_missing_output_is_rebuilt(distilled, tmp_path):
    out = copy_of(distilled, tmp_path)
    exporter = FakeExporter()
    opts = options_for(distilled, out, exports=("argos",))
    _, log = run(opts, exporter)
    assert started(log) == ["export"] and exporter.written == [("argos", "int8")]
    _, log = run(opts, exporter)
    assert started(log) == [] and len(exporter.written) == 1
    assert sum("done already" in line for line in log) == len(STAGES)
    (out / EXPORTS["argos"]).unlink()
    _, log = run(opts, exporter)
    assert started(log) == ["export"] and (out / EXPORTS["argos"]).exists()


@needs_ctranslate2
def test_other_export_settings_redo_stage_5_alone(distilled, tmp_path):
    out = copy_of(distilled, tmp_path)
    run(options_for(distilled, out, exports=("ctranslate2",)), EXPORTER)
    _, log = run(options_for(distilled, out, exports=("ctranslate2",),
                             quantization="float32"), EXPORTER)
    assert started(log) == ["export"]
    record = json.loads((out / "student-ctranslate2" / "transformer_nmt.json").read_text())
    assert record["quantization"] == "float32"
    assert "report" in DistillState(out).stages
    exporter = FakeExporter()
    _, log = run(options_for(distilled, out, exports=("argos",)), exporter)
    assert exporter.written == [("argos", "int8")]
    assert any("student-ctranslate2, an earlier export not asked for this time, is left as "
               "it was" in line for line in log)
    assert (out / "student-ctranslate2" / "model.bin").exists()


def test_a_missing_runtime_is_refused_before_any_work(trained_model_file, tiny_data,
                                                      tmp_path):
    opts = options(trained_model_file, tiny_data, tmp_path / "out", exports=("argos",))
    with pytest.raises(UserError, match="exporting to argos needs a package"):
        run(opts, FakeExporter(missing="argos"))
    assert not (tmp_path / "out").exists()


@needs_ctranslate2
def test_a_student_ctranslate2_cannot_run_is_refused_before_any_work(trained_model_file,
                                                                     tiny_data, tmp_path):
    opts = options(trained_model_file, tiny_data, tmp_path / "out", exports=("ctranslate2",),
                   overrides=(*STUDENT_SETTINGS, ("d_v", "16")))
    with pytest.raises(UserError, match=r"^the student cannot be exported to ctranslate2, "
                                        r"whose runtime is CTranslate2: .*d_v = 16.*"
                                        r"--export none"):
        run(opts, EXPORTER)
    assert not (tmp_path / "out").exists()


def test_quantization_with_export_none_is_refused_on_the_command_line(distilled, tmp_path,
                                                                    capsys):
    out = tmp_path / "out"
    assert main(command_line(distilled, out) + ["--export", "none", "--quantization",
                                                "float16"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == ("nmt distill: error: --quantization float16 is for the export stage, "
                     "which --export none skips; drop one of them")
    assert not out.exists()


def test_a_retrained_student_removes_the_exports_of_the_old_one(distilled, tmp_path):
    out = copy_of(distilled, tmp_path)
    run(options_for(distilled, out, exports=("argos",)), FakeExporter())
    state = DistillState(out)
    # The train stage's end, as a retraining reaches it: the exports are of the old student.
    _finish(options_for(distilled, out), state, lambda line: None, "train",
            state.stages["train"]["settings"], [out / "student.pt"])
    assert not (out / EXPORTS["argos"]).exists()
    assert not (out / "student.shortlist.npz").exists()
    assert set(DistillState(out).stages) == {"translate", "select", "train"}
