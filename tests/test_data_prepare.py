"""A corpus made into a data directory by the library (data/prepare.py): made once, found
made with the same recipe, refused with another, and bad languages refused before any
work. (The command, its resumption and its one-line errors: tests/test_cli_prepare.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from transformer_nmt.data.prepare import prepare
from transformer_nmt.data.prepare_options import PrepareOptions
from transformer_nmt.errors import UserError

WORDS = ("a", "the", "small", "big", "green", "old")


@pytest.fixture
def options(tmp_path) -> PrepareOptions:
    source = tmp_path / "train.en"
    source.write_text("".join(f"{w} house\n" for w in WORDS * 10), encoding="utf-8")
    target = tmp_path / "train.de"
    target.write_text("".join(f"Haus {w}\n" for w in WORDS * 10), encoding="utf-8")
    return PrepareOptions(corpus="files", src="en", tgt="de", out=tmp_path / "data",
                          vocab_size=28, threads=1,
                          files={"train_src": str(source), "train_tgt": str(target),
                                 "valid_src": str(source), "valid_tgt": str(target)})


def test_made_once_then_found_made_and_another_recipe_refused(options):
    log: list[str] = []
    first = prepare(options, command="nmt prepare ...", progress=False, log=log.append)
    assert not first.already_prepared and first.manifest["command"] == "nmt prepare ..."
    assert first.manifest["splits"]["train"]["pairs"] == 60
    assert (options.out / "manifest.json").is_file() and (options.out / "spm.model").is_file()
    log.clear()
    again = prepare(options, progress=False, log=log.append)
    assert again.already_prepared and again.manifest == first.manifest
    assert any("already prepared with these settings" in line for line in log)
    with pytest.raises(UserError, match=r"different recipe \(max_len: 250 -> 100\)"):
        prepare(replace(options, max_len=100), progress=False, log=log.append)


@pytest.mark.parametrize("src, tgt, says", [("en", "en", "they must differ"),
                                            ("e n", "de", "must be letters, digits")])
def test_bad_languages_are_refused_before_any_work(options, src, tgt, says):
    with pytest.raises(UserError, match=says):
        prepare(replace(options, src=src, tgt=tgt), progress=False, log=lambda line: None)
    assert not options.out.exists()
