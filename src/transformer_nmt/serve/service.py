"""The server's work without the HTTP: check a request against the limits, cut its texts
into sentences (by the one splitter, data/sentences.py, whose length limit is the
model's), have the batcher translate them, and put the translations back together (with
n-best lists, alignments and attention maps when asked)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from transformer_nmt.attention_plot import compute_attention_of_ids
from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.sentences import Document, Fitting, split_sentence, split_text
from transformer_nmt.data.text import normalize
from transformer_nmt.decode.quality.unknown import UNKNOWN_SOURCE, is_unreadable
from transformer_nmt.decode.text.job import CallSettings
from transformer_nmt.decode.text.target_language import with_language_token
from transformer_nmt.documents.sentences import model_fitting
from transformer_nmt.decode.text.translator import Translation, TranslationRequest, Translator
from transformer_nmt.errors import UserError
from transformer_nmt.serve.batcher import Batcher
from transformer_nmt.serve.html_text import Markup, parse_html
from transformer_nmt.serve.settings import ServeSettings
from transformer_nmt.serve.words import with_words

MAX_GLOSSARY = 100
"""Most glossary entries a request may give: each matching one widens the search."""
CONFIDENCE_MEANING = (
    "Each sentence of the answer has a `confidence`: the estimated probability that a "
    "bilingual reader would accept it, measured by a proxy computed without people (that "
    "its sentence chrF2 against a reference reaches the threshold `nmt calibrate` fitted on "
    "validation data, by default the model's median there); null for a model without "
    "calibration; 0 for a degenerate translation (see `degenerate`) and, calibrated or "
    "not, for a sentence most of whose characters the model's vocabulary does not know "
    "(another language or script: its translation is invented; the text's `warnings` say "
    "so); `confidence_reasons` say why when it is low; below the server's "
    "min_confidence a sentence comes back empty with `withheld: true` and a `reason`.")
"""What the confidence of an answer means, for the API's documentation."""
ATTENTION_DECIMALS = 3
"""Attention weights are sent rounded: enough for a heatmap, a fifth of the bytes."""


class TooLarge(Exception):
    """A request over one of the size limits (HTTP 413); the message names the limit."""


class BadOption(Exception):
    """A decoding option out of its range (HTTP 422); `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Search:
    """The decoding options one request asked for (None: the server's default), and the
    terminology its translations must use."""

    beam: int | None = None
    alpha: float | None = None
    nbest: int | None = None
    alignments: bool = False
    attention: bool = False
    glossary: dict[str, str] | None = None
    already_split: bool = False
    """Each text is one sentence the splitter cut already (a file's paragraph, cut by the
    files API): only the length rule applies, so that no sentence is cut twice."""
    keep_unreadable: bool = False
    """A sentence the model's vocabulary cannot read comes back as it was sent, rather
    than as the sentence the model invents for it: what LibreTranslate answers for a text
    in a language it does not have."""


class TranslationService:
    """Translates the texts of requests through a shared Batcher."""

    def __init__(self, translator: Translator, batcher: Batcher, settings: ServeSettings,
                 source_language: str | None) -> None:
        self.translator = translator
        self.batcher = batcher
        self.settings = settings
        self.defaults = translator.options.decode
        # The segmenter knows sentence ends per language; an unknown one falls back to
        # English rules.
        self.segmenter_language = source_language or "en"
        if settings.min_confidence is not None and translator.confidence is None:
            raise UserError("min_confidence needs a model whose translations have a "
                            "confidence; calibrate it first with `nmt calibrate --model "
                            "MODEL.pt --data DATA_DIR`")

    def search_key(self, search: Search) -> CallSettings:
        """The batch settings for `search`; BadOption for a value out of range."""
        nbest = 1 if search.nbest is None else search.nbest
        # Asking for more alternatives than the default beam widens it.
        beam = max(self.defaults.beam, nbest) if search.beam is None else search.beam
        alpha = self.defaults.alpha if search.alpha is None else search.alpha
        if not 1 <= beam <= self.settings.max_beam:
            raise BadOption("beam", f"beam must be between 1 and {self.settings.max_beam} "
                            f"(the server's max_beam), not {beam}")
        if not 1 <= nbest <= min(beam, self.settings.max_nbest):
            raise BadOption("nbest", f"nbest must be between 1 and the beam ({beam}; at "
                            f"most {self.settings.max_nbest}), not {nbest}")
        try:
            # Everything else (length limits, sampling, n-gram blocking) as the server runs;
            # DecodeConfig refuses an alpha outside config.ALPHA_RANGE, as everywhere.
            decode = replace(self.defaults, beam=beam, alpha=alpha, nbest=nbest)
        except UserError as error:
            raise BadOption("alpha", str(error)) from None
        return CallSettings(decode, search.alignments)

    def split(self, texts: list[str], search: Search, html: bool,
              fitting: Fitting) -> tuple[list[Markup | None], list[list[Document]]]:
        """Each text's markup (with `html`) and the documents of its text nodes (the
        text itself without), cut into sentences of at most the model's tokens."""
        markups = [parse_html(text) if html else None for text in texts]
        units = [markup.texts if markup else [text] for markup, text in zip(markups, texts)]
        if search.already_split:
            documents = [[split_sentence(unit, fitting) for unit in text_units]
                         for text_units in units]
        else:
            documents = [[split_text(unit, self.segmenter_language, fitting)
                          for unit in text_units] for text_units in units]
        return markups, documents

    async def translate_texts(self, texts: list[str], search: Search,
                              html: bool = False, language_token: str | None = None
                              ) -> list[dict[str, Any]]:
        """One result per text: {'text': the translated text, 'sentences': [...]}, as
        POST /v1/translate answers; a multilingual model's `language_token` (>>fra<<) put
        before each sentence it decodes, never in the answer. TooLarge, BadOption or
        QueueFull when refused."""
        key = self.search_key(search)

        def decoded(sentence: str) -> str:
            """What the model decodes of `sentence`: with the token after splitting, so
            that each sentence of a text gets it."""
            return sentence if language_token is None else with_language_token(
                sentence, language_token)
        characters = sum(len(text) for text in texts)
        if characters > self.settings.max_characters:
            raise TooLarge(f"the request has {characters} characters, more than the "
                           f"server's max_characters ({self.settings.max_characters})")
        # Splitting encodes each sentence already; the batch budget and attention reuse
        # its ids.
        fitting = model_fitting(self.translator, language_token)
        markups, documents = self.split(texts, search, html, fitting)
        sentences = [sentence for text_documents in documents
                     for document in text_documents for sentence in document.sentences]
        if len(sentences) > self.settings.max_sentences:
            raise TooLarge(f"the request has {len(sentences)} sentences, more than the "
                           f"server's max_sentences ({self.settings.max_sentences})")
        ids = [fitting.encode(sentence) for sentence in sentences]
        tokens = [len(sentence_ids) for sentence_ids in ids]
        items, term_tokens = self._with_terminology([decoded(sentence) for sentence in sentences],
                                                    search.glossary)
        if search.attention:
            self._check_attention(tokens, term_tokens, key.decode)
        found = await self.batcher.translate(items, tokens, key)
        attention = [None] * len(sentences)
        if search.attention:  # the token is one of the source pieces the model attends to
            attention = await self.batcher.run_in_decoder(self._attention, ids, found)
        results = []
        offset = 0
        for markup, text_documents in zip(markups, documents):
            joined, described = [], []
            for document in text_documents:
                count = len(document.sentences)
                mine = range(offset, offset + count)
                kept = [search.keep_unreadable and is_unreadable(found[i][0]) for i in mine]
                withheld = [None if keep else self.withheld(found[i][0])
                            for i, keep in zip(mine, kept)]
                joined.append(document.join([
                    sentences[i] if keep else "" if hidden else found[i][0].text
                    for i, keep, hidden in zip(mine, kept, withheld)]))
                described += [_describe(sentences[i], found[i], attention[i], hidden, keep)
                              for i, keep, hidden in zip(mine, kept, withheld)]
                offset += count
            text = markup.join(joined) if markup else joined[0]
            results.append({"text": text, "sentences": described,
                            **_warnings(described, search.keep_unreadable)})
        return results

    def withheld(self, translation: Translation) -> str | None:
        """Why `translation` is not given back (its confidence is below the server's
        min_confidence), or None when it is."""
        minimum, confidence = self.settings.min_confidence, translation.confidence
        if minimum is None or confidence is None or confidence >= minimum:
            return None
        reasons = "; ".join(translation.confidence_reasons)
        return (f"confidence {confidence:.2f} is below this server's minimum {minimum:g}"
                + (f" ({reasons})" if reasons else ""))

    def _check_attention(self, tokens: list[int], term_tokens: list[int],
                         decode: DecodeConfig) -> None:
        """TooLarge when the attention maps of sentences of `tokens` source tokens, whose
        required terms have `term_tokens` target tokens, could pass the server's
        max_attention_cells: each sentence's (source pieces + EOS) × (longest output +
        EOS), known before decoding. The bound keeps the maps' computation, the answer
        and the memory they take small, whatever the decoding gives."""
        cells = sum((count + 1) * (self.translator.longest_output(count, decode, terms) + 1)
                    for count, terms in zip(tokens, term_tokens))
        limit = self.settings.max_attention_cells
        if cells > limit:
            raise TooLarge(f"attention for these {len(tokens)} sentences could take up to "
                           f"{cells} cells (source pieces × output pieces, summed), more "
                           f"than the server's max_attention_cells ({limit}); send fewer "
                           "or shorter sentences, or ask without attention")

    def _with_terminology(self, sentences: list[str], glossary: dict[str, str] | None
                          ) -> tuple[list[str | TranslationRequest], list[int]]:
        """Each sentence, as a TranslationRequest constrained to the target terms of the
        glossary's source terms it contains (whole words, any case), and the target
        tokens those terms take. BadOption for a glossary the search cannot honour: too
        many entries, a server that samples, or target terms longer than any output of
        the model (the search would cut them)."""
        if not glossary:
            return list(sentences), [0] * len(sentences)
        if len(glossary) > MAX_GLOSSARY:
            raise BadOption("glossary", f"the glossary has {len(glossary)} entries, more than "
                            f"{MAX_GLOSSARY}")
        if self.defaults.sampling:
            raise BadOption("glossary", "this server samples its translations; a glossary "
                            "needs beam search")
        longest = self.translator.max_len_limit
        terms = []  # (source term, its pattern, target term, the target's tokens)
        for source, target in glossary.items():
            source, target = source.strip(), target.strip()
            if not source or not target:
                continue
            pieces = len(self.translator.vocab.target.encode(normalize(target)))
            if pieces > longest:
                raise BadOption("glossary", f"the glossary's target term for {_quoted(source)}"
                                f" ({_quoted(target)}) has {pieces} subword pieces, more than "
                                f"the {longest} a translation by this model can have; "
                                "shorten it or leave it out")
            pattern = re.compile(rf"(?<!\w){re.escape(source)}(?!\w)", re.IGNORECASE)
            terms.append((source, pattern, target, pieces))
        items: list[str | TranslationRequest] = []
        term_tokens = []
        for sentence in sentences:
            wanted = {target: (source, pieces) for source, pattern, target, pieces in terms
                      if pattern.search(sentence)}
            needed = sum(pieces for _, pieces in wanted.values())
            if needed > longest:
                named = ", ".join(_quoted(source) for source, _ in wanted.values())
                raise BadOption("glossary", f"a sentence holds the glossary's terms {named}, "
                                f"whose target terms have {needed} subword pieces together, "
                                f"more than the {longest} a translation by this model can "
                                "have; split the sentence or shorten the terms")
            items.append(TranslationRequest(sentence, constraints=tuple(wanted)) if wanted
                         else sentence)
            term_tokens.append(needed)
        return items, term_tokens

    def _attention(self, source_ids: list[list[int]],
                   found: list[list[Translation]]) -> list[dict[str, Any]]:
        """The encoder-decoder attention of each best translation (of the sentence of
        `source_ids`, as the splitter encoded it), per layer and head, between pieces and
        between words."""
        vocab = self.translator.vocab
        maps = []
        for src_ids, translations in zip(source_ids, found):
            attention = compute_attention_of_ids(self.translator.model, vocab, src_ids,
                                                 translations[0].tokens)
            maps.append(with_words({
                "source_tokens": attention.src_tokens,
                "target_tokens": attention.tgt_out_tokens,
                # per layer (heads, target tokens, source tokens); float64 so that the
                # rounded values print as short decimals
                "layers": [layer.double().round(decimals=ATTENTION_DECIMALS).tolist()
                           for layer in attention.weights["cross"]],
            }, attention.weights["cross"], ATTENTION_DECIMALS))
        return maps


def _quoted(text: str, most: int = 40) -> str:
    """`text` quoted for a one-line error, shortened to `most` characters."""
    return repr(text if len(text) <= most else text[:most - 1] + "…")


def _warnings(described: list[dict[str, Any]], kept: bool) -> dict[str, list[str]]:
    """{"warnings": [...]}, one line per sentence of a text (`described`) whose source the
    model could not read (`kept`: given back as it was sent); {} when there is none, so
    that a sound answer keeps its shape."""
    outcome = ("it is given back untranslated" if kept
               else "its translation is invented, not translated")
    found = [f"sentence {number}: {UNKNOWN_SOURCE}; {outcome}"
             for number, sentence in enumerate(described, 1)
             if UNKNOWN_SOURCE in sentence["confidence_reasons"]]
    return {"warnings": found} if found else {}


def _describe(source: str, translations: list[Translation], attention: dict[str, Any] | None,
              withheld: str | None = None, kept: bool = False) -> dict[str, Any]:
    """One sentence of an answer; a withheld one has no text, alternatives or maps, only
    why; a `kept` one (its source unreadable) is its source, without alternatives or
    attention, each word aligned to itself."""
    best = translations[0]
    described: dict[str, Any] = {
        "source": source,
        "text": best.text,
        "score": round(best.score, 4),
        "confidence": best.confidence,
        "confidence_reasons": best.confidence_reasons,
        "degenerate": best.degenerate,
        "fallback": best.fallback,
        "nbest": [{"text": t.text, "score": round(t.score, 4), "confidence": t.confidence}
                  for t in translations],
    }
    if withheld is not None:
        described.update(text="", nbest=[], withheld=True, reason=withheld)
        return described
    if kept:
        described.update(text=source, nbest=[])
        if best.alignment is not None:  # each word is itself
            described["alignment"] = [[word, word] for word in range(len(source.split()))]
        return described
    if best.alignment is not None:
        described["alignment"] = [list(pair) for pair in best.alignment]
    if attention is not None:
        described["attention"] = attention
    return described

