"""Which model translates a language pair on a server with several: the model of that
pair, or two models through a language both share (a pivot: source→pivot, then
pivot→target), as Argos Translate does. Pure bookkeeping: no model is loaded here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

PREFERRED_PIVOT = "en"
"""The pivot tried first where several would do: most models are trained to or from
English, so its models are usually the best of a server's."""


@dataclass(frozen=True)
class ModelEntry:
    """One model file a server may load, and the pair it translates (None: not recorded in
    the file, which only a server with this one model accepts)."""

    path: Path
    name: str
    source: str | None
    target: str | None

    @property
    def pair(self) -> str:
        """'en-de', or the file's name for a model without recorded languages."""
        return f"{self.source}-{self.target}" if self.source and self.target else self.name


@dataclass(frozen=True)
class Route:
    """The models a request goes through, in order: one, or two through a pivot."""

    hops: tuple[ModelEntry, ...]

    @property
    def pivot(self) -> str | None:
        """The language between the two hops, or None for a direct route."""
        return self.hops[0].target if len(self.hops) == 2 else None


class NoRoute(Exception):
    """No model, or pair of models, translates the pair asked for; the message says
    which pairs the server has."""


class PairRoutes:
    """The routes between the languages of `entries` (refused before: two models of one
    pair, and a model without languages beside others)."""

    def __init__(self, entries: Sequence[ModelEntry]) -> None:
        self.entries = tuple(entries)
        self.direct = {(entry.source, entry.target): entry for entry in self.entries}

    @property
    def only(self) -> ModelEntry | None:
        """The one model of a one-model server, else None."""
        return self.entries[0] if len(self.entries) == 1 else None

    def sources(self) -> list[str]:
        """Every language some route starts from, sorted."""
        return sorted({entry.source for entry in self.entries if entry.source})

    def languages(self) -> list[str]:
        """Every language a route starts or ends at: those it starts from first (a client
        takes the first as its default source), each group sorted."""
        sources = self.sources()
        return sources + sorted({entry.target for entry in self.entries
                                 if entry.target and entry.target not in sources})

    def targets(self, source: str) -> list[str]:
        """Every language `source` translates to, directly or through a pivot, sorted."""
        return sorted(target for target in self.languages()
                      if target != source and self._find(source, target) is not None)

    def route(self, source: str, target: str) -> Route:
        """The route from `source` to `target`: the model of the pair, else two through a
        pivot (English first, then in alphabetical order). NoRoute if there is none. A
        one-model server whose file records no languages takes any pair."""
        only = self.only
        if only is not None and (only.source is None or only.target is None):
            return Route((only,))
        found = self._find(source, target)
        if found is None:
            raise NoRoute(self._missing(source, target))
        return found

    def _find(self, source: str, target: str) -> Route | None:
        if (source, target) in self.direct:
            return Route((self.direct[source, target],))
        pivots = sorted({entry.target for entry in self.entries if entry.source == source},
                        key=lambda code: (code != PREFERRED_PIVOT, code))
        for pivot in pivots:
            if pivot != target and (pivot, target) in self.direct:
                return Route((self.direct[source, pivot], self.direct[pivot, target]))
        return None

    def described(self) -> str:
        """The pairs of the server's models: 'en-de, de-en'."""
        return ", ".join(entry.pair for entry in self.entries)

    def _missing(self, source: str, target: str) -> str:
        """Why there is no route from `source` to `target`, with what the server has."""
        if source == target:
            return f"source and target are both {source}; choose two different languages"
        served = self.described()
        if source not in self.sources():
            return (f"{source} is not supported as source language: this server translates "
                    f"{served}")
        return (f"{target} is not supported as target language from {source}: this server "
                f"translates {served}, and no language links them")
