"""The JSON bodies POST /v1/translate accepts: strict types and no unknown fields, so a
caller's typo is an error naming the field rather than a silently ignored option."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TranslateRequest(BaseModel):
    """POST /v1/translate: one text or a list, and the decoding options a caller may set."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | list[str] = Field(description="a text or a list of texts; each may hold "
                                  "several sentences, lines and paragraphs")
    beam: int | None = Field(None, description="beam size, 1 for greedy search (default: "
                             "the server's)")
    alpha: float | None = Field(None, description="length penalty exponent (default: the "
                                "server's)")
    nbest: int | None = Field(None, description="alternatives per sentence, at most the beam "
                              "(default 1)")
    alignments: bool = Field(False, description="also return (source word, target word) "
                             "pairs of each sentence")
    attention: bool = Field(False, description="also return the encoder-decoder attention "
                            "of each sentence, per layer and head, between subword pieces "
                            "and between words, with the pieces of each word")
    glossary: dict[str, str] | None = Field(None, description="terminology: source term -> "
                                            "target term; the translation of a sentence "
                                            "that contains a source term (whole words, any "
                                            "case) contains its target term (lexically "
                                            "constrained beam search)")
