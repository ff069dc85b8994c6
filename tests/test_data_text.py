"""Reading, validating and normalizing parallel text; the cleaning filters."""

import gzip
import re

import numpy as np
import pytest

from transformer_nmt.data.text import (MAX_LINE_BYTES, CleaningFilters, LineWriter, count_lines,
                                       line_offsets, model_input, normalize, read_lines,
                                       read_parallel, read_tsv, without_bidi_controls)
from transformer_nmt.errors import UserError


def test_normalize_turns_every_control_and_space_run_into_one_space():
    text = " a\tb\r\nc\x0bd\x0ce\x1cf\x00g\x7fh\x85i\u2028j\u00a0k\u3000l  m "
    assert normalize(text) == "a b c d e f g h i j k l m"
    assert normalize("") == "" and normalize(" \t\r ") == ""


def test_normalize_keeps_everything_else():
    text = "Ça, c'est «déjà» 10 € — 日本語 ‌ZWNJ"
    assert normalize(text) == text


def test_a_model_s_input_has_no_bidi_control_and_is_normalized():
    controls = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert without_bidi_controls(f"a {controls}b{controls} c") == "a b c"
    assert model_input(f" \u2067the\u2069 \u200f dog\t") == "the dog"
    kept = "the d\u00f6g \u200b\u00a0runs"  # other format characters and spaces stay theirs
    assert without_bidi_controls(kept) == kept


def test_read_lines_splits_on_newline_only(tmp_path):
    path = tmp_path / "a.txt"
    inner = "x\ry\x0bz\x0cw\x1cv\x1dq\x1er\x85s\u2028t\u2029u"
    path.write_bytes(("\ufeff" + inner + "\nsecond\n\nlast without newline").encode())
    assert list(read_lines(path)) == [inner, "second", "", "last without newline"]
    assert count_lines(path) == 4


def test_read_lines_reads_gzip(tmp_path):
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(b"one\ntwo\n"))
    assert list(read_lines(path)) == ["one", "two"]
    assert count_lines(path) == 2


def test_invalid_utf8_names_file_and_line_and_can_be_replaced(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nbro\xffken\n")
    with pytest.raises(UserError, match=r"bad\.txt:2: invalid UTF-8.*errors='replace'"):
        list(read_lines(path))
    assert list(read_lines(path, errors="replace")) == ["fine", "bro\ufffdken"]


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="nope.txt: no such file"):
        list(read_lines(tmp_path / "nope.txt"))


@pytest.mark.parametrize("src_lines, tgt_lines", [(3, 2), (2, 4)])
def test_read_parallel_names_both_files_and_counts(tmp_path, src_lines, tgt_lines):
    src, tgt = tmp_path / "c.en", tmp_path / "c.de"
    src.write_text("s\n" * src_lines)
    tgt.write_text("t\n" * tgt_lines)
    with pytest.raises(UserError) as error:
        list(read_parallel(src, tgt))
    message = str(error.value)
    assert f"{src} has {src_lines} lines but {tgt} has {tgt_lines}" in message
    assert "\n" not in message


def test_read_parallel_and_tsv(tmp_path):
    src, tgt = tmp_path / "c.en", tmp_path / "c.de"
    src.write_text("a\tb\nc\n")
    tgt.write_text("x\ny\n")
    assert list(read_parallel(src, tgt)) == [("a\tb", "x"), ("c", "y")]
    tsv = tmp_path / "c.tsv"
    tsv.write_text("a\tx\nc\ty\n\t\n")
    assert list(read_tsv(tsv)) == [("a", "x"), ("c", "y"), ("", "")]
    tsv.write_text("a\tx\nno tab\n")
    with pytest.raises(UserError, match=r"c\.tsv:2: expected 2 tab-separated fields.*found 1"):
        list(read_tsv(tsv))


def test_line_writer_renames_only_on_close(tmp_path):
    writer = LineWriter(tmp_path / "out.txt")
    writer.write_lines(["héllo", ""])
    writer.write_lines([])
    writer.write("end")
    assert not (tmp_path / "out.txt").exists()
    writer.close()
    assert (tmp_path / "out.txt").read_bytes() == "héllo\n\nend\n".encode()
    aborted = LineWriter(tmp_path / "gone.txt")
    aborted.write_lines(["x"])
    aborted.abort()
    assert list(tmp_path.iterdir()) == [tmp_path / "out.txt"]


def test_filters_count_each_pair_under_its_first_reason():
    src = np.array([0, 5, 300, 10, 4, 3, 260])
    tgt = np.array([4, 0, 5, 30, 5, 7, 0])
    keep, removed = CleaningFilters(max_len=250, max_ratio=2.5).apply(src, tgt)
    assert keep.tolist() == [False, False, False, False, True, True, False]
    assert removed == {"empty": 3, "max_len": 1, "max_ratio": 1}


def test_filters_can_be_disabled():
    keep, removed = CleaningFilters(max_len=0, max_ratio=0).apply(np.array([1, 900]),
                                                                  np.array([40, 1]))
    assert keep.all() and removed == {"empty": 0, "max_len": 0, "max_ratio": 0}
    with pytest.raises(UserError, match=r"max_ratio must be 0 \(no limit\) or at least 1, "
                                        r"not 0\.5"):
        CleaningFilters(max_ratio=0.5).validate()


def test_a_line_over_the_bound_is_an_error_naming_it_read_no_further(tmp_path):
    path = tmp_path / "one.txt"
    with path.open("wb") as handle:
        handle.write(b"a sentence\n" + b"x" * (MAX_LINE_BYTES + 1) + b"\nafter\n")
    lines = read_lines(path)
    assert next(lines) == "a sentence"
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:2: a line longer than"):
        next(lines)
    # A line of exactly the bound, newline aside, is read.
    path.write_bytes(b"y" * MAX_LINE_BYTES + b"\n")
    assert [len(line) for line in read_lines(path)] == [MAX_LINE_BYTES]


@pytest.mark.parametrize("every", [1, 2, 3, 7])
@pytest.mark.parametrize("gzipped", [False, True])
def test_line_offsets_start_each_part_where_its_first_line_begins(tmp_path, every, gzipped):
    text = "\ufeffeins\n\nzwei drei\n  \nvier\nfünf sechs\nsieben"  # no final newline
    path = tmp_path / ("text.gz" if gzipped else "text")
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gzipped else data)
    whole = list(read_lines(path))
    lines, offsets = line_offsets(path, every)
    assert lines == count_lines(path) == len(whole) == 7
    assert len(offsets) == -(-lines // every)
    for part, offset in enumerate(offsets):
        start = part * every
        found = list(read_lines(path, offset=offset, first_number=start + 1))
        assert found == whole[start:]
