"""What `nmt prepare` makes and from what (data/prepare_options.py): the recipe's defaults,
values of the wrong type or range refused naming the field, and the marks the command
line reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_nmt.data.prepare_options import DEFAULT_SAMPLE_SENTENCES, PrepareOptions
from transformer_nmt.errors import UserError
from transformer_nmt.fields import marked


def test_the_defaults_are_a_learned_8000_piece_vocabulary_and_the_length_filters():
    options = PrepareOptions("files", "en", "de", Path("data"))
    assert (options.vocab_size, options.max_len, options.max_ratio) == (8000, 250, 2.5)
    assert options.sample_sentences == DEFAULT_SAMPLE_SENTENCES
    assert (options.vocab, options.files, options.errors) == (None, {}, "strict")


@pytest.mark.parametrize("changes, says", [
    ({"sample_sentences": 0}, "sample_sentences must be positive, not 0"),
    ({"vocab_size": 8000.0}, "vocab_size must be a whole number"),
    ({"errors": "ignore"}, "errors must be one of 'strict', 'replace', not 'ignore'"),
    ({"out": 3}, "out must be a path"),
])
def test_bad_values_are_refused_naming_the_field(changes, says):
    with pytest.raises(UserError, match="^" + says):
        PrepareOptions(**{"corpus": "files", "src": "en", "tgt": "de", "out": Path("d"),
                          **changes})


def test_only_the_files_recipes_own_options_are_in_its_group():
    assert marked(PrepareOptions, "group", "files") == {"valid_size"}
    flags = {f.name: f.metadata.get("flag") for f in PrepareOptions.__dataclass_fields__.values()}
    assert flags["sample_sentences"] == "--spm-sample"
