"""The corpus registry: get_corpus finds recipes by name and refuses options that the
chosen recipe would ignore. Each recipe has its own test module, test_data_corpora_*."""

import pytest

from transformer_nmt.data.corpora import SourceOptions, get_corpus
from transformer_nmt.errors import UserError


def test_unknown_corpus_lists_the_known_ones():
    with pytest.raises(UserError, match="unknown corpus 'europarl'; known corpora: bible, "
                                        "multi30k, wmt14-en-de, files"):
        get_corpus("europarl", "en", "de")


def test_options_of_other_recipes_are_refused():
    with pytest.raises(UserError, match=r"files\['train_src'\], files\['train_tgt'\]: only for "
                                        r"the files corpus, not multi30k"):
        get_corpus("multi30k", "en", "de", SourceOptions(files={"train_src": "a",
                                                                "train_tgt": "b"}))
    with pytest.raises(UserError, match="mirror '/somewhere': only for the multi30k and "
                                        "wmt14-en-de corpora, not bible"):
        get_corpus("bible", "en", "de", SourceOptions(mirror="/somewhere"))
