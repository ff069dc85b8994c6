"""A pair the server has no model of, translated through a pivot language both sides
share: the first model's translation of each text is the second model's source.

Each text's result is the second model's (its sentences are the pivot's), with a "pivot"
field: the language, the text in it, and the first model's confidence and withholding,
so that a bad first hop is not hidden behind a confident second one. Word alignments are
composed through the pivot's words, a whole text at a time (what whole files need to
keep their formatting); attention maps and glossaries, which belong to one model's
source, are refused.
"""

from __future__ import annotations

from typing import Any

from transformer_nmt.documents.sentences import Joined, join_sentences
from transformer_nmt.serve.service import BadOption, Search, TranslationService


def check_pivot_search(search: Search, pivot: str) -> None:
    """BadOption for what a pivoted pair cannot give."""
    for name, asked in (("attention", search.attention), ("glossary", search.glossary)):
        if asked:
            raise BadOption(name, f"{name} is not available for a pair translated through "
                            f"{pivot} by two models; ask for a pair the server has a model "
                            "of (GET /v1/models)")


async def translate_through(first: TranslationService, second: TranslationService,
                            texts: list[str], search: Search, html: bool, pivot: str,
                            tokens: tuple[str | None, ...] = (None, None)
                            ) -> list[dict[str, Any]]:
    """Each text translated by `first` into `pivot`, then by `second` with `search`
    (the first hop takes its beam and alpha, one best translation); `tokens`: each hop's
    target-language token, for a multilingual model. The caller has checked `search`
    with check_pivot_search, before loading the models."""
    first_search = Search(beam=search.beam, alpha=search.alpha,
                          alignments=search.alignments and not html,
                          already_split=search.already_split,
                          keep_unreadable=search.keep_unreadable)
    through = await first.translate_texts(texts, first_search, html, tokens[0])
    second_search = Search(beam=search.beam, alpha=search.alpha, nbest=search.nbest,
                           alignments=search.alignments and not html,
                           keep_unreadable=search.keep_unreadable)
    results = await second.translate_texts([result["text"] for result in through],
                                           second_search, html, tokens[1])
    return [_joined(first_hop, second_hop, pivot, search.alignments and not html)
            for first_hop, second_hop in zip(through, results)]


def _joined(first: dict[str, Any], second: dict[str, Any], pivot: str,
            alignments: bool) -> dict[str, Any]:
    """The second hop's result with what the first hop adds."""
    sentences = first["sentences"]
    confidences = [sentence["confidence"] for sentence in sentences]
    result = {**second, "pivot": {
        "language": pivot,
        "text": first["text"],
        "confidence": min(confidences) if confidences and None not in confidences else None,
        "withheld": any(sentence.get("withheld") for sentence in sentences),
    }}
    # What the first model could not read, the second got as the first invented it.
    warnings = [f"into {pivot}: {warning}" for warning in first.get("warnings", [])]
    if warnings:
        result["warnings"] = warnings + second.get("warnings", [])
    if alignments:
        result["alignment"] = composed(sentences_joined(first).alignment,
                                       sentences_joined(second).alignment)
    return result


def sentences_joined(result: dict[str, Any]) -> Joined:
    """A text's result as one translation whose alignment, (source word, target word),
    runs over the whole text's whitespace-separated words (None if a sentence has none)."""
    sentences = result["sentences"]
    return join_sentences([sentence["source"] for sentence in sentences],
                          [Joined(sentence["text"], [tuple(pair) for pair in
                                                     sentence["alignment"]]
                                  if "alignment" in sentence else None)
                           for sentence in sentences])


def composed(first: list[tuple[int, int]] | None, second: list[tuple[int, int]] | None
             ) -> list[list[int]] | None:
    """Source word to target word through the pivot's words: (s, t) wherever s is aligned
    to a pivot word that is aligned to t."""
    if first is None or second is None:
        return None
    onward: dict[int, list[int]] = {}
    for middle, target in second:
        onward.setdefault(middle, []).append(target)
    return [list(pair) for pair in sorted({(source, target) for source, middle in first
                                           for target in onward.get(middle, ())})]
