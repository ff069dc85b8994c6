"""Paragraphs translated sentence by sentence: a paragraph is cut into sentences by the
one splitter (data/sentences.py, as the server cuts texts and files), each is
translated, and the translations and their word alignments are joined back into one
translation of the paragraph. The splitter's length limit is read off the model here,
for every caller."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from tqdm import tqdm

from transformer_nmt.data.sentences import Fitting, split_paragraph
from transformer_nmt.data.text import model_input
from transformer_nmt.data.words import text_words
from transformer_nmt.decode.text.target_language import with_language_token
from transformer_nmt.documents.runs import Result, Translate

if TYPE_CHECKING:
    from transformer_nmt.decode.text.translator import Translator


@dataclass(frozen=True)
class Joined:
    """A paragraph's translation, made of its sentences' translations."""

    text: str
    alignment: list[tuple[int, int]] | None
    """(source word, target word) over the paragraph's words (transformer_nmt.data.words
    text_words: whitespace-separated, as the alignments' pieces count them); None when a
    sentence came without one."""


def model_fitting(translator: Translator, language_token: str | None = None) -> Fitting:
    """The splitter's length rule for `translator`'s model: a sentence's ids as the
    Translator encodes it (`model_input`, after a multilingual model's `language_token`),
    cached so that they are computed once, and the most it takes (`Translator.src_limit`,
    the one limit of the rule)."""

    @functools.cache
    def encode(sentence: str) -> list[int]:
        text = sentence if language_token is None else with_language_token(
            sentence, language_token)
        return translator.encode_batch([model_input(text)])[0]
    return Fitting(encode, translator.src_limit)


def join_sentences(sources: Sequence[str], results: Sequence[Result]) -> Joined:
    """The translations of one paragraph's sentences (`sources`) as one translation,
    sentences separated by a space, alignments shifted to the paragraph's words."""
    texts, alignment = [], []
    source_offset = target_offset = 0
    complete = True
    for source, result in zip(sources, results):
        text = (result if isinstance(result, str) else result.text).strip()
        pairs = None if isinstance(result, str) else result.alignment
        complete = complete and pairs is not None
        alignment += [(s + source_offset, t + target_offset) for s, t in pairs or []]
        source_offset += len(text_words(source))
        target_offset += len(text_words(text))
        if text:
            texts.append(text)
    return Joined(" ".join(texts), alignment if complete else None)


def translator_translate(translator: Translator, language_token: str | None = None
                         ) -> Translate:
    """A Translate that cuts paragraphs into sentences of the model's source language
    (English rules when the model does not say), each within the model's limit, and
    translates them with `translator` in one call (its own batching), with word
    alignments; a multilingual model's `language_token` (>>fra<<) before each sentence
    where one is given."""
    language = translator.languages[0] if translator.languages else "en"
    fitting = model_fitting(translator, language_token)

    def translate(paragraphs: list[str]) -> list[Joined]:
        split = [split_paragraph(paragraph, language, fitting).sentences
                 for paragraph in paragraphs]
        flat = [sentence for sentences in split for sentence in sentences]
        if language_token is not None:  # no word: the alignments count the sentence's own
            flat_in = [with_language_token(sentence, language_token) for sentence in flat]
        else:
            flat_in = flat
        results = translator.translate_nbest(flat_in, alignments=True)
        found = list(tqdm(results, total=len(flat),
                          unit="sentence", leave=False, disable=None)) if flat else []
        joined, offset = [], 0
        for sentences in split:
            mine = found[offset: offset + len(sentences)]
            joined.append(join_sentences(sentences, [best[0] for best in mine]))
            offset += len(sentences)
        return joined
    return translate
