"""Reusing a vocabulary (data/vocab_source.py, model_file.vocab_source): `nmt prepare
--vocab FROM` with a model file, a data directory or a sentencepiece model, what the
manifest records, and the one-line errors for anything else."""

import shutil

import pytest

from transformer_nmt.cli import main
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.manifest import SPM_MODEL, read_manifest
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.data.vocab_source import vocab_digest
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import vocab_source

from integrity_fixtures import cut_after_pieces

NEW_DOMAIN = ["the red car sees a dog", "a big tree and the old road", "the cat runs",
              "green garden with a blue car", "the child plays near the tree"] * 8


def prepare_args(tmp_path, out, *extra):
    src = tmp_path / "new.src"
    tgt = tmp_path / "new.tgt"
    if not src.exists():
        src.write_text("".join(line + "\n" for line in NEW_DOMAIN))
        tgt.write_text("".join(" ".join(reversed(line.split())) + "\n" for line in NEW_DOMAIN))
    return ["prepare", "--corpus", "files", "--src", "en", "--tgt", "xx", "--out", out,
            "--train-src", src, "--train-tgt", tgt, "--valid-size", "5", "--threads", "1",
            *extra]


@pytest.mark.parametrize("kind", ["model file", "data directory", "sentencepiece model"])
def test_prepare_encodes_with_the_vocabulary_of_each_kind(kind, tiny_data, tiny_model_file,
                                                          tmp_path, capsys):
    given = {"model file": tiny_model_file, "data directory": tiny_data,
             "sentencepiece model": tiny_data / SPM_MODEL}[kind]
    out = tmp_path / "new-data"
    assert main([str(a) for a in prepare_args(tmp_path, out, "--vocab", given)]) == 0
    original = (tiny_data / SPM_MODEL).read_bytes()
    assert (out / SPM_MODEL).read_bytes() == original
    vocab = read_manifest(out)["vocab"]
    assert vocab["source"] == {"kind": kind, "path": str(given.resolve()),
                               "sha256": vocab_digest(original)}
    assert vocab["sha256"] == vocab_digest(original) and vocab["size"] == 64
    # The ids are the reused vocabulary's encoding of the text.
    train = load_split(out, "train")
    first = Vocab.from_bytes(original).encode(
        (out / "train.en").read_text().splitlines()[0])
    assert list(train.pair(0)[0]) == first
    # The same command again finds the directory prepared.
    assert main([str(a) for a in prepare_args(tmp_path, out, "--vocab", given)]) == 0
    assert "already prepared" in capsys.readouterr().err


def test_a_learned_vocabulary_is_recorded_as_learned(tiny_data):
    vocab = read_manifest(tiny_data)["vocab"]
    assert vocab["source"] == {"kind": "learned"}
    assert vocab["sha256"] == vocab_digest((tiny_data / SPM_MODEL).read_bytes())


def test_another_vocabulary_for_a_prepared_directory_is_refused(tiny_data, tmp_path, capsys):
    out = tmp_path / "new-data"
    assert main([str(a) for a in prepare_args(tmp_path, out, "--vocab", tiny_data)]) == 0
    manifest_before = (out / "manifest.json").read_text()
    assert main([str(a) for a in prepare_args(tmp_path, out)]) == 2
    assert "different recipe" in capsys.readouterr().err
    assert (out / "manifest.json").read_text() == manifest_before


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing.pt", "no such vocabulary"),
    (lambda tmp: tmp, "not a prepared data directory"),
    (lambda tmp: (tmp / "junk.model").write_bytes(b"not a sentencepiece model") and
     tmp / "junk.model", "junk.model"),
    (lambda tmp: (tmp / "zip.pt").write_bytes(b"PK\x03\x04 torn") and tmp / "zip.pt",
     "not a readable transformer-nmt model file"),
])
def test_wrong_vocabularies_get_one_line_errors(make, message, tmp_path, capsys):
    given = make(tmp_path)
    with pytest.raises(UserError, match=message):
        vocab_source(given)
    out = tmp_path / "new-data"
    assert main([str(a) for a in prepare_args(tmp_path, out, "--vocab", given)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(given) in err
    assert not out.exists()


def test_help_names_the_option(capsys):
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    text = capsys.readouterr().out
    assert "--vocab FROM" in text and "--init-from" in text


def test_a_truncated_vocabulary_is_refused_in_one_line(tiny_data, tmp_path, capsys):
    # Cut at a field boundary, sentencepiece reads it as a 30-piece vocabulary.
    cut = tmp_path / "cut.model"
    cut.write_bytes(cut_after_pieces((tiny_data / SPM_MODEL).read_bytes(), 30))
    out = tmp_path / "new-data"
    assert main([str(a) for a in prepare_args(tmp_path, out, "--vocab", cut)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"nmt prepare: error: {cut}: incomplete sentencepiece model: it ends after "
                   "30 pieces, without its trainer_spec and normalizer_spec (the file was cut "
                   "short); copy the file again, or make the vocabulary with `nmt prepare`")
    assert not out.exists()


def test_a_data_directory_whose_vocabulary_was_replaced_is_refused(tiny_data, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data, copy)
    (copy / SPM_MODEL).write_bytes(cut_after_pieces((tiny_data / SPM_MODEL).read_bytes(), 30))
    with pytest.raises(UserError, match=f"{copy / SPM_MODEL} is not the vocabulary the data "
                                        "directory was prepared with"):
        vocab_source(copy)
