"""A pair translated through a pivot language (serve/pivot.py): the first model's output is
the second's source, the result says what the first hop gave and how sure it was,
alignments compose through the pivot's words, and what belongs to one model is refused."""

from __future__ import annotations

import asyncio

import pytest

from transformer_nmt.serve.pivot import (check_pivot_search, composed, sentences_joined,
                                         translate_through)
from transformer_nmt.serve.service import BadOption, Search


class Hop:
    """A TranslationService stand-in: each text's result from `answer`, the calls kept."""

    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, []

    async def translate_texts(self, texts, search, html, token):
        self.calls.append((list(texts), search, html, token))
        return [self.answer(text) for text in texts]


def sentence(source: str, text: str, confidence=None, **more) -> dict:
    return {"source": source, "text": text, "confidence": confidence,
            "alignment": [[i, i] for i in range(len(text.split()))], **more}


def test_the_second_hop_translates_the_first_hops_text_and_says_what_it_was():
    first = Hop(lambda text: {"text": text.upper(), "warnings": ["unreadable piece"],
                              "sentences": [sentence(text, text.upper(), 0.9),
                                            sentence("", "", 0.4, withheld=True)]})
    second = Hop(lambda text: {"text": f"<{text}>", "warnings": ["second"],
                               "sentences": [sentence(text, f"<{text}>")]})
    search = Search(beam=3, alpha=0.2, nbest=2, alignments=True)
    [result] = asyncio.run(translate_through(first, second, ["a b"], search, False, "en",
                                             (None, ">>fra<<")))
    [(_, first_search, _, first_token)] = first.calls
    [(texts, second_search, _, second_token)] = second.calls
    assert (first_search.beam, first_search.alpha, first_search.nbest) == (3, 0.2, None)
    assert (texts, second_search.nbest, first_token, second_token) == (
        ["A B"], 2, None, ">>fra<<")
    assert result["text"] == "<A B>"
    assert result["pivot"] == {"language": "en", "text": "A B", "confidence": 0.4,
                               "withheld": True}
    assert result["warnings"] == ["into en: unreadable piece", "second"]
    assert result["alignment"] == [[0, 0], [1, 1]]


def test_html_takes_no_alignments_and_an_unknown_confidence_stays_unknown():
    hop = Hop(lambda text: {"text": text, "sentences": [sentence(text, text, None)]})
    [result] = asyncio.run(translate_through(hop, hop, ["<b>x</b>"], Search(alignments=True),
                                             True, "en"))
    assert result["pivot"]["confidence"] is None and "alignment" not in result
    assert not any(search.alignments for _, search, _, _ in hop.calls)


@pytest.mark.parametrize("search, name", [(Search(attention=True), "attention"),
                                          (Search(glossary={"a": "b"}), "glossary")])
def test_what_belongs_to_one_models_source_is_refused(search, name):
    with pytest.raises(BadOption, match=f"{name} is not available for a pair translated "
                                        "through en by two models") as refused:
        check_pivot_search(search, "en")
    assert refused.value.field == name
    check_pivot_search(Search(alignments=True), "en")


def test_a_texts_sentences_join_with_their_alignments_over_the_whole_text():
    joined = sentences_joined({"sentences": [sentence("a b", "x y"), sentence("c", "z")]})
    assert joined.text == "x y z" and joined.alignment == [(0, 0), (1, 1), (2, 2)]


def test_alignments_are_composed_through_the_pivots_words():
    assert composed([(0, 0), (1, 2), (2, 1)], [(0, 1), (2, 0), (1, 3), (1, 2)]) == [
        [0, 1], [1, 0], [2, 2], [2, 3]]
    assert composed(None, [(0, 0)]) is None and composed([(0, 0)], None) is None
