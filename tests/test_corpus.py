"""`nmt translate-corpus`: the outputs are `nmt translate`'s line for line, whatever the
shards, workers and parts; reruns do only what is not done; another model or setting is
refused in one line. (A dead worker's shard redone: tests/test_corpus_workers.py.)"""

from __future__ import annotations

import errno
import gzip
import json
from pathlib import Path

import pytest

from decode_fixtures import make_model_file, sentences
from transformer_nmt.cli import main
from transformer_nmt.corpus.manifest import MANIFEST
from transformer_nmt.corpus.shards import SHARDS

FAST = ["--beam", "2", "--max-len-b", "5", "--precision", "fp32", "--engine", "torch"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Four inputs in a directory: plain, gzipped with empty and blank lines, one shorter
    than a shard and an empty one."""
    directory = tmp_path_factory.mktemp("corpus")
    lines = sentences(23, seed=1)
    lines[3] = ""
    lines[10] = "   "
    (directory / "a.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with gzip.open(directory / "b.en.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(["", *sentences(9, seed=2), "  "]))  # no final newline
    (directory / "c.en").write_text("\n".join(sentences(3, seed=3)) + "\n", encoding="utf-8")
    (directory / "d.en").write_bytes(b"")  # no shards, an empty output
    return directory


@pytest.fixture(scope="module")
def expected(model_file, corpus, tmp_path_factory) -> dict[str, bytes]:
    """`nmt translate`'s output for each input, by output name."""
    out = tmp_path_factory.mktemp("expected")
    result = {}
    for path in sorted(corpus.iterdir()):
        name = path.name.removesuffix(".gz")
        assert main(["translate", "--model", str(model_file), "--input", str(path),
                     "--output", str(out / name), *FAST]) == 0
        result[name] = (out / name).read_bytes()
    return result


def _outputs(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()
            and not path.name.startswith(".") and path.name not in (MANIFEST, "report.json")}


def _run(model_file: Path, corpus: Path, out: Path, *extra: str) -> int:
    return main(["translate-corpus", "--model", str(model_file), "--input", str(corpus),
                 "--out", str(out), "--shard-lines", "5", *FAST, *extra])


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_two_workers_give_translates_output_and_a_rerun_does_only_what_is_missing(
        model_file, corpus, expected, tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(model_file, corpus, out, "--workers", "2", "--report",
                str(out / "report.json")) == 0
    assert _outputs(out) == expected
    manifest = json.loads((out / MANIFEST).read_text())
    assert len(manifest["shards"]) == 5 + 3 + 1
    assert all(shard["state"] == "done" for shard in manifest["shards"])
    report = _report(out)
    assert (report["shards_translated"], report["shards_redone"]) == (9, 0)
    assert report["sentences"] == 23 + 11 + 3
    assert "9 of 9 shards translated" in capsys.readouterr().err

    assert _run(model_file, corpus, out, "--workers", "1", "--report",
                str(out / "report.json")) == 0
    assert _report(out)["shards_translated"] == 0 and _outputs(out) == expected

    (out / SHARDS / "000006.txt").unlink()
    (out / "a.en").unlink()
    assert _run(model_file, corpus, out, "--workers", "1", "--report",
                str(out / "report.json")) == 0
    assert _report(out)["shards_translated"] == 1 and _outputs(out) == expected


@pytest.mark.parametrize("change, says", [
    (["--beam", "3"], "beam 2, not 3"),
    (["--shard-lines", "4"], "shard_lines 5, not 4"),
    (["--format", "json"], "format 'text', not 'json'"),
    ("model", "another model"),
])
def test_another_setting_or_model_is_refused_in_one_line(model_file, corpus, tmp_path,
                                                         capsys, change, says):
    out = tmp_path / "out"
    assert _run(model_file, corpus / "c.en", out, "--shard", "0/1") == 0
    capsys.readouterr()
    if change == "model":
        (tmp_path / "other").mkdir()
        other = make_model_file(tmp_path / "other")
        assert _run(other, corpus / "c.en", out, "--shard", "0/1") == 2
    else:
        arguments = ["translate-corpus", "--model", str(model_file), "--input",
                     str(corpus / "c.en"), "--out", str(out), *FAST, "--shard", "0/1"]
        if "--shard-lines" not in change:
            arguments += ["--shard-lines", "5"]
        assert main(arguments + change) == 2
    error = capsys.readouterr().err
    assert says in error and len(error.strip().splitlines()) == 1


def test_two_parts_then_merge_equal_the_local_result(model_file, corpus, expected, tmp_path,
                                                     capsys):
    out = tmp_path / "out"
    assert _run(model_file, corpus, out, "--shard", "0/2", "--workers", "1") == 0
    assert _outputs(out) == {}
    capsys.readouterr()
    assert main(["translate-corpus", "--model", str(model_file), "--input", str(corpus),
                 "--out", str(out), "--merge"]) == 2
    error = capsys.readouterr().err
    assert "5 shards not done: shard 4 (" in error and "a.en lines 21-23) not translated" in error
    assert "and 2 more" in error
    assert len(error.strip().splitlines()) == 1

    assert _run(model_file, corpus, out, "--shard", "1/2", "--workers", "1") == 0
    assert main(["translate-corpus", "--model", str(model_file), "--input", str(corpus),
                 "--out", str(out), "--merge"]) == 0
    assert _outputs(out) == expected


def test_a_full_disk_is_one_line_and_the_rerun_finishes(model_file, corpus, expected, tmp_path,
                                                        capsys, monkeypatch):
    from transformer_nmt.data.text import LineWriter

    out = tmp_path / "out"
    write = LineWriter.write
    written = []

    def fill_the_disk(self, line):
        written.append(line)
        if len(written) == 7:  # in the second shard
            raise OSError(errno.ENOSPC, "No space left on device")
        write(self, line)

    monkeypatch.setattr(LineWriter, "write", fill_the_disk)
    assert _run(model_file, corpus, out, "--shard", "0/1") == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{out / SHARDS / '000001.txt'}: no space left on its disk" in error
    manifest = json.loads((out / MANIFEST).read_text())
    assert [shard["state"] for shard in manifest["shards"][:3]] == ["done", "todo", "todo"]
    assert not [path for path in (out / SHARDS).iterdir() if path.name.endswith(".tmp")]
    monkeypatch.setattr(LineWriter, "write", write)
    assert _run(model_file, corpus, out, "--workers", "1") == 0
    assert _outputs(out) == expected


@pytest.mark.parametrize("flags", [["--nbest", "2", "--alignments"], ["--format", "json"]])
def test_nbest_and_json_lines_are_translates_across_shards(model_file, corpus, tmp_path,
                                                           flags):
    source = corpus / "a.en"
    assert main(["translate", "--model", str(model_file), "--input", str(source),
                 "--output", str(tmp_path / "expected"), *FAST, *flags]) == 0
    out = tmp_path / "out"
    for part in ("0/2", "1/2"):
        assert main(["translate-corpus", "--model", str(model_file), "--input", str(source),
                     "--out", str(out), "--shard-lines", "4", "--shard", part, *FAST,
                     *flags]) == 0
    assert main(["translate-corpus", "--model", str(model_file), "--input", str(source),
                 "--out", str(out), "--merge"]) == 0
    got, want = (path.read_text().splitlines() for path in (out / "a.en",
                                                             tmp_path / "expected"))
    if "json" not in flags:
        assert got == want
        return
    # Other batches (a shard's lines batched apart) move a score in its last digit.
    for line, expected_line in zip(got, want, strict=True):
        ours, theirs = json.loads(line), json.loads(expected_line)
        assert (ours["text"], ours["tokens"]) == (theirs["text"], theirs["tokens"])
        assert ours["token_scores"] == pytest.approx(theirs["token_scores"], abs=1e-3)


def test_samples_are_translates_however_the_input_is_cut(model_file, corpus, tmp_path):
    """Each line's draws are seeded by its number in its input, as `nmt translate` seeds
    them, not by its place in a shard."""
    sampling = ["--sampling", "--seed", "3", "--max-len-b", "5", "--precision", "fp32"]
    path = corpus / "a.en"
    assert main(["translate", "--model", str(model_file), "--input", str(path), "--output",
                 str(tmp_path / "whole"), *sampling]) == 0
    out = tmp_path / "out"
    assert main(["translate-corpus", "--model", str(model_file), "--input", str(path),
                 "--out", str(out), "--shard-lines", "5", "--workers", "1", *sampling]) == 0
    assert (out / "a.en").read_bytes() == (tmp_path / "whole").read_bytes()
