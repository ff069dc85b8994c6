"""One shard of a corpus translation (corpus/shards.py): its lines, from its own first
byte, translated into its file and record; whether a shard is done, judged by its file
against its record; and each input's output joined from its shards, or refused naming
the shards not done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_nmt.config import DecodeConfig
from transformer_nmt.corpus.manifest import open_manifest
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.shards import (checksum_path, describe_shard, merge, shard_path,
                                           shard_problem, shard_task, translate_shard)
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.files import file_sha256

LINES = {"a.en": ["a1", "a2", "a3"], "b.en": ["b1", "b2", "b3", "b4"]}


@pytest.fixture
def planned(tmp_path) -> tuple[Path, dict]:
    """DIR and its manifest: a.en in shards of lines 1-2 and 3, b.en in 1-2 and 3-4."""
    (tmp_path / "in").mkdir()
    for name, lines in LINES.items():
        (tmp_path / "in" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "model.pt").write_bytes(b"weights")
    options = CorpusOptions((str(tmp_path / "model.pt"),), (str(tmp_path / "in"),),
                            str(tmp_path / "out"), shard_lines=2)
    return tmp_path / "out", open_manifest(options)


def _translated(out: Path, manifest: dict, number: int) -> None:
    """Shard `number` done as a translator would leave it: its lines upper-cased."""
    shard = manifest["shards"][number]
    lines = LINES[manifest["inputs"][shard["input"]]["output"]][shard["start"]:shard["end"]]
    shard_path(out, number).parent.mkdir(exist_ok=True)
    shard_path(out, number).write_text("".join(line.upper() + "\n" for line in lines))
    checksum_path(out, number).write_text(json.dumps(
        {"sha256": file_sha256(shard_path(out, number)), "sentences": len(lines),
         "tokens": 2 * len(lines)}))


def test_a_shard_is_done_when_its_file_matches_its_record(planned):
    out, manifest = planned
    assert shard_problem(out, manifest, 0) == "not translated"
    _translated(out, manifest, 0)
    assert shard_problem(out, manifest, 0) is None
    shard_path(out, 0).write_text("A1\nA3\n")
    assert shard_problem(out, manifest, 0) == "damaged (its SHA-256 differs)"
    _translated(out, manifest, 0)
    record = json.loads(checksum_path(out, 0).read_text())
    checksum_path(out, 0).write_text(json.dumps({**record, "sentences": 1}))
    assert shard_problem(out, manifest, 0) == "damaged (its record has another line count)"
    shard_path(out, 0).unlink()
    assert shard_problem(out, manifest, 0) == "missing"
    checksum_path(out, 0).unlink()
    checksum_path(out, 0).mkdir()
    assert shard_problem(out, manifest, 0) == "unreadable (Is a directory)"


def test_a_shard_is_named_by_its_input_and_lines_and_its_task_knows_its_byte(planned):
    out, manifest = planned
    assert describe_shard(manifest, 3).startswith("shard 3 (")
    assert describe_shard(manifest, 3).endswith("b.en lines 3-4)")
    task = shard_task(out, manifest, 3)
    assert (task.number, task.start, task.end, task.offset) == (3, 2, 4, 6)
    assert (task.output, task.record) == (str(shard_path(out, 3)), str(checksum_path(out, 3)))


def test_merge_joins_each_inputs_shards_in_order(planned):
    out, manifest = planned
    for number in range(len(manifest["shards"])):
        _translated(out, manifest, number)
    assert merge(out) == [out / "a.en", out / "b.en"]
    assert (out / "a.en").read_text() == "A1\nA2\nA3\n"
    assert (out / "b.en").read_text() == "B1\nB2\nB3\nB4\n"


def test_merge_refuses_in_one_line_naming_three_shards_not_done(planned, tmp_path):
    out, manifest = planned
    _translated(out, manifest, 1)
    with pytest.raises(UserError) as error:
        merge(out)
    message = str(error.value)
    assert message.startswith(f"{out}: 3 shards not done: shard 0 (")
    assert "a.en lines 1-2) not translated; shard 2 (" in message
    assert "run the command again without --merge" in message and "\n" not in message
    assert not (out / "a.en").exists()
    with pytest.raises(UserError, match="no manifest.json; translate into it first"):
        merge(tmp_path / "elsewhere")


def test_a_shard_translates_its_own_lines_numbered_from_the_inputs_first(planned, model_file):
    out, manifest = planned
    translator = Translator.from_files([model_file], TranslatorOptions(
        decode=DecodeConfig(beam=2, nbest=2, max_len_b=3), engine="torch", precision="fp32",
        device="cpu"))
    task = shard_task(out, manifest, 3)
    shard_path(out, 3).parent.mkdir()
    record = translate_shard(translator, task, as_json=False, errors="strict")
    lines = shard_path(out, 3).read_text().splitlines()
    assert [int(line.split(" ||| ")[0]) for line in lines] == [2, 2, 3, 3]  # b.en's 3rd, 4th
    assert record == json.loads(checksum_path(out, 3).read_text())
    assert (record["sentences"], record["sha256"]) == (2, file_sha256(shard_path(out, 3)))
    assert shard_problem(out, manifest, 3) is None

    (Path(manifest["inputs"][1]["path"])).write_text("b1\nb2\nb3\n")  # cut since planned
    with pytest.raises(UserError, match="b.en has 3 lines, fewer than when it was planned"):
        translate_shard(translator, task, as_json=False, errors="strict")
