"""`nmt translate-corpus --backend ray` (corpus/ray_actors.py): Ray actors give the local
backend's output, which is `nmt translate`'s, byte for byte; a rerun does nothing; an actor
killed mid-shard has its shard redone and every line is there once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus_fixtures import killing_a_worker_mid_shard
from decode_fixtures import sentences
from transformer_nmt.cli import main
from transformer_nmt.corpus.manifest import MANIFEST
from transformer_nmt.corpus.ray_actors import RAY_ATTEMPTS, _start_ray_shard, _started_path
from transformer_nmt.corpus.shards import ShardTask
from transformer_nmt.errors import UserError

ray = pytest.importorskip("ray", reason="the ray backend needs Ray: pip install -e '.[ray]'")

FAST = ["--beam", "2", "--max-len-b", "5", "--precision", "fp32"]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """Ray on this machine's two cores for the module, stopped at its end."""
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    lines = sentences(13, seed=1)
    lines[3] = ""
    (directory / "a.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "b.en").write_text("\n".join(sentences(4, seed=2)) + "\n", encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def expected(model_file, corpus, tmp_path_factory) -> dict[str, bytes]:
    """`nmt translate`'s output for each input, by name."""
    out = tmp_path_factory.mktemp("expected")
    for path in corpus.iterdir():
        assert main(["translate", "--model", str(model_file), "--input", str(path),
                     "--output", str(out / path.name), *FAST]) == 0
    return {path.name: path.read_bytes() for path in out.iterdir()}


def _run(model_file: Path, corpus: Path, out: Path, *extra: str) -> dict:
    assert main(["translate-corpus", "--model", str(model_file), "--input", str(corpus),
                 "--out", str(out), "--shard-lines", "5", "--workers", "2", "--report",
                 str(out.parent / f"{out.name}.json"), *FAST, *extra]) == 0
    return json.loads((out.parent / f"{out.name}.json").read_text())


def _outputs(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in out.iterdir()
            if path.is_file() and not path.name.startswith(".") and path.name != MANIFEST}


def test_ray_gives_the_local_backends_output_and_a_rerun_does_nothing(model_file, corpus,
                                                                      expected, tmp_path):
    _run(model_file, corpus, tmp_path / "local")
    report = _run(model_file, corpus, tmp_path / "ray", "--backend", "ray")
    assert _outputs(tmp_path / "ray") == _outputs(tmp_path / "local") == expected
    assert (report["shards_translated"], report["shards_redone"]) == (3 + 1, 0)
    assert report["sentences"] == 13 + 4
    manifest = json.loads((tmp_path / "ray" / MANIFEST).read_text())
    assert all(shard["state"] == "done" for shard in manifest["shards"])

    report = _run(model_file, corpus, tmp_path / "ray", "--backend", "ray")
    assert report["shards_translated"] == 0 and _outputs(tmp_path / "ray") == expected


def test_an_actor_killed_mid_shard_has_its_shard_redone(model_file, corpus, expected,
                                                       tmp_path):
    # Without a Ray running, the command starts its own on this machine's cores and ends
    # it: that path too.
    ray.shutdown()
    with killing_a_worker_mid_shard(tmp_path / "ray") as killed:
        report = _run(model_file, corpus, tmp_path / "ray", "--backend", "ray")
    assert len(killed) == 1
    assert _outputs(tmp_path / "ray") == expected
    assert report["shards_translated"] == 4 and report["shards_redone"] == 1
    assert not ray.is_initialized()


def test_a_shard_whose_actors_keep_dying_stops_the_run_in_one_line(tmp_path):
    """Ray Data restarts actors and retries their shard without end: the shard's mark
    counts the actors given it, and the one after RAY_ATTEMPTS refuses it."""
    task = ShardTask(7, "in.en", 10, 20, str(tmp_path / "000007.txt"),
                     str(tmp_path / "000007.json"))
    redone = [_start_ray_shard(task) for _ in range(RAY_ATTEMPTS)]
    assert redone == [False] + [True] * (RAY_ATTEMPTS - 1)
    with pytest.raises(UserError, match=f"shard 7 .in.en lines 11-20.: its Ray actor died "
                                        f"{RAY_ATTEMPTS} times"):
        _start_ray_shard(task)
    assert not _started_path(task).exists()  # the next command tries it afresh


@pytest.mark.parametrize("flags, says", [
    (["--backend", "ray", "--shard", "0/2"], "--shard translates a part in this process"),
    (["--ray-address", "auto"], "--ray-address is for --backend ray"),
])
def test_ray_flags_that_do_not_go_together_are_one_line(model_file, corpus, tmp_path, capsys,
                                                        flags, says):
    assert main(["translate-corpus", "--model", str(model_file), "--input", str(corpus),
                 "--out", str(tmp_path / "out"), *flags]) == 2
    error = capsys.readouterr().err
    assert says in error and len(error.strip().splitlines()) == 1
