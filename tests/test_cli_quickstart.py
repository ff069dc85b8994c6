"""`nmt quickstart` (cli/quickstart.py): its flags reach the library's options, and the
whole command on a few hundred Multi30k pairs runs every stage and reruns without
starting over."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
import sacrebleu

from transformer_nmt import quickstart as quickstart_module
from transformer_nmt.cli import main
from transformer_nmt.quickstart import QuickstartOptions

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "multi30k"
RAW = Path("data") / "task1" / "raw"
SIZES = {"train": 300, "val": 20, "test_2016_flickr": 20}


@pytest.fixture(scope="module")
def small_mirror(tmp_path_factory) -> Path:
    """A copy of the Multi30k repository layout holding the first few hundred pairs."""
    if not (SHARED / RAW).is_dir():
        pytest.skip("the Multi30k mirror is not available")
    mirror = tmp_path_factory.mktemp("mirror")
    (mirror / RAW).mkdir(parents=True)
    for split, size in SIZES.items():
        for lang in ("de", "en"):
            with gzip.open(SHARED / RAW / f"{split}.{lang}.gz", "rt", encoding="utf-8") as source:
                lines = [line for line, _ in zip(source, range(size))]
            with gzip.open(mirror / RAW / f"{split}.{lang}.gz", "wt", encoding="utf-8") as target:
                target.writelines(lines)
    return mirror


def raw_lines(mirror: Path, split: str, lang: str) -> list[str]:
    with gzip.open(mirror / RAW / f"{split}.{lang}.gz", "rt", encoding="utf-8") as source:
        return [line.rstrip("\n") for line in source]


def run_quickstart(mirror: Path, out: Path) -> int:
    return main(["quickstart", "--corpus", "multi30k", "--src", "de", "--tgt", "en",
                 "--mirror", str(mirror), "--out", str(out), "--preset", "tiny",
                 "--minutes", "0.25", "--batch-tokens", "400"])


def test_quickstart_runs_every_stage_and_reruns_without_starting_over(small_mirror, tmp_path,
                                                                      capsys):
    out = tmp_path / "qs"
    assert run_quickstart(small_mirror, out) == 0
    printed = capsys.readouterr().out
    for stage in range(1, 7):
        assert f"[{stage}/6]" in printed
    assert "BLEU" in printed and "chrF2" in printed
    # The reported scores are sacreBLEU's on the written hypotheses against the corpus's
    # own test references, line by line, and the printed table shows the same numbers.
    scores = json.loads((out / "model.eval-test.json").read_text())
    hypotheses = (out / "model.test.hyp").read_text(encoding="utf-8").splitlines()
    references = raw_lines(small_mirror, "test_2016_flickr", "en")
    assert len(hypotheses) == len(references) == scores["sentences"] == 20
    assert scores["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert scores["chrf"] > 0  # an empty output scores 0
    for metric, key in (("BLEU", "bleu"), ("chrF2", "chrf")):
        assert any(line.split()[:2] == [metric, f"{scores[key]:.2f}"]
                   for line in printed.splitlines())
    # Training beat an untrained model, which does worse than a uniform guess over the
    # vocabulary (nll > ln 8000 ≈ 8.99 on this data; ~6.8 after 15 s on 2 busy cores).
    vocab_size = json.loads((out / "run" / "config.json").read_text())["data"]["vocab_size"]
    metrics = [json.loads(line)
               for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    last_valid = [entry for entry in metrics if entry["event"] == "valid"][-1]
    assert last_valid["nll"] < math.log(vocab_size)
    pictures = sorted(p.name for p in (out / "attention").glob("*.png"))
    assert "overview-layer2.png" in pictures and len(pictures) == 3 * 2 + 1
    assert "nmt translate --model" in printed
    assert (out / "run" / "curves.png").stat().st_size > 0
    assert json.loads((out / "run" / "config.json").read_text())["train"]["batch_tokens"] == 400

    step_files = sorted((out / "run").glob("checkpoint_[0-9]*.pt"))
    assert run_quickstart(small_mirror, out) == 0
    again = capsys.readouterr()
    assert "already prepared" in again.out + again.err
    assert sorted((out / "run").glob("checkpoint_[0-9]*.pt")) == step_files


def test_the_flags_reach_the_options(tmp_path, monkeypatch):
    given = []
    monkeypatch.setattr(quickstart_module, "quickstart", given.append)
    assert main(["quickstart", "--out", str(tmp_path / "qs"), "--corpus", "multi30k",
                 "--src", "de", "--tgt", "en", "--mirror", "m", "--preset", "tiny",
                 "--minutes", "1.5", "--batch-tokens", "300", "--device", "cpu",
                 "--set", "dropout=0.2", "--set", "label_smoothing=0"]) == 0
    assert given == [QuickstartOptions(
        out=tmp_path / "qs", corpus="multi30k", src="de", tgt="en", mirror="m", preset="tiny",
        minutes=1.5, batch_tokens=300, device="cpu",
        overrides=[("dropout", "0.2"), ("label_smoothing", "0")])]
