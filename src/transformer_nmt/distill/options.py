"""What `nmt distill` does and from what: its options, declared once for the library and
the command line (which derives its flags from these fields without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from transformer_nmt.config import DEFAULT_SHARD_LINES, DecodeEngine, Quantization
from transformer_nmt.errors import UserError
from transformer_nmt.fields import check_types, setting

ExportFormat = Literal["ctranslate2", "argos"]
"""What stage 6 exports the student to, named as `nmt export --to` names them."""
DEFAULT_QUANTIZATION = "int8"
"""The student's exported weights unless told: it is made to be small and fast."""
DEFAULT_EXPORTS: tuple[ExportFormat, ...] = ("ctranslate2",)
"""What the student is exported to unless told: the runtime users serve it with."""


@dataclass(frozen=True)
class DistillOptions:
    """One distillation: the teacher(s), the data, the student and how each stage runs.
    The fields without a flag of their own (teachers, data, out, mono, overrides, exports,
    device, progress) are given by hand on the command line."""

    teachers: tuple[str, ...]
    """The teacher's model file, or several for an ensemble (mean of log-probabilities)."""
    data: Path
    """The prepared data directory whose train sources the teacher translates and whose
    valid and test splits the student is validated and measured on."""
    out: Path
    """The working directory: every stage's output, its state file and the report."""
    student: str = setting("student-tiny", metavar="PRESET")
    """The student's preset (see `nmt presets`: student-tiny, student-base)."""
    mono: tuple[str, ...] = ()
    """Monolingual source files translated by the teacher too (no reference: the teacher's
    best candidate is kept)."""
    overrides: tuple[tuple[str, str], ...] = ()
    """(field, value) pairs of ModelConfig/TrainConfig for the student, as `nmt train --set`."""
    beam: int = setting(4, metavar="K")
    """The teacher's beam size when translating the training sources."""
    nbest: int = setting(4, metavar="N")
    """Candidates per sentence kept from the teacher's beam, among which the one closest to
    the reference (sentence chrF) is chosen; at most the beam."""
    drop: float = setting(0.05, metavar="SHARE")
    """Share of the chosen translations dropped, those with the teacher's worst per-token
    cross-entropy (Mozilla's translations pipeline drops 5%)."""
    references: bool = setting(True)
    """Stage 3 trains the student on the selected pairs and --data's training pairs
    together (twice the pairs); --no-references, on the teacher's pairs alone. With the
    references, a student that had learned no more than its teacher's greedy search came
    close to the teacher's beam search (bench/RESULTS.md)."""
    average_last: int = setting(2, metavar="N")
    """The student's last numbered checkpoints averaged into DIR/student.pt: 2, as the
    quickstart averages a short run still improving (student-tiny saves a checkpoint a
    minute); a run of hours may average more."""
    engine: DecodeEngine = "auto"
    """The runtime the teacher translates stage 1's shards on (as `nmt translate
    --engine`; an ensemble of teachers decodes on torch)."""
    workers: int | None = setting(None, metavar="N")
    """Processes translating shards of the training sources in stage 1 (default: as many as
    `nmt translate-corpus` starts; 1 translates in this process)."""
    shard_lines: int = setting(DEFAULT_SHARD_LINES, metavar="N")
    """Source lines per shard of stage 1 (the unit a rerun resumes from, and of
    `nmt translate-corpus --shard` on a cluster)."""
    backend: Literal["local", "ray"] = "local"
    """Who translates stage 1's shards: local worker processes, or Ray actors through Ray
    Data, here or on a Ray cluster (as `nmt translate-corpus --backend`)."""
    ray_address: str | None = setting(None, metavar="ADDR")
    """With --backend ray, the Ray cluster to join (e.g. auto); DIR must then be on a
    filesystem every node shares, at the same path."""
    report_beam: int = setting(4, metavar="K")
    """The beam of the report's beam search (greedy is measured too): the teacher searching
    with this beam, as it is served, is compared with the student's greedy search."""
    exports: tuple[ExportFormat, ...] = DEFAULT_EXPORTS
    """The runtimes stage 6 exports the student to, as `nmt export --to` does (ctranslate2:
    DIR/student-ctranslate2, with the student's shortlist as its vmap.txt; argos:
    DIR/student.argosmodel; both need the ctranslate2 package); () exports nothing. The
    command line's --export is written by hand (cli/distill.py): a repeatable flag cannot
    replace a default that is not empty."""
    quantization: Quantization = DEFAULT_QUANTIZATION
    """With an export: how CTranslate2 stores the student's weights, as `nmt export
    --quantization` (int8: about 4x smaller and faster on CPUs, which is what a student is
    for)."""
    device: str | None = None
    """Where the teacher translates and the student trains: 'cpu', 'cuda', or None for
    CUDA when present (the report measures on the CPU, in int8, as a student is served)."""
    progress: bool = True
    """Show progress bars."""

    def __post_init__(self) -> None:
        # Before check_types, which could only say that the tuple is not of the right type.
        for name in self.exports if isinstance(self.exports, tuple) else ():
            if name not in get_args(ExportFormat):
                raise UserError(f"--export {name!r} is not a format nmt distill exports to; "
                                f"give {' or '.join(get_args(ExportFormat))}")
        check_types(self)
        if len(set(self.exports)) < len(self.exports):
            raise UserError(f"--export {' '.join(self.exports)} names a format twice; "
                            "give each once")
        if not self.exports and self.quantization != DEFAULT_QUANTIZATION:
            raise UserError(f"--quantization {self.quantization} is for the export stage, "
                            "which --export none skips; drop one of them")
        if not self.teachers:
            raise UserError("give at least one --teacher model file")
        if not 0 <= self.drop <= 1:
            raise UserError(f"--drop is a share of the sentences, from 0 to 1, not {self.drop!r}")
        for name in ("beam", "nbest", "average_last", "shard_lines", "report_beam"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, not "
                                f"{getattr(self, name)!r}")
        if self.nbest > self.beam:
            raise UserError(f"--nbest {self.nbest} is more candidates than --beam {self.beam} "
                            "finds; give --nbest at most the beam")
        if self.workers is not None and self.workers < 1:
            raise UserError(f"--workers must be at least 1, not {self.workers!r}")

