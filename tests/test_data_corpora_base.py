"""What every corpus recipe shares (data/corpora/base.py): the options' defaults, a
recipe's splits, notes and drops before it reads anything, and the language check, which
names the corpus and the languages it has."""

from __future__ import annotations

import pytest

from transformer_nmt.data.corpora.base import Corpus, SourceOptions, check_languages
from transformer_nmt.errors import UserError


def test_the_options_default_to_the_recipes_home_strict_utf8_and_seed_1():
    options = SourceOptions()
    assert (options.mirror, options.cache_dir, options.errors, options.seed,
            options.files, options.valid_size) == (None, None, "strict", 1, {}, None)
    assert SourceOptions().files is not SourceOptions().files  # each its own dict


def test_a_recipe_starts_with_three_splits_nothing_dropped_and_no_notes():
    corpus = Corpus("en", "de", SourceOptions(seed=3))
    assert (corpus.src, corpus.tgt, corpus.options.seed) == ("en", "de", 3)
    assert (corpus.splits, corpus.dropped, corpus.notes) == (("train", "valid", "test"),
                                                             {}, [])
    assert corpus.identity() == {}
    with pytest.raises(NotImplementedError):
        corpus.pairs("train")


def test_a_language_the_corpus_lacks_is_one_line_naming_those_it_has():
    check_languages("bible", "en", "de", ["de", "en", "fr"])
    for src, tgt in (("xx", "de"), ("en", "xx")):
        with pytest.raises(UserError, match=r"^corpus bible has no language 'xx'; it has "
                                            r"de, en, fr$"):
            check_languages("bible", src, tgt, ["de", "en", "fr"])
