"""DIR/manifest.json (corpus/manifest.py): the inputs found and named, the plan of shards
with the byte where each begins, the same plan read back by a rerun and refused in one line
when its models, settings or inputs changed, and the shards done noted in it."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from transformer_nmt.config import DecodeConfig
from transformer_nmt.corpus.manifest import (MANIFEST, ManifestNotes, file_sha256_of,
                                             input_files, open_manifest, output_name,
                                             read_manifest)
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.errors import UserError
from transformer_nmt.files import file_sha256


@pytest.fixture
def inputs(tmp_path) -> Path:
    """A directory of inputs: five lines, three gzipped without a final newline, a hidden
    file that is no input."""
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "b.en").write_text("one\ntwo\nthree\nfour\nfive\n", encoding="utf-8")
    with gzip.open(directory / "a.en.gz", "wt", encoding="utf-8") as handle:
        handle.write("x\nyy\nzzz")
    (directory / ".hidden").write_text("not an input\n")
    return directory


@pytest.fixture
def options(inputs, tmp_path) -> CorpusOptions:
    model = tmp_path / "model.pt"
    model.write_bytes(b"weights")  # only hashed here, never loaded
    return CorpusOptions((str(model),), (str(inputs),), str(tmp_path / "out"), shard_lines=2)


def test_inputs_are_a_directorys_visible_files_in_name_order(inputs, tmp_path):
    (tmp_path / "c.en").write_text("c\n")
    assert input_files([str(inputs), str(tmp_path / "c.en")]) == [
        inputs / "a.en.gz", inputs / "b.en", tmp_path / "c.en"]
    assert output_name(inputs / "a.en.gz") == "a.en"
    with pytest.raises(UserError, match="missing.en: no such file or directory"):
        input_files([str(tmp_path / "missing.en")])


def test_two_inputs_with_one_output_name_or_one_named_manifest_are_refused(inputs, tmp_path):
    (tmp_path / "a.en").write_text("a\n")
    with pytest.raises(UserError, match=r"a.en.gz and .*a.en would both be translated into "
                                        "a.en; rename one"):
        input_files([str(inputs), str(tmp_path / "a.en")])
    with pytest.raises(UserError, match=f"may not be named {MANIFEST}; rename it"):
        output_name(tmp_path / f"{MANIFEST}.gz")


def test_a_new_plan_cuts_each_input_into_shards_that_know_their_first_byte(options, inputs):
    manifest = open_manifest(options)
    assert manifest == read_manifest(Path(options.out))
    assert manifest["models"] == [file_sha256(options.models[0])]
    assert manifest["settings"]["shard_lines"] == 2 and manifest["settings"]["beam"] == 4
    assert [(entry["output"], entry["lines"]) for entry in manifest["inputs"]] == [
        ("a.en", 3), ("b.en", 5)]
    assert [(shard["input"], shard["start"], shard["end"], shard["offset"])
            for shard in manifest["shards"]] == [
        (0, 0, 2, 0), (0, 2, 3, 5), (1, 0, 2, 0), (1, 2, 4, 8), (1, 4, 5, 19)]
    assert {shard["state"] for shard in manifest["shards"]} == {"todo"}
    assert open_manifest(options) == manifest  # a rerun reads the plan back


@pytest.mark.parametrize("change, says", [
    ("settings", "was made with beam 4, not 2; use the same ones"),
    ("model", "was made with another model"),
    ("inputs", "was made for other inputs"),
    ("size", "b.en has changed since .* was made \\(24 bytes, now 28\\)"),
])
def test_a_rerun_with_other_models_settings_or_inputs_is_refused_in_one_line(
        options, inputs, tmp_path, change, says):
    open_manifest(options)
    if change == "settings":
        options = replace(options, translator=replace(options.translator,
                                                      decode=DecodeConfig(beam=2)))
    elif change == "model":
        Path(options.models[0]).write_bytes(b"other weights")
    elif change == "inputs":
        options = replace(options, inputs=(str(inputs / "b.en"),))
    else:
        (inputs / "b.en").write_text("one\ntwo\nthree\nfour\nfive\nsix\n", encoding="utf-8")
    with pytest.raises(UserError, match=says) as error:
        open_manifest(options)
    assert "\n" not in str(error.value)


def test_an_unreadable_or_foreign_manifest_says_what_to_do(tmp_path):
    assert read_manifest(tmp_path) is None
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(UserError, match="cannot be read .*; delete it to start again"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(UserError, match="not a nmt-translate-corpus file"):
        read_manifest(tmp_path)


def test_a_model_directory_is_hashed_whole_and_a_missing_model_named(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "config.json").write_text("{}")
    digest = file_sha256_of(tmp_path / "dir")
    (tmp_path / "dir" / "config.json").write_text("{ }")
    assert file_sha256_of(tmp_path / "dir") != digest
    with pytest.raises(UserError, match="missing.pt: no such model file"):
        file_sha256_of(tmp_path / "missing.pt")


def test_shards_done_are_noted_at_save_under_the_lock(options):
    out = Path(options.out)
    open_manifest(options)
    notes = ManifestNotes(out)
    notes.add(3, {"sha256": "ab", "sentences": 2, "tokens": 7})
    assert read_manifest(out)["shards"][3]["state"] == "todo"  # noted, not yet written
    notes.save()
    shard = read_manifest(out)["shards"][3]
    assert (shard["state"], shard["tokens"], shard["start"]) == ("done", 7, 2)
    assert [s["state"] for s in read_manifest(out)["shards"]].count("done") == 1
