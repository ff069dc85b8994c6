"""The files recipe: the user's plain, TSV and gzipped files, the seeded valid slice held
out of train, and its one-line errors."""

import gzip
import re
from pathlib import Path

import pytest

from transformer_nmt.data.corpora import SourceOptions, get_corpus
from transformer_nmt.errors import UserError


def write_pairs(folder: Path, name: str, n: int) -> tuple[Path, Path]:
    src, tgt = folder / f"{name}.en", folder / f"{name}.de"
    src.write_text("".join(f"source {i}\n" for i in range(n)))
    tgt.write_text("".join(f"target {i}\n" for i in range(n)))
    return src, tgt


def test_files_with_every_split(tmp_path):
    train, valid = write_pairs(tmp_path, "train", 10), write_pairs(tmp_path, "valid", 3)
    test = tmp_path / "test.tsv"
    test.write_text("a\tb\n")
    corpus = get_corpus("files", "en", "de", SourceOptions(files={
        "train_src": str(train[0]), "train_tgt": str(train[1]), "valid_src": str(valid[0]),
        "valid_tgt": str(valid[1]), "test_tsv": str(test)}))
    assert corpus.splits == ("train", "valid", "test")
    assert len(list(corpus.pairs("train"))) == 10
    assert list(corpus.pairs("valid"))[2] == ("source 2", "target 2")
    assert list(corpus.pairs("test")) == [("a", "b")]


def test_files_hold_out_a_seeded_slice_of_train_for_valid(tmp_path):
    src, tgt = write_pairs(tmp_path, "train", 200)
    files = {"train_src": str(src), "train_tgt": str(tgt)}
    corpus = get_corpus("files", "en", "de", SourceOptions(files=files, seed=4))
    assert corpus.splits == ("train", "valid")
    valid, train = list(corpus.pairs("valid")), list(corpus.pairs("train"))
    assert len(valid) == 10 and len(train) == 190
    assert sorted(valid + train, key=lambda p: int(p[0].split()[1])) == \
        [(f"source {i}", f"target {i}") for i in range(200)]
    assert "held out" in corpus.notes[0]
    again = get_corpus("files", "en", "de", SourceOptions(files=files, seed=4, valid_size=10))
    assert list(again.pairs("valid")) == valid


@pytest.mark.parametrize("files, message", [
    ({}, "needs files['train_src'] and files['train_tgt'], or files['train_tsv']"),
    ({"train_src": "a.en"},
     "files['train_src'] and files['train_tgt'] go together; files['train_tgt'] is missing"),
    ({"train_src": "a.en", "train_tgt": "a.de", "train_tsv": "a.tsv"},
     "either files['train_tsv'] or files['train_src'] and files['train_tgt'], not both"),
    ({"train_src": "nope.en", "train_tgt": "nope.de"}, "nope.en: no such file"),
])
def test_files_errors(tmp_path, monkeypatch, files, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=re.escape(message)):
        get_corpus("files", "en", "de", SourceOptions(files=files))


def test_gzipped_files(tmp_path):
    src, tgt = tmp_path / "t.en.gz", tmp_path / "t.de.gz"
    src.write_bytes(gzip.compress(b"a\nb\nc\n"))
    tgt.write_bytes(gzip.compress(b"x\ny\nz\n"))
    corpus = get_corpus("files", "en", "de", SourceOptions(
        files={"train_src": str(src), "train_tgt": str(tgt)}))
    assert len(list(corpus.pairs("train"))) + len(list(corpus.pairs("valid"))) == 3
