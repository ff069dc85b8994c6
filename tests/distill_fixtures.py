"""Helpers of the `nmt distill` tests: a tiny teacher's distillation's options, a run
with its log, the stages a run did, a copy of a finished distillation to change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from train_fixtures import tiny_overrides
from transformer_nmt.distill.options import DistillOptions
from transformer_nmt.distill.pipeline import distill
from transformer_nmt.distill.state import STAGES, STATE

STUDENT_SETTINGS = tuple((name, str(value)) for name, value in tiny_overrides(
    max_steps=4, d_model=32, d_ff=64, d_k=8, d_v=8))
"""A few steps of a narrow student: the student preset's 6+2 layers, at the tiny width."""
REPORT_FIELDS = {"parameters", "megabytes", "bleu", "chrf", "greedy_bleu", "greedy_chrf",
                 "greedy_sentences_per_second", "beam_sentences_per_second",
                 "peak_memory_mb", "presets", "sentences", "runtime", "shortlist",
                 "batch_sentences"}


def options(teacher: Path, data: Path, out: Path, **changes) -> DistillOptions:
    """A fast distillation of `teacher` on `data` into `out`, with `changes`; no export
    unless they ask for one (the tests that export copy a finished distillation)."""
    settings = {"teachers": (str(teacher),), "data": data, "out": out, "nbest": 2, "beam": 2,
                "exports": (),
                "drop": 0.1, "average_last": 1, "workers": 1, "shard_lines": 100,
                "overrides": STUDENT_SETTINGS, "report_beam": 2, "device": "cpu",
                "progress": False, **changes}
    return DistillOptions(**settings)


def run(opts: DistillOptions, exporter=None) -> tuple[dict, list[str]]:
    """The report and the log of a distillation."""
    log: list[str] = []
    report = distill(opts, log=log.append, exporter=exporter)
    return report, log


def started(log: list[str]) -> list[str]:
    """The stages a run did, by their printed headings (an export none asked for is not
    done)."""
    return [stage for stage in STAGES
            if any(line.startswith(f"\n[{STAGES.index(stage) + 1}/{len(STAGES)}]")
                   and "done already" not in line and "none asked for" not in line
                   for line in log)]


def copy_of(distilled, tmp_path) -> Path:
    """A copy of the finished distillation, to change."""
    out = tmp_path / "out"
    shutil.copytree(distilled[0], out)
    return out


def drop_record(out: Path, stage: str) -> None:
    """Forget that `stage` was done, as a run killed during it leaves DIR."""
    state = json.loads((out / STATE).read_text(encoding="utf-8"))
    del state["stages"][stage]
    (out / STATE).write_text(json.dumps(state), encoding="utf-8")


def options_for(distilled, out: Path, **changes) -> DistillOptions:
    """The fixture's options, into `out`."""
    first = json.loads((distilled[0] / "report.json").read_text(encoding="utf-8"))
    return options(Path(first["teacher"]["models"][0]), Path(first["data"]), out, **changes)
