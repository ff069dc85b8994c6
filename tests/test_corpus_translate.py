"""`translate_corpus` (corpus/translate.py): only the shards not done are handed to a
backend, a part (`--shard I/N`) is its share of the shards and is not joined, and the
report says what a call did. The shards are made done by hand here, so that no model
runs; the backends translating are tests/test_corpus_workers.py's and test_corpus.py's."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from transformer_nmt.corpus.manifest import open_manifest
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.shards import checksum_path, shard_path
from transformer_nmt.corpus.translate import CorpusReport, translate_corpus
from transformer_nmt.errors import UserError
from transformer_nmt.files import file_sha256


@pytest.fixture
def options(tmp_path) -> CorpusOptions:
    """Six lines in shards of two; the model is only hashed, never loaded."""
    (tmp_path / "a.en").write_text("".join(f"line {n}\n" for n in range(6)))
    (tmp_path / "model.pt").write_bytes(b"weights")
    return CorpusOptions((str(tmp_path / "model.pt"),), (str(tmp_path / "a.en"),),
                         str(tmp_path / "out"), shard_lines=2)


def _all_done(options: CorpusOptions) -> Path:
    """Every shard of the plan translated, as a worker leaves it."""
    out = Path(options.out)
    manifest = open_manifest(options)
    (out / ".shards").mkdir()
    for number, shard in enumerate(manifest["shards"]):
        shard_path(out, number).write_text(f"shard {number}\n" * (shard["end"] - shard["start"]))
        checksum_path(out, number).write_text(json.dumps({
            "sha256": file_sha256(shard_path(out, number)),
            "sentences": shard["end"] - shard["start"], "tokens": 1}))
    return out


def test_shards_done_are_not_translated_again_and_the_outputs_are_joined(options):
    out = _all_done(options)
    report = translate_corpus(options)
    assert (report.shards, report.shards_translated, report.sentences) == (3, 0, 0)
    assert report.outputs == (str(out / "a.en"),)
    assert (out / "a.en").read_text() == "shard 0\nshard 0\nshard 1\nshard 1\nshard 2\nshard 2\n"


def test_a_part_is_its_share_of_the_shards_and_is_not_joined(options):
    out = _all_done(options)
    assert translate_corpus(options, part=(0, 2)).shards == 1
    report = translate_corpus(options, part=(1, 2))
    assert (report.shards, report.shards_translated, report.outputs) == (2, 0, ())
    assert not (out / "a.en").exists()


@pytest.mark.parametrize("part, backend, says", [
    ((2, 2), "local", "--shard 2/2: I must be from 0 to N-1"),
    ((0, 2), "ray", "--shard translates a part in this process; it takes no --backend"),
])
def test_a_part_out_of_range_or_with_a_backend_is_refused(options, part, backend, says):
    with pytest.raises(UserError, match=says):
        translate_corpus(replace(options, backend=backend), part=part)


def test_the_report_sums_up_what_a_call_did():
    report = CorpusReport(shards=9, sentences=37, tokens=400, seconds=2.0,
                          shards_translated=9, shards_redone=1, outputs=("a.en", "b.en"))
    assert report.summary() == ("translated 37 sentences (400 subword tokens) in 2.0 s: "
                                "18.5 sentences/s; 9 of 9 shards translated, 1 redone; "
                                "outputs a.en, b.en")
    assert CorpusReport(shards=0).summary().startswith("translated 0 sentences")
