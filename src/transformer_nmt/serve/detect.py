"""Which language a text is in, for LibreTranslate's `source=auto` and POST /detect:
py3langid (an offline naive Bayes classifier shipped in its PyPI package) weighs every
language it knows, and the server reports the languages it can translate from.

The probabilities are not renormalized over the served languages: a server with one
source language still says how likely a text is to be in it (near 0 for text in
another language) rather than a certain 100. A text without a letter (empty, spaces,
digits, punctuation) is in no language: it counts for none, and where no text has a
letter the answer is the first served language with confidence 0, as LibreTranslate
answers what it cannot detect. bench/language_id.py compares py3langid with lingua;
docs/serving.md ("Language detection") says why py3langid.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

try:  # part of the serve extra; a server without it translates but cannot detect
    from py3langid.langid import MODEL_FILE, LanguageIdentifier
except ImportError:
    LanguageIdentifier = None

MISSING = ("language detection is not available on this server: it needs the py3langid "
           "package (pip install 'transformer-nmt[serve]')")
"""Why a server without py3langid cannot detect."""
MOST_CANDIDATES = 3
"""Languages /detect lists at most, best first, as LibreTranslate does."""


class DetectionUnavailable(Exception):
    """Language detection needs a package that is not installed (the message says which)."""


class LanguageDetector:
    """Detects which of `languages` (the codes the server can translate from, such as
    "en" or "pt-BR") texts are in; the classifier is loaded on first use."""

    def __init__(self, languages: Sequence[str]) -> None:
        self.languages = tuple(dict.fromkeys(languages))
        self._lock = threading.Lock()
        self._identifier: Any = None

    def detect(self, texts: Sequence[str],
               among: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """LibreTranslate's answer for `texts`: up to MOST_CANDIDATES served languages
        (those of `among` only, when given), best first, each {"language": code,
        "confidence": percent}, the percent being the classifier's probability of that
        language averaged over the texts that have a letter; where none has, the first
        served language alone with confidence 0.0.
        DetectionUnavailable without py3langid. Call it off the event loop: the first
        call loads the classifier (about a second)."""
        languages = self.languages if among is None else tuple(
            code for code in self.languages if code in among)
        if not languages:
            return []
        # The classifier gives a text without letters its prior, English first: a claim
        # with nothing behind it.
        worded = [text for text in texts if has_letters(text)]
        if not worded:
            return [{"language": languages[0], "confidence": 0.0}]
        identifier = self._loaded()
        totals = dict.fromkeys(languages, 0.0)
        for text in worded:
            probabilities = dict(identifier.rank(text))
            for code in languages:
                totals[code] += probabilities.get(_base_code(code), 0.0)
        ranked = sorted(languages, key=lambda code: -totals[code])
        return [{"language": code, "confidence": round(100 * totals[code] / len(worded), 1)}
                for code in ranked[:MOST_CANDIDATES]]

    def _loaded(self) -> Any:
        """py3langid's identifier with probabilities, loaded once."""
        with self._lock:
            if self._identifier is None:
                if LanguageIdentifier is None:
                    raise DetectionUnavailable(MISSING)
                self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE,
                                                                      norm_probs=True)
            return self._identifier


def has_letters(text: str) -> bool:
    """Whether `text` has a letter of any script, something a language shows in."""
    return any(character.isalpha() for character in text)


def _base_code(code: str) -> str:
    """The classifier's code for a served language: "pt" for "pt-BR", "zh" for "zh_Hant"."""
    return code.replace("_", "-").split("-")[0].lower()
