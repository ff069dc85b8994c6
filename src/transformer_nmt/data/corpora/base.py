"""What every corpus recipe shares: its options, its interface and the language check."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Iterator

from transformer_nmt.errors import UserError

Pairs = Iterator[tuple[str, str]]


@dataclass(frozen=True)
class SourceOptions:
    """Everything a recipe may need beyond its name and languages."""

    mirror: str | None = None
    """A local directory or a URL to read the corpus from instead of its home."""
    cache_dir: Path | None = None
    """Where downloads are kept (prepare passes DATA_DIR/downloads)."""
    errors: str = "strict"
    """Invalid UTF-8: 'strict' stops with an error, 'replace' substitutes U+FFFD."""
    seed: int = 1
    """Seed of any random choice a recipe makes (the held-out slice of `files`)."""
    files: dict[str, str] = field(default_factory=dict)
    """The `files` recipe's inputs: keys {train,valid,test}_{src,tgt,tsv}."""
    valid_size: int | None = None
    """Pairs of train held out as valid when no valid files are given (`files`)."""


class Corpus:
    """A recipe: the splits it has and, for each, a stream of raw (source, target) pairs.

    `dropped[split]` counts pairs the recipe itself left out, by reason (for example a
    verse one translation lacks); `notes` are lines worth telling the user.
    """

    name: ClassVar[str]
    description: ClassVar[str]

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        self.src, self.tgt, self.options = src, tgt, options
        self.splits: tuple[str, ...] = ("train", "valid", "test")
        self.dropped: dict[str, dict[str, int]] = {}
        self.notes: list[str] = []

    def pairs(self, split: str) -> Pairs:
        """Raw (source, target) lines of `split`, in corpus order."""
        raise NotImplementedError

    def identity(self) -> dict:
        """A JSON description of the text this recipe reads, to tell whether a finished
        data directory was made from the same source."""
        return {}


def check_languages(corpus: str, src: str, tgt: str, known: list[str]) -> None:
    """A UserError unless both `src` and `tgt` are among the `known` languages of `corpus`
    (raised when the recipe is made, before anything is read or downloaded)."""
    for lang in (src, tgt):
        if lang not in known:
            raise UserError(
                f"corpus {corpus} has no language {lang!r}; it has {', '.join(known)}"
            )
