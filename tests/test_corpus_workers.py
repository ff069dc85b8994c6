"""The local backend (corpus/workers.py): shards translated by worker processes, a shard
whose worker was killed mid-shard translated once more, every shard done once and the
same as this process translates it (`translate_here`, a part's backend)."""

from __future__ import annotations

from pathlib import Path

from corpus_fixtures import killing_a_worker_mid_shard
from decode_fixtures import sentences
from transformer_nmt.config import DecodeConfig
from transformer_nmt.corpus.manifest import open_manifest
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.shards import merge, shard_task
from transformer_nmt.corpus.workers import translate_here, translate_in_workers
from transformer_nmt.decode.text.translator import TranslatorOptions


def _options(model_file: Path, source: Path, out: Path) -> CorpusOptions:
    search = TranslatorOptions(decode=DecodeConfig(beam=2, max_len_b=5), engine="torch",
                               precision="fp32", device="cpu", workers=2)
    return CorpusOptions((str(model_file),), (str(source),), str(out), translator=search,
                         shard_lines=3)


def _translate(options: CorpusOptions, backend) -> tuple[int, dict[int, dict], bytes]:
    """What `backend` returns, the records it gave by shard, and the joined output."""
    out = Path(options.out)
    manifest = open_manifest(options)
    tasks = [shard_task(out, manifest, number) for number in range(len(manifest["shards"]))]
    records: dict[int, dict] = {}

    def done(number: int, record: dict) -> None:
        assert number not in records, f"shard {number} done twice"
        records[number] = record

    returned = backend(options, tasks, done)
    [output] = merge(out)
    return returned, records, output.read_bytes()


def test_a_worker_killed_mid_shard_has_its_shard_redone(model_file, tmp_path):
    source = tmp_path / "a.en"
    source.write_text("\n".join(sentences(12, seed=1)) + "\n", encoding="utf-8")
    _, here, expected = _translate(_options(model_file, source, tmp_path / "here"),
                                   translate_here)
    out = tmp_path / "out"
    with killing_a_worker_mid_shard(out) as killed:
        redone, records, output = _translate(_options(model_file, source, out),
                                             translate_in_workers)
    assert len(killed) == 1 and redone >= 1
    assert sorted(records) == [0, 1, 2, 3] and output == expected
    assert {n: r["sha256"] for n, r in records.items()} == {n: r["sha256"]
                                                           for n, r in here.items()}
