"""The layout of a data directory and its manifest (data/manifest.py): where each side of
a split lies, and a directory without a readable manifest of this format refused with
what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_nmt.data.manifest import (FORMAT_VERSION, MANIFEST, bin_path, idx_path,
                                           read_manifest, text_path)
from transformer_nmt.errors import UserError


def test_each_side_of_a_split_has_its_text_ids_and_offsets():
    assert text_path("data", "valid", "de") == Path("data/valid.de")
    assert bin_path(Path("data"), "train", "en") == Path("data/train.en.bin")
    assert idx_path("data", "test", "en") == Path("data/test.en.idx")


def test_a_finished_directory_is_read_back(tmp_path):
    manifest = {"format_version": FORMAT_VERSION, "src_lang": "en", "tgt_lang": "de"}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    assert read_manifest(tmp_path) == manifest


@pytest.mark.parametrize("written, says", [
    (None, "is not a prepared data directory \\(no manifest.json\\); run `nmt prepare`"),
    ("{", "manifest.json: unreadable manifest: "),
    (json.dumps({"format_version": FORMAT_VERSION + 1}),
     f"version {FORMAT_VERSION + 1} is not supported .*prepare the data again"),
    (json.dumps([1]), "not a transformer-nmt data directory file"),
])
def test_an_unfinished_unreadable_or_foreign_directory_is_refused(tmp_path, written, says):
    if written is not None:
        (tmp_path / MANIFEST).write_text(written, encoding="utf-8")
    with pytest.raises(UserError, match=says):
        read_manifest(tmp_path)
