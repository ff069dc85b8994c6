"""A multilingual model's target language chosen by name (decode/text/target_language.py):
which token a name picks, the token before each line. That alignments leave the token
out is the word rule's (tests/test_data_words.py, tests/test_decode_text_alignment.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from transformer_nmt.decode.text.job import TranslationRequest
from transformer_nmt.decode.text.target_language import language_token, with_language_token
from transformer_nmt.errors import UserError

MULTILINGUAL = SimpleNamespace(language_tokens={">>fra<<": 60, ">>spa<<": 61,
                                                ">>zho_Hans<<": 62})
"""The part of a Vocab that language_token reads."""


@pytest.mark.parametrize("name", ["fra", "FRA", ">>fra<<", " fra "])
def test_a_tokens_own_code_or_the_token_picks_it(name):
    assert language_token(MULTILINGUAL, name) == ">>fra<<"


def test_a_two_letter_code_picks_its_token():
    pytest.importorskip("pycountry", reason="the serve extra is not installed")
    assert language_token(MULTILINGUAL, "fr") == ">>fra<<"
    assert language_token(MULTILINGUAL, "zho_hans") == ">>zho_Hans<<"


def test_a_language_without_a_token_or_a_model_without_any_is_refused_in_one_line():
    with pytest.raises(UserError, match="target language de: the model has no token for "
                       "it; it translates into ") as raised:
        language_token(MULTILINGUAL, "de")
    assert "spa" in str(raised.value) and "zho_Hans" in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(UserError, match="target language fr: the model is not multilingual"):
        language_token(SimpleNamespace(language_tokens={}), "fr")


def test_the_token_goes_before_each_line_and_blank_lines_stay_blank():
    assert with_language_token("the house", ">>fra<<") == ">>fra<< the house"
    assert with_language_token("  ", ">>fra<<") == "  "
    request = TranslationRequest("the house", prefix="la", constraints=("maison",))
    assert with_language_token(request, ">>fra<<") == TranslationRequest(
        ">>fra<< the house", prefix="la", constraints=("maison",))

