"""A multilingual model's target language chosen by name (fr, fra or >>fra<<): its token
put before each source. The token is no word (transformer_nmt.data.words), so each
translation's alignment counts the source's own words, as if the client had never seen
it."""

from __future__ import annotations

import dataclasses

from transformer_nmt.data.language_codes import target_languages, token_code
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.decode.text.job import TranslationRequest
from transformer_nmt.errors import UserError


def language_token(vocab: Vocab, language: str) -> str:
    """The token of `language` in `vocab`: a client code ('fr'), a token's own code
    ('fra', 'zho_Hans') or the token itself ('>>fra<<'), case aside. A one-line UserError
    naming `language` when the model is not multilingual or has no token for it."""
    if not vocab.language_tokens:
        raise UserError(f"target language {language}: the model is not multilingual (its "
                        "vocabulary has no target-language tokens such as >>fra<<); it "
                        "translates into one language only")
    offered = target_languages(vocab.language_tokens)
    wanted = language.strip().casefold()
    for code, token in offered.items():
        if wanted in (code.casefold(), token_code(token).casefold(), token.casefold()):
            return token
    listed = ", ".join(f"{code} ({token})" if code != token_code(token) else code
                       for code, token in offered.items())
    raise UserError(f"target language {language}: the model has no token for it; it "
                    f"translates into {listed}")


def with_language_token(line: str | TranslationRequest, token: str
                        ) -> str | TranslationRequest:
    """`line` (or its request's text) with `token` before it; a blank line stays as it
    is, so that it still gives an empty translation."""
    text = line.text if isinstance(line, TranslationRequest) else line
    if not text.strip():
        return line
    if isinstance(line, TranslationRequest):
        return dataclasses.replace(line, text=f"{token} {text}")
    return f"{token} {text}"

