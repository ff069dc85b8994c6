"""What `nmt prepare` makes and from what: its options, declared once for the library and
the command line (which derives its flags from these fields without importing the
data pipeline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_nmt.config import Utf8Errors
from transformer_nmt.errors import UserError
from transformer_nmt.fields import check_types, setting

if TYPE_CHECKING:
    from transformer_nmt.data.vocab_source import VocabSource

DEFAULT_SAMPLE_SENTENCES = 2_000_000
"""Sentences (both sides together) sampled to learn the BPE merges: enough for a stable
vocabulary, few enough that sentencepiece stays near 1 GB of memory on any corpus."""


@dataclass(frozen=True)
class PrepareOptions:
    """What `prepare` makes and from what; every field but `out` and `threads` is part
    of the recipe that a finished directory must match. The group mark files a field
    under the command line's 'files corpus' options."""

    corpus: str
    """Corpus recipe: bible, multi30k, wmt14-en-de or files."""
    src: str
    """Source language code, e.g. en (also the file suffix: train.en)."""
    tgt: str
    """Target language code, e.g. de."""
    out: Path = setting(metavar="DATA_DIR")
    """The data directory to create (or to find already prepared)."""
    vocab_size: int = 8000
    """Pieces of the shared BPE vocabulary, the 4 specials included (the paper's WMT14
    en-de: 37000; not used with vocab, whose vocabulary has its own size)."""
    max_len: int = setting(250, metavar="TOKENS")
    """Drop training pairs with more subword tokens than this on a side; valid and test
    are never filtered (0: no limit)."""
    max_ratio: float = setting(2.5, metavar="R")
    """Drop training pairs whose longer side has more than this many times the tokens of
    the shorter (fairseq's WMT14 recipe uses 1.5 for noisy web crawl; 0: no limit)."""
    character_coverage: float | None = setting(None, metavar="C")
    """sentencepiece's character coverage (by default one that follows the vocabulary
    size: every character in a small vocabulary, slightly less in a large one, where rare
    characters become <unk>)."""
    sample_sentences: int = setting(DEFAULT_SAMPLE_SENTENCES, flag="--spm-sample",
                                    metavar="SENTENCES")
    """Training sentences (both sides) sampled to learn the BPE; bounds memory on big
    corpora."""
    seed: int = 1
    """Seed of the BPE sample, of a held-out valid slice and of the batch estimate."""
    errors: Utf8Errors = "strict"
    """Invalid UTF-8 in the input: 'strict' stops with an error naming the file and line,
    'replace' replaces bad bytes with U+FFFD."""
    mirror: str | None = setting(None, metavar="DIR_OR_URL")
    """multi30k, wmt14-en-de: read the corpus from this local directory or URL instead
    of its home (also NMT_MULTI30K_MIRROR, NMT_WMT14_MIRROR)."""
    files: dict[str, str] = field(default_factory=dict)
    """Inputs of the files recipe: keys {train,valid,test}_{src,tgt,tsv}."""
    valid_size: int | None = setting(None, group="files", metavar="PAIRS")
    """Pairs of train held out as valid when no valid files are given (by default 5% of
    train, at most 1000)."""
    threads: int | None = None
    """sentencepiece threads (by default every available core)."""
    vocab: VocabSource | None = None
    """An existing vocabulary to encode with instead of learning one (fine-tuning data
    for a trained model); vocab_size, character_coverage and sample_sentences then do
    not apply."""

    def __post_init__(self) -> None:
        check_types(self)
        if self.sample_sentences < 1:
            raise UserError(f"sample_sentences must be positive, not {self.sample_sentences}")
