"""`nmt translate` (cli/decode.py) end to end on a tiny random model with a tiny BPE vocabulary."""

from __future__ import annotations

import io
import json
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from decode_fixtures import (FEATURES_BY_HAND, make_model_file, record_search_threads,
                             sentences, with_calibration)
from train_fixtures import reversal_pairs
from transformer_nmt.cli import main

FAST = ["--beam", "2", "--max-len-b", "5"]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    return make_model_file(tmp_path_factory.mktemp("cli"), max_positions=64)


def test_file_to_file_keeps_lines_and_order(model_file, tmp_path, caplog):
    lines = sentences(6, seed=5)
    lines[1] = ""
    lines[4] = " ".join(["children play near old trees"] * 30)  # too long for 64 positions
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--output", str(output), "--batch-size", "2", *FAST]) == 0
    translations = output.read_text(encoding="utf-8").split("\n")
    assert translations[-1] == "" and len(translations) == len(lines) + 1
    assert translations[1] == ""
    one_by_one = tmp_path / "one.txt"
    one_by_one.write_text(lines[3] + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_file), "--input", str(one_by_one),
                 "--output", str(tmp_path / "one.out"), *FAST]) == 0
    assert (tmp_path / "one.out").read_text(encoding="utf-8") == translations[3] + "\n"
    assert "input line 5 has" in caplog.text


def test_nbest_and_alignments_from_stdin(model_file, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"the house\n\na dog runs\n")))
    assert main(["translate", "--model", str(model_file), "--nbest", "2", "--alignments",
                 *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    # Two hypotheses per sentence; the empty line has just its empty translation.
    assert [line.split(" ||| ")[0] for line in out] == ["0", "0", "1", "2", "2"]
    assert all(len(line.split(" ||| ")) == 4 for line in out)
    assert out[2] == "1 |||  ||| 0.0000 ||| "


def test_a_last_line_on_stderr_says_how_much_and_how_fast(model_file, tmp_path,
                                                          monkeypatch, capsys):
    source = tmp_path / "in.txt"
    source.write_text("the house\n\na dog runs\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--output", str(output), *FAST]) == 0
    last = capsys.readouterr().err.splitlines()[-1]
    assert re.fullmatch(rf"translated 3 lines \((\d+) subword tokens\) into {re.escape(str(output))}"
                        r" in [\d.]+ s: [\d.]+ lines/s, \d+ tokens/s, on (CTranslate2|PyTorch) \w+",
                        last), last
    # To stdout, the translations stay alone there and the summary goes to stderr.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"the house\n")))
    assert main(["translate", "--model", str(model_file), *FAST]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 1 and "translated" not in captured.out
    assert captured.err.startswith("translated 1 line (")


def test_interactive_answers_each_line_before_the_next_is_typed(model_file):
    """The installed console script: each translation arrives while stdin stays open."""
    script = Path(sys.executable).with_name("nmt")
    process = subprocess.Popen([str(script), "translate", "--model", str(model_file),
                                "--interactive", *FAST], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    answers: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [answers.put(line) for line in process.stdout],
                     daemon=True).start()
    try:
        for line in ("a dog", "", "the cat sleeps"):
            process.stdin.write(line + "\n")
            process.stdin.flush()
            answer = answers.get(timeout=60)  # raises queue.Empty if nothing was flushed
            assert answer.endswith("\n") and (answer == "\n" or line)
        process.stdin.close()
        assert process.wait(timeout=60) == 0, process.stderr.read()
    finally:
        process.kill()


def test_a_file_that_is_no_model_is_a_one_line_error(tmp_path, capsys):
    fake = tmp_path / "notes.pt"
    fake.write_text("not a model\n", encoding="utf-8")
    assert main(["translate", "--model", str(fake)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nmt translate: error: ")
    assert str(fake) in err


def test_bad_options_are_one_line_errors(model_file, capsys):
    assert main(["translate", "--model", str(model_file), "--beam", "2", "--nbest", "3"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["translate", "--model", str(model_file), "--interactive",
                 "--input", "x.txt"]) == 2
    assert "--interactive" in capsys.readouterr().err


def test_invalid_utf8_names_the_line_or_is_replaced_on_request(model_file, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(b"the house\nthe h\xffouse\n")
    output = tmp_path / "out.txt"
    command = ["translate", "--model", str(model_file), "--input", str(source),
               "--output", str(output), *FAST]
    assert main(command) == 2
    last_line = capsys.readouterr().err.splitlines()[-1]  # after the progress bar
    assert last_line.startswith(f"nmt translate: error: {source}:2: invalid UTF-8")
    assert not output.exists()  # nothing half-written
    assert main(command + ["--errors", "replace"]) == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2


def test_output_paths_get_their_directories_or_a_one_line_error(model_file, tmp_path,
                                                                 monkeypatch, capsys):
    source = tmp_path / "in.txt"
    source.write_text("the house\n", encoding="utf-8")
    command = ["translate", "--model", str(model_file), "--input", str(source), *FAST]
    nested = tmp_path / "new" / "dir" / "out.txt"
    assert main(command + ["--output", str(nested)]) == 0
    assert nested.read_text(encoding="utf-8").count("\n") == 1
    capsys.readouterr()  # the progress bar
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me\n", encoding="utf-8")
    assert main(command + ["--output", str(blocker / "out.txt")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nmt translate: error: ")
    assert str(blocker) in err and "Traceback" not in err
    assert blocker.read_text(encoding="utf-8") == "keep me\n"
    assert main(["average", str(tmp_path / "no_such_run"), "--last", "2",
                 "--out", str(tmp_path / "avg.pt")]) == 2
    assert "no_such_run: no such run directory or checkpoint file" in capsys.readouterr().err


def test_each_worker_translates_on_its_share_of_the_cores_for_the_command_only(
        model_file, tmp_path, monkeypatch):
    seen = record_search_threads(monkeypatch)
    source = tmp_path / "in.txt"
    source.write_text("the house\na dog\nthe green garden\n", encoding="utf-8")
    before = torch.get_num_threads()
    for workers, threads in (("2", 2), ("1", 4)):
        assert main(["translate", "--model", str(model_file), "--input", str(source),
                     "--output", str(tmp_path / "out.txt"), "--workers", workers,
                     "--batch-size", "1", *FAST]) == 0
        assert set(seen) == {threads} and len(seen) == 3
        seen.clear()
        assert torch.get_num_threads() == before


def test_json_output_one_object_per_line_with_token_scores(model_file, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the house\n\na dog runs\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--output", str(output), "--format", "json", "--alignments", *FAST]) == 0
    objects = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert len(objects) == 3 and objects[1]["text"] == "" and objects[1]["token_scores"] == []
    for obj in objects[0], objects[2]:
        assert len(obj["token_scores"]) == len(obj["tokens"]) + 1
        assert sum(obj["token_scores"]) <= obj["score"] <= 0
        assert set(obj) == {"text", "tokens", "token_scores", "score", "confidence",
                            "degenerate", "fallback", "alignment"}
        assert isinstance(obj["degenerate"], list)
        assert obj["confidence"] is None  # the model has no calibration
    calibrated = with_calibration(model_file, tmp_path / "calibrated.pt", -3.0,
                                  FEATURES_BY_HAND)
    assert main(["translate", "--model", str(calibrated), "--input", str(source),
                 "--output", str(output), "--format", "json", *FAST]) == 0
    objects = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert objects[1]["confidence"] is None  # an empty line is not translated
    for obj in objects[0], objects[2]:
        assert 0 <= obj["confidence"] < 0.5 and obj["confidence_reasons"]
    plain = tmp_path / "plain.txt"
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--output", str(plain), "--token-scores", *FAST]) == 0
    first = plain.read_text(encoding="utf-8").splitlines()[0].split(" ||| ")
    assert first[0] == objects[0]["text"]
    assert [float(x) for x in first[1].split()] == pytest.approx(objects[0]["token_scores"],
                                                                abs=1e-4)


def test_lines_the_vocabulary_cannot_read_are_warned_of_and_get_confidence_0(
        model_file, tmp_path, caplog):
    source = tmp_path / "in.txt"
    source.write_text("the house\n日本語の文章です。\na dog runs\nこれも日本語です。\n",
                      encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--output", str(output), "--format", "json", *FAST]) == 0
    objects = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [obj["confidence"] for obj in objects] == [None, 0.0, None, 0.0]
    assert "confidence_reasons" not in objects[0]
    assert objects[1]["confidence_reasons"] == [
        "most of the source is unknown to the model's vocabulary (another language or "
        "script?)"]
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings == [
        "input line 2: most of the source is unknown to the model's vocabulary (another "
        "language or script?); its translation is invented, not translated (confidence 0)",
        "2 input lines in all are mostly unknown to the model's vocabulary; their "
        "translations are invented (confidence 0)"]


def test_the_guard_is_on_by_default_and_off_with_no_guard(model_file, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the house\na dog runs in the green garden\n", encoding="utf-8")
    found = {}
    for switch in ([], ["--no-guard"]):
        output = tmp_path / f"out{len(switch)}.jsonl"
        assert main(["translate", "--model", str(model_file), "--input", str(source),
                     "--output", str(output), "--format", "json", *switch, *FAST]) == 0
        found[bool(switch)] = [json.loads(line) for line in
                               output.read_text(encoding="utf-8").splitlines()]
    assert all(isinstance(obj["degenerate"], list) for obj in found[False])
    assert all(obj["degenerate"] is None and obj["fallback"] is False for obj in found[True])
    for guarded, plain in zip(found[False], found[True]):
        if not guarded["fallback"]:
            assert guarded["text"] == plain["text"]


def test_prefix_file_and_sampling_from_the_command_line(model_file, tmp_path, capsys):
    source, prefixes = tmp_path / "in.txt", tmp_path / "prefix.txt"
    source.write_text("the house\na dog runs\nthe cat\n", encoding="utf-8")
    prefixes.write_text("a warm roof\n\nthe green\n", encoding="utf-8")
    model = ["translate", "--model", str(model_file), "--input", str(source)]
    assert main(model + ["--prefix", str(prefixes), "--beam", "2", "--max-len-b", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("a warm roof") and out[2].startswith("the green")
    sampled = model + ["--sampling", "--nbest", "3", "--topk", "5", "--seed", "7", *FAST]
    assert main(sampled) == 0
    first = capsys.readouterr().out
    assert main(sampled) == 0
    assert capsys.readouterr().out == first and len(first.splitlines()) == 9
    prefixes.write_text("only one\n", encoding="utf-8")
    assert main(model + ["--prefix", str(prefixes)]) == 2
    assert "prefix.txt has fewer lines than the input (input line 2)" in capsys.readouterr().err


def test_the_engines_translate_alike_where_their_searches_rank_alike(trained_model_file,
                                                                     tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    source = tmp_path / "in.txt"
    lines = [line for line, _ in reversal_pairs(3, seed=4, words=(2, 9))]
    source.write_text("\n".join(lines[:2] + ["", lines[2]]) + "\n", encoding="utf-8")
    outputs = {}
    for engine in ("ctranslate2", "torch"):
        # No length penalty: CTranslate2's |Y|^alpha and GNMT's rank alike only at 0.
        assert main(["translate", "--model", str(trained_model_file), "--input", str(source),
                     "--alpha", "0", "--precision", "fp32", "--engine", engine]) == 0
        outputs[engine] = capsys.readouterr().out.splitlines()
    # The trained task's best translations are clear of their runner-ups on every CPU.
    assert outputs["ctranslate2"] == outputs["torch"] and len(outputs["torch"]) == 4


def test_ctranslate2_asked_for_what_only_torch_does_is_one_line(trained_model_file, capsys):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    assert main(["translate", "--model", str(trained_model_file), "--engine", "ctranslate2",
                 "--batch-invariant"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--engine ctranslate2: batch invariance" in error


def test_text_output_skips_the_confidence_json_asks_for(trained_model_file, tmp_path, capsys,
                                                         monkeypatch):
    from transformer_nmt.decode.text import translator as translator_module

    calibrated = with_calibration(trained_model_file, tmp_path / "calibrated.pt",
                                  coefficients=[0.5, 0.3, -0.4, 0.0, -0.2, -0.6, -0.5, -0.3])
    built = []
    original = translator_module.Translator.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(translator_module.Translator, "__init__", record)
    source = tmp_path / "in.txt"
    source.write_text("a b c\n", encoding="utf-8")
    for output_format in ("text", "json"):
        assert main(["translate", "--model", str(calibrated), "--input", str(source),
                     "--format", output_format]) == 0
    capsys.readouterr()
    assert [translator.confidence is not None for translator in built] == [False, True]
