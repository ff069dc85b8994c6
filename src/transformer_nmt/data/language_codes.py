"""The languages of a multilingual model's target-language tokens (>>fra<<, >>zho_Hans<<)
under the codes clients use: ISO 639-1 where the language has one (fr, as LibreTranslate
names it), else the token's own code; read from pycountry's ISO 639-3 table (the `serve`
extra). Without pycountry, or for a code it does not know, a token keeps its own code."""

from __future__ import annotations

import functools
from typing import Iterable

from transformer_nmt.data.vocab import LANGUAGE_TOKEN


def token_code(token: str) -> str:
    """The code inside a language token: 'fra' for >>fra<<."""
    if not LANGUAGE_TOKEN.fullmatch(token):
        raise ValueError(f"{token!r} is not a target-language token such as >>fra<<")
    return token[2:-2]


@functools.lru_cache(maxsize=None)
def _iso_language(code: str):
    """pycountry's record of an ISO 639-1 or 639-3 code, or None (unknown, or no
    pycountry)."""
    try:
        import pycountry
    except ImportError:
        return None
    key = {2: "alpha_2", 3: "alpha_3"}.get(len(code))
    if key is None or not code.isalpha():
        return None  # zho_Hans and other codes with a script or region
    try:
        return pycountry.languages.get(**{key: code.lower()})
    except (KeyError, LookupError):  # older pycountry raises where newer returns None
        return None


def client_code(code: str) -> str:
    """The code a client asks for a token's language by: its ISO 639-1 code where it has
    one ('fra' → 'fr'), else `code` itself ('zho_Hans', 'mul')."""
    language = _iso_language(code)
    return getattr(language, "alpha_2", None) or code


def language_name(code: str) -> str | None:
    """The English name of an ISO 639-1 or 639-3 code ('fr' → 'French'), or None."""
    language = _iso_language(code)
    return getattr(language, "name", None)


def target_languages(tokens: Iterable[str]) -> dict[str, str]:
    """Each language a multilingual model translates into, by its client code, and its
    token: {'fr': '>>fra<<', 'zho_Hans': '>>zho_Hans<<'}, sorted by code. Where two tokens
    stand for one language (>>fr<< and >>fra<<), the one spelled as clients spell it
    keeps the client code and the other is offered under its own code."""
    found: dict[str, str] = {}
    for token in sorted(tokens, key=lambda token: (token_code(token) != client_code(
            token_code(token)), token)):
        code = client_code(token_code(token))
        found[code if code not in found else token_code(token)] = token
    return dict(sorted(found.items()))
