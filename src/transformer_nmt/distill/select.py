"""Stage 2 of `nmt distill`: per sentence, the teacher's candidate to learn from, and the
sentences to leave out.

Among a sentence's n-best candidates the one closest to the reference by sentence chrF is
kept (Mozilla's translations pipeline, `extract_best`); a monolingual sentence, which has
no reference, keeps the teacher's best. Then the worst share by the teacher's per-token
cross-entropy of the kept candidate is dropped (Mozilla's default: 5%): what the teacher
was least sure of is most often wrong, and a student copies its teacher's mistakes.

Two passes over the files: the first chooses and scores, keeping per sentence only the
chosen rank, its cross-entropy and whether it is empty (a few bytes, whatever the corpus
size); the second writes the kept pairs.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from transformer_nmt.data.text import LineWriter, read_lines
from transformer_nmt.errors import UserError
from transformer_nmt.evaluate import sentence_chrf


@dataclass(frozen=True)
class Choice:
    """One source sentence and the teacher's candidate kept for it."""

    source: str
    target: str
    cross_entropy: float
    """The teacher's mean negative log-probability per token of `target`, end included."""


@dataclass
class Selection:
    """What the selection kept and dropped, and why."""

    sentences: int = 0
    kept: int = 0
    empty: int = 0
    """Dropped because the chosen candidate was empty."""
    worst: int = 0
    """Dropped as the worst share by cross-entropy."""
    threshold: float | None = None
    """The lowest cross-entropy dropped as worst (None: none was)."""
    closest_not_first: int = 0
    """Sentences whose closest candidate to the reference was not the teacher's best."""
    files: list[str] = field(default_factory=list)

    def summary(self, drop: float) -> str:
        """One line: how many were kept, how many dropped and why."""
        above = f" (above {self.threshold:.3f} nats/token)" if self.threshold is not None else ""
        return (f"kept {self.kept} of {self.sentences} pairs; dropped {self.empty} empty "
                f"translations and {self.worst} as the worst {drop:.0%} by the teacher's "
                f"per-token cross-entropy{above}; {self.closest_not_first} sentences kept a "
                "candidate closer to the reference than the teacher's best")


def _valid_candidates(candidates: object) -> bool:
    return (isinstance(candidates, list) and bool(candidates)
            and all(isinstance(c, dict) and isinstance(c.get("text"), str)
                    and isinstance(c.get("token_scores"), list) for c in candidates))


def read_nbest(path: Path) -> Iterator[list[dict]]:
    """The candidates of each line of a JSON n-best output of `translate_corpus`, best
    first; UserError naming the file and line for anything else."""
    for number, line in enumerate(read_lines(path), start=1):
        try:
            candidates = json.loads(line).get("nbest")
        except (ValueError, AttributeError):
            candidates = None
        if not _valid_candidates(candidates):
            raise UserError(f"{path} line {number}: not a JSON n-best line with token scores; "
                            f"delete {path.parent} to translate again")
        yield candidates


def choose(sources: Iterable[str], nbest: Iterable[list[dict]],
           references: Iterable[str] | None) -> Iterator[tuple[Choice, int]]:
    """Per sentence, the candidate closest to its reference by sentence chrF (ties: the
    teacher's order), or the teacher's best where there are no references; with the
    chosen candidate's rank in the teacher's n-best. ValueError if the counts differ."""
    rows = (zip(sources, nbest, references, strict=True) if references is not None
            else ((source, candidates, None) for source, candidates
                  in zip(sources, nbest, strict=True)))
    for source, candidates, reference in rows:
        best = 0
        if reference is not None:
            scores = sentence_chrf([c["text"] for c in candidates], [reference] * len(candidates))
            best = max(range(len(candidates)), key=lambda i: (scores[i], -i))
        chosen = candidates[best]
        token_scores = chosen["token_scores"]  # log P of each token, end of sentence last
        cross_entropy = -sum(token_scores) / max(len(token_scores), 1)
        yield Choice(source, chosen["text"], cross_entropy), best


def filter_worst(cross_entropy: np.ndarray, empty: np.ndarray, drop: float,
                 source: str) -> tuple[np.ndarray, Selection]:
    """Which sentences to keep (a bool mask): not those whose chosen translation is
    `empty`, nor the `drop` share (of all sentences, rounded to the nearest count) with
    the highest `cross_entropy`; UserError in one line if nothing would be left."""
    count = len(cross_entropy)
    selection = Selection(sentences=count, empty=int(empty.sum()))
    non_empty = np.flatnonzero(~empty)
    worst = min(round(count * drop), len(non_empty))
    # Stable: among equal scores the earlier sentences go first, the same on every run.
    ranked = non_empty[np.argsort(-cross_entropy[non_empty], kind="stable")]
    keep = ~empty
    keep[ranked[:worst]] = False
    if not keep.any():
        raise UserError(f"the filter would drop all {count} translations of {source} "
                        f"({selection.empty} empty, {worst} as the worst {drop:.0%}); give a "
                        "smaller --drop, or check the teacher's translations")
    selection.kept, selection.worst = int(keep.sum()), worst
    if worst:
        selection.threshold = float(cross_entropy[ranked[worst - 1]])
    return keep, selection


def _rows(sources: Path, nbest: Path, references: Path | None) -> Iterator[tuple[Choice, int]]:
    """`choose` over one input's files; UserError if their line counts differ."""
    found = choose(read_lines(sources), read_nbest(nbest),
                   read_lines(references) if references is not None else None)
    try:
        yield from found
    except ValueError:  # zip(strict=True): the files' line counts differ
        files = ", ".join(str(path) for path in (nbest, sources, references) if path)
        raise UserError(f"{files}: not the same number of lines; delete {nbest.parent} "
                        "to translate again") from None


def select(inputs: list[tuple[Path, Path, Path | None]], drop: float, out_src: Path,
           out_tgt: Path) -> Selection:
    """Choose and filter the teacher's translations of each (sources, n-best output,
    references or None) into the parallel files `out_src` and `out_tgt`, written whole."""
    # Typed arrays, 13 bytes a sentence: a list of Python floats would take ten times that.
    ranks, cross_entropy, empty = array("i"), array("d"), array("b")
    for files in inputs:
        for choice, rank in _rows(*files):
            ranks.append(rank)
            cross_entropy.append(choice.cross_entropy)
            empty.append(not choice.target.strip())
    keep, selection = filter_worst(np.frombuffer(cross_entropy, dtype=np.float64),
                                   np.frombuffer(empty, dtype=np.int8).astype(bool), drop,
                                   ", ".join(str(files[0]) for files in inputs))
    selection.closest_not_first = int(np.count_nonzero(np.frombuffer(ranks, dtype=np.int32)))
    line = 0
    with LineWriter(out_src) as src, LineWriter(out_tgt) as tgt:
        for sources, nbest, _ in inputs:
            for source, candidates in zip(read_lines(sources), read_nbest(nbest)):
                if keep[line]:
                    src.write(source)
                    tgt.write(candidates[ranks[line]]["text"])
                line += 1
    selection.files = [str(out_src), str(out_tgt)]
    return selection
