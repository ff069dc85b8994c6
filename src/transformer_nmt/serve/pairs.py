"""Which model translates a language pair on a server with several: the model of that
pair, or two models through a language both share (a pivot: source→pivot, then
pivot→target), as Argos Translate does. A multilingual model (an OPUS-MT one-to-many
model) translates into every language it has a target-language token for, each a pair
of its own. Pure bookkeeping: no model is loaded here."""

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
    the file, which only a server with this one model accepts); for a multilingual model,
    its target languages and their tokens, whatever target the file declares (a group
    such as mul or ROMANCE)."""

    path: Path
    name: str
    source: str | None
    target: str | None
    tokens: tuple[tuple[str, str], ...] = ()
    """(language, token) of each target of a multilingual model: ('fr', '>>fra<<')."""

    @property
    def pair(self) -> str:
        """'en-de', or the file's name for a model without recorded languages."""
        return f"{self.source}-{self.target}" if self.source and self.target else self.name

    @property
    def targets(self) -> tuple[str, ...]:
        """Every language the model translates into: its tokens' languages, else its
        target (none when not recorded)."""
        if self.tokens:
            return tuple(language for language, _ in self.tokens)
        return (self.target,) if self.target else ()

    def token(self, target: str | None) -> str | None:
        """The token that makes a multilingual model translate into `target`, or None
        (a one-pair model, or a target it has no token for)."""
        return dict(self.tokens).get(target) if target is not None else None

    def described(self) -> str:
        """'en-de', or for a multilingual model 'en-mul (to es, fr)'."""
        if not self.tokens:
            return self.pair
        return f"{self.pair} (to {', '.join(self.targets)})"


@dataclass(frozen=True)
class Route:
    """The models a request goes through, in order: one, or two through a pivot; and the
    language each translates into (empty: each model's own, for a one-model server that
    takes any pair)."""

    hops: tuple[ModelEntry, ...]
    targets: tuple[str, ...] = ()

    @property
    def pivot(self) -> str | None:
        """The language between the two hops, or None for a direct route."""
        return self.targets[0] if len(self.hops) == 2 else None

    @property
    def tokens(self) -> tuple[str | None, ...]:
        """Per hop, the target-language token its model needs before each sentence (a
        multilingual model's), or None."""
        return tuple(hop.token(target) for hop, target in
                     zip(self.hops, self.targets or (None,) * len(self.hops)))


class NoRoute(Exception):
    """No model, or pair of models, translates the pair asked for; the message says
    which pairs the server has."""


class PairRoutes:
    """The routes between the languages of `entries` (refused before: two models of one
    pair, and a model without languages beside others)."""

    def __init__(self, entries: Sequence[ModelEntry]) -> None:
        self.entries = tuple(entries)
        self.direct = {(entry.source, target): entry for entry in self.entries
                       for target in entry.targets}

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
        return sources + sorted({target for entry in self.entries for target in entry.targets
                                 if target not in sources})

    def targets(self, source: str) -> list[str]:
        """Every language `source` translates to, directly or through a pivot, sorted."""
        return sorted(target for target in self.languages()
                      if target != source and self._find(source, target) is not None)

    def route(self, source: str, target: str) -> Route:
        """The route from `source` to `target`: the model of the pair, else two through a
        pivot (English first, then in alphabetical order). NoRoute if there is none. A
        one-model server whose file records no languages takes any pair (a multilingual
        one with the token of `target`, where it has one)."""
        only = self.only
        if only is not None and (only.source is None or only.target is None):
            return Route((only,), (target,))
        found = self._find(source, target)
        if found is None:
            raise NoRoute(self._missing(source, target))
        return found

    def _find(self, source: str, target: str) -> Route | None:
        if (source, target) in self.direct:
            return Route((self.direct[source, target],), (target,))
        pivots = sorted({pivot for entry in self.entries if entry.source == source
                         for pivot in entry.targets},
                        key=lambda code: (code != PREFERRED_PIVOT, code))
        for pivot in pivots:
            if pivot not in (source, target) and (pivot, target) in self.direct:
                return Route((self.direct[source, pivot], self.direct[pivot, target]),
                             (pivot, target))
        return None

    def described(self) -> str:
        """The pairs of the server's models: 'en-de, de-en, en-mul (to es, fr)'."""
        return ", ".join(entry.described() for entry in self.entries)

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
