"""Which stages of a distillation are done: DIR/distill.json, rewritten whole and atomically
after each stage, so that a stage killed half-way has no record and is redone.

Each stage's record holds the settings it ran with and the files it made (relative to
DIR); a stage is done when its record is there, its settings are today's and its files
still exist. A stage done again drops the records of every stage made from its output,
directly or not, since their inputs have changed; report and export are both made from
the student and its shortlist alone, so that redoing one keeps the other.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformer_nmt.config import differences
from transformer_nmt.errors import UserError
from transformer_nmt.files import check_format, write_json_atomic

FORMAT = "nmt-distill"
VERSION = 1
STATE = "distill.json"
STAGES = ("translate", "select", "train", "shortlist", "report", "export")
"""The stages in order."""
INPUT = {"select": "translate", "train": "select", "shortlist": "train",
         "report": "shortlist", "export": "shortlist"}
"""The stage whose output each stage is made from."""


def made_from(stage: str) -> list[str]:
    """The stages made from `stage`'s output, directly or through others, in order."""
    found = [stage]
    for later in STAGES:
        if INPUT.get(later) in found:
            found.append(later)
    return found[1:]


class DistillState:
    """The stage records of one distillation directory."""

    def __init__(self, out: Path) -> None:
        self.path = Path(out) / STATE
        self.stages: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                record = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise UserError(f"{self.path}: cannot be read ({error}); delete it to redo "
                                "every stage (finished work is found again), or distill into "
                                "another --out") from None
            check_format(record, self.path, FORMAT, VERSION,
                         remedy="distill into another --out")
            self.stages = record.get("stages", {})

    def done(self, stage: str, settings: dict[str, Any], *,
             redo_if_changed: bool = False) -> dict[str, Any] | None:
        """The record of `stage` if it is done with `settings` and its files are all there;
        None if it is to be (re)done; UserError naming the setting if it was done with
        other ones (its work would be thrown away silently otherwise), unless
        `redo_if_changed` (a stage cheap to redo whose outputs nothing is made from)."""
        record = self.stages.get(stage)
        if record is None:
            return None
        was = json.loads(json.dumps(record["settings"]))
        now = json.loads(json.dumps(settings))
        if was != now and redo_if_changed:
            return None
        if was != now:
            changed = ", ".join(differences(was, now)) or "its settings"
            raise UserError(f"{self.path}: stage {stage} was done with other settings "
                            f"({changed}); distill into another --out, or delete that "
                            "directory to start again")
        files = [self.path.parent / path for path in record["files"]]
        if not all(path.exists() for path in files):
            return None
        return {**record, "files": [str(path) for path in files]}

    def finish(self, stage: str, settings: dict[str, Any], files: list[Path],
               **facts: Any) -> dict[str, Any]:
        """Record `stage` as done with `settings`, having made `files` (and `facts` to
        report); the records of the stages made from its output are dropped."""
        for name in made_from(stage):
            self.stages.pop(name, None)
        # Inside DIR, relative to it: a directory moved or copied whole stays done.
        self.stages[stage] = {"settings": json.loads(json.dumps(settings)),
                              "files": [os.path.relpath(path, self.path.parent)
                                        for path in files], **facts}
        write_json_atomic(self.path, {"format": FORMAT, "version": VERSION,
                                      "stages": self.stages})
        return {**self.stages[stage], "files": [str(path) for path in files]}
