"""`nmt distill` end to end on a tiny teacher: every stage runs and says so, a rerun skips
what is done, an interrupted stage is redone, changed settings are refused in one line,
and the report has its fields, the comparison as served among them."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from distill_fixtures import (REPORT_FIELDS, copy_of, drop_record, options, options_for, run,
                              started)
from transformer_nmt.cli import main
from transformer_nmt.distill import pipeline
from transformer_nmt.data.manifest import text_path
from transformer_nmt.distill.pipeline import (cluster_command, distill, select_stage,
                                              translate_stage)
from transformer_nmt.distill.state import STAGES, DistillState
from transformer_nmt.errors import UserError
from transformer_nmt.interrupts import Terminated
from transformer_nmt.model_file import read_model_file, save_model_file

needs_ctranslate2 = pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None,
                                       reason="the ctranslate2 extra is not installed")


def test_every_stage_runs_and_leaves_its_files(distilled):
    out, report, log = distilled
    assert started(log) == [stage for stage in STAGES if stage != "export"]
    for path in ("translate/train.en", "select/train.en", "select/train.xx",
                 "data/manifest.json", "run/config.json", "student.pt",
                 "student.shortlist.npz", "report.json",
                 "report/student.test.xx", "report/teacher.test.xx"):
        assert (out / path).exists(), path
    text = "\n".join(log)
    assert "kept 216 of 240 pairs" in text  # 10% of 240 dropped, none empty
    assert "nmt translate-corpus --model" in text and "--shard I/N" in text
    # Stage 3 names the student's shape as trained, the preset's changed by --set.
    assert "preset student-tiny with --set (" in text and "d_model 32)" in text
    # No export: stage 6 says so and how to export by hand.
    assert "[6/6] exporting the student: none asked for (--export none)" in text
    assert "nmt export --model" in text and "--to argos" in text
    assert not (out / "student-ctranslate2").exists()


def test_the_report_compares_teacher_and_student(distilled):
    out, report, log = distilled
    assert json.loads((out / "report.json").read_text(encoding="utf-8")) == report
    for label in ("teacher", "student"):
        assert REPORT_FIELDS <= set(report[label]), label
        assert report[label]["sentences"] == 24
        assert report[label]["peak_memory_mb"] > 0
    assert report["student"]["presets"] == ["student-tiny"]  # as its run recorded it
    assert any(line.split()[:1] == ["student"] for line in "\n".join(log).splitlines())


@needs_ctranslate2
def test_the_report_compares_them_as_served(distilled):
    """CTranslate2 in int8 for both, the student's shortlist, the same batches: the
    teacher's beam search against the student's greedy search."""
    out, report, log = distilled
    teacher, student = report["teacher"], report["student"]
    for row in (teacher, student):
        assert row["runtime"] == "CTranslate2 int8_float32"
        assert row["batch_sentences"] == student["batch_sentences"]
    assert (teacher["shortlist"], student["shortlist"]) == (False, True)
    served = report["served"]
    assert served["teacher"] == {
        "search": "beam 2", "runtime": teacher["runtime"], "shortlist": False,
        "bleu": teacher["beam_bleu"], "chrf": teacher["beam_chrf"],
        "sentences_per_second": teacher["beam_sentences_per_second"]}
    assert served["student"] == {
        "search": "greedy", "runtime": student["runtime"], "shortlist": True,
        "bleu": student["greedy_bleu"], "chrf": student["greedy_chrf"],
        "sentences_per_second": student["greedy_sentences_per_second"]}
    assert served["speedup"] == pytest.approx(student["greedy_sentences_per_second"]
                                              / teacher["beam_sentences_per_second"])
    assert served["sentences"] == 24
    text = "\n".join(log)
    assert "student, greedy on CTranslate2 int8_float32, its shortlist: BLEU" in text
    assert "x the teacher's sentences per second" in text


def test_a_stage_whose_files_are_gone_is_redone_with_what_follows(distilled, tmp_path):
    """The shortlist's here: it is built again (the same map), and the report, made from
    it, is redone; the next run finds both done."""
    out = copy_of(distilled, tmp_path)
    shortlist = out / "student.shortlist.npz"
    built = dict(np.load(shortlist))
    shortlist.unlink()
    _, log = run(options_for(distilled, out))
    assert started(log) == ["shortlist", "report"]
    rebuilt = np.load(shortlist)
    for name in ("always", "offsets", "targets", "checksum"):
        assert np.array_equal(rebuilt[name], built[name]), name
    _, log = run(options_for(distilled, out))
    assert started(log) == []


def test_new_shortlist_defaults_redo_the_shortlist_and_the_report(distilled, tmp_path,
                                                                  monkeypatch):
    """A distillation done before the shortlist's defaults changed is not refused: its
    map is counted again with today's, and the report, made from it, is redone."""
    out = copy_of(distilled, tmp_path)
    monkeypatch.setattr(pipeline, "DEFAULT_BEST", pipeline.DEFAULT_BEST + 1)
    _, log = run(options_for(distilled, out))
    assert started(log) == ["shortlist", "report"]
    recorded = json.loads((out / "distill.json").read_text(encoding="utf-8"))
    assert recorded["stages"]["shortlist"]["settings"]["best"] == pipeline.DEFAULT_BEST


def test_the_shortlist_of_a_student_whose_data_is_gone_is_refused_in_one_line(distilled,
                                                                          tmp_path):
    out = copy_of(distilled, tmp_path)
    drop_record(out, "shortlist")
    shutil.rmtree(out / "data")
    with pytest.raises(UserError, match=r"the pairs the student learned from are gone.*"
                                        r"delete .*student.pt and run again") as raised:
        run(options_for(distilled, out))
    assert "\n" not in str(raised.value)


def test_a_rerun_skips_every_stage(distilled, tmp_path):
    out = copy_of(distilled, tmp_path)
    report, log = run(options_for(distilled, out))
    assert started(log) == []
    assert sum("done already" in line for line in log) == len(STAGES) - 1  # no export
    assert report == distilled[1] | {"data": report["data"]}


def test_an_interrupted_stage_is_redone_with_what_follows(distilled, tmp_path):
    out = copy_of(distilled, tmp_path)
    drop_record(out, "select")
    selected = out / "select" / "train.xx"
    whole = selected.read_text(encoding="utf-8")
    selected.write_text(whole[:len(whole) // 2], encoding="utf-8")  # a partial output
    report, log = run(options_for(distilled, out))
    assert started(log) == ["select", "train", "shortlist", "report"]
    assert selected.read_text(encoding="utf-8") == whole
    assert set(report) == set(distilled[1]) and REPORT_FIELDS <= set(report["student"])


def test_changed_settings_of_a_done_stage_are_refused_in_one_line(distilled, tmp_path):
    out = copy_of(distilled, tmp_path)
    with pytest.raises(UserError, match=r"stage select was done with other settings "
                                        r"\(drop: 0.1 -> 0.2\)") as raised:
        run(options_for(distilled, out, drop=0.2))
    assert "\n" not in str(raised.value)


def test_a_missing_teacher_or_unknown_preset_is_refused_before_any_work(tmp_path, tiny_data):
    with pytest.raises(UserError, match="no such teacher model file"):
        distill(options(tmp_path / "missing.pt", tiny_data, tmp_path / "out"))
    with pytest.raises(UserError, match="unknown preset 'student-huge'"):
        distill(options(tmp_path / "missing.pt", tiny_data, tmp_path / "out",
                        student="student-huge"))
    with pytest.raises(UserError, match="unknown setting 'colour'"):
        distill(options(tmp_path / "missing.pt", tiny_data, tmp_path / "out",
                        overrides=(("colour", "red"),)))
    assert not (tmp_path / "out").exists()


def test_stage_1_translated_by_translate_corpus_on_a_cluster_is_found_done(
        trained_model_file, tiny_data, tmp_path):
    """The printed command, run as a job array's only task, leaves stage 1 nothing to do."""
    opts = options(trained_model_file, tiny_data, tmp_path / "out")
    inputs = [str(text_path(tiny_data, "train", "en"))]
    command = cluster_command(opts, inputs, tmp_path / "out" / "translate")
    assert main(shlex.split(command.replace("--shard I/N", "--shard 0/1"))[1:]) == 0
    log: list[str] = []
    record = translate_stage(opts, DistillState(opts.out), log.append)
    assert record["summary"].startswith("translated 0 sentences")
    assert (tmp_path / "out" / "translate" / "train.en").exists()


@pytest.mark.parametrize("signal_name, raised", [("SIGINT", KeyboardInterrupt),
                                                 ("SIGTERM", Terminated)])
def test_training_stopped_by_a_signal_is_not_recorded_done(distilled, tmp_path, monkeypatch,
                                                          signal_name, raised):
    """`train` answers Ctrl-C by saving a checkpoint and returning: the stage must not
    count as done, so that the next run resumes the training."""
    out = copy_of(distilled, tmp_path)
    drop_record(out, "train")
    shutil.rmtree(out / "data")  # its recipe names the files of the directory copied
    monkeypatch.setattr(pipeline, "train", lambda **_: SimpleNamespace(stopped_by=signal_name,
                                                                       lines=[]))
    with pytest.raises(raised):
        run(options_for(distilled, out))
    assert "train" not in DistillState(out).stages


@pytest.mark.parametrize("references, pairs", [(True, 216 + 240), (False, 216)])
def test_the_student_learns_from_the_references_too_unless_told(distilled, tmp_path,
                                                                 monkeypatch, references,
                                                                 pairs):
    """Stage 3's pairs: the 216 selected and, by default, --data's 240 training pairs."""
    out = copy_of(distilled, tmp_path)
    drop_record(out, "train")
    shutil.rmtree(out / "data")
    monkeypatch.setattr(pipeline, "train", lambda **_: SimpleNamespace(stopped_by="SIGINT",
                                                                       lines=[]))
    with pytest.raises(KeyboardInterrupt):
        run(options_for(distilled, out, references=references))
    for lang in ("en", "xx"):
        lines = (out / "data" / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        assert len(lines) == pairs, lang
    selected = (out / "select" / "train.xx").read_text(encoding="utf-8").splitlines()
    assert lines[:216] == selected


def test_a_teacher_of_another_direction_is_refused_before_any_work(tiny_model_file, tiny_data,
                                                                   tmp_path):
    payload = read_model_file(tiny_model_file)
    payload["src_lang"], payload["tgt_lang"] = "xx", "en"
    teacher = tmp_path / "reverse.pt"
    save_model_file(payload, teacher)
    with pytest.raises(UserError, match=r"reverse.pt translates xx-en, but .* is en-xx"):
        distill(options(teacher, tiny_data, tmp_path / "out"))
    assert not (tmp_path / "out" / "translate").exists()


def test_mono_sentences_keep_the_teachers_best_beside_the_training_pairs(
        trained_model_file, tiny_data, tmp_path):
    mono = tmp_path / "mono.en"
    mono.write_text("the cat sees a dog\nred car and blue tree\n", encoding="utf-8")
    opts = options(trained_model_file, tiny_data, tmp_path / "out", mono=(str(mono),), drop=0.0)
    state = DistillState(opts.out)
    translated = translate_stage(opts, state, lambda line: None)
    assert [Path(path).name for path in translated["files"]] == ["train.en", "mono.en"]
    selected = select_stage(opts, state, translated, lambda line: None)
    assert selected["sentences"] == selected["kept"] == 242
    sources = (tmp_path / "out" / "select" / "train.en").read_text(encoding="utf-8")
    assert sources.endswith("the cat sees a dog\nred car and blue tree\n")
    best = [json.loads(line)["nbest"][0]["text"] for line in
            (tmp_path / "out" / "translate" / "mono.en").read_text(encoding="utf-8").splitlines()]
    targets = (tmp_path / "out" / "select" / "train.xx").read_text(encoding="utf-8")
    assert targets.splitlines()[-2:] == best
