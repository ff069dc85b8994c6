"""A multilingual model's target-language tokens under the codes clients use
(data/language_codes.py): ISO 639-1 where the language has one, else the token's own."""

from __future__ import annotations

import pytest

from transformer_nmt.data.language_codes import (client_code, language_name, target_languages,
                                                 token_code)

pytest.importorskip("pycountry", reason="the serve extra is not installed")


def test_three_letter_codes_become_two_letter_ones_and_others_keep_their_own():
    assert client_code("fra") == "fr" and client_code("fr") == "fr"
    assert client_code("zho_Hans") == "zho_Hans"  # a script: not an ISO 639 code
    assert client_code("mul") == "mul"  # a code without a two-letter one
    assert client_code("qqq") == "qqq"  # no such language


def test_each_token_is_offered_once_under_one_code():
    tokens = [">>fra<<", ">>spa<<", ">>zho_Hans<<", ">>fr<<"]
    # >>fr<< is spelled as clients spell French; >>fra<< keeps its own code beside it.
    assert target_languages(tokens) == {"es": ">>spa<<", "fr": ">>fr<<", "fra": ">>fra<<",
                                        "zho_Hans": ">>zho_Hans<<"}
    assert target_languages([]) == {}


def test_token_codes_and_names():
    assert token_code(">>zho_Hans<<") == "zho_Hans"
    with pytest.raises(ValueError, match="not a target-language token"):
        token_code("fra")
    assert language_name("fr") == "French" and language_name("spa") == "Spanish"
    assert language_name("zho_Hans") is None
