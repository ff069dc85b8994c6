"""fairseq's Dictionary files (pretrained/fairseq_dictionary.py), written by hand: the
four specials then a piece per line, fairseq's overwrite mark read, and mistakes refused
in one line naming the file; the source's and the target's found in a data directory by
the checkpoint's languages or as the one (or joined) dictionary there."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.pretrained.fairseq_dictionary import (SPECIALS, dictionaries,
                                                           read_dictionary)


def write(path: Path, *pieces: str) -> Path:
    path.write_text("".join(f"{piece} {10 - i}\n" for i, piece in enumerate(pieces)),
                    encoding="utf-8")
    return path


def test_the_specials_then_one_piece_per_line_in_id_order(tmp_path):
    path = tmp_path / "dict.en.txt"
    path.write_text("▁the 50\n▁house 7 #fairseq:overwrite\n, -1\n", encoding="utf-8")
    assert read_dictionary(path) == [*SPECIALS, "▁the", "▁house", ","]


@pytest.mark.parametrize("text, says", [
    ("▁the 50\n▁the\n", r"dict.en.txt, line 2: '▁the' is not 'piece count'"),
    ("▁the x\n", r"line 1: '▁the x' is not 'piece count'"),
    ("▁the 5\n▁the 4\n", r"dict.en.txt: '▁the' is listed twice"),
    ("<unk> 5\n", r"'<unk>' is listed twice"),
])
def test_mistakes_are_one_line_naming_the_file_and_line(tmp_path, text, says):
    path = tmp_path / "dict.en.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=says):
        read_dictionary(path)


def test_the_source_and_target_dictionaries_by_language_or_the_one_there(tmp_path):
    write(tmp_path / "dict.en.txt", "▁the", "▁house")
    write(tmp_path / "dict.de.txt", "▁das", "▁Haus")
    source, target = dictionaries(tmp_path, ("en", "de"))
    assert (source[4:], target[4:]) == (["▁the", "▁house"], ["▁das", "▁Haus"])
    with pytest.raises(UserError, match=r"dict.fr.txt: no such file; give the --dict-dir"):
        dictionaries(tmp_path, ("en", "fr"))
    with pytest.raises(UserError, match="differs from .* give --src-lang and --tgt-lang"):
        dictionaries(tmp_path, (None, None))
    joined = tmp_path / "joined"
    joined.mkdir()
    write(joined / "dict.en.txt", "▁a", "▁b")
    write(joined / "dict.de.txt", "▁a", "▁b")
    assert dictionaries(joined, (None, None)) == ([*SPECIALS, "▁a", "▁b"],) * 2
    with pytest.raises(UserError, match="no dict.*.txt; give the --dict-dir"):
        dictionaries(tmp_path / "empty", (None, None))
