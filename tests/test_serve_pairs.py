"""Which model translates a pair (serve/pairs.py): direct routes, routes through a pivot
(English first), multilingual models' targets and tokens, and the refusals that say what
the server has. Pure bookkeeping: no model files are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_nmt.serve.pairs import ModelEntry, NoRoute, PairRoutes


def entry(source: str | None, target: str | None, *tokens: tuple[str, str]) -> ModelEntry:
    name = f"{source}-{target}" if source and target else "model"
    return ModelEntry(Path(f"/models/{name}.pt"), name, source, target, tuple(tokens))


DE_EN, EN_FR, DE_FR_VIA_ES = entry("de", "en"), entry("en", "fr"), entry("de", "es")
ES_FR = entry("es", "fr")
EN_MUL = entry("en", "mul", ("es", ">>spa<<"), ("it", ">>ita<<"))


def test_a_pair_with_its_own_model_goes_direct():
    route = PairRoutes([DE_EN, EN_FR]).route("de", "en")
    assert route.hops == (DE_EN,) and route.pivot is None and route.tokens == (None,)


def test_a_pair_without_one_goes_through_english_before_any_other_pivot():
    routes = PairRoutes([DE_FR_VIA_ES, ES_FR, DE_EN, EN_FR])
    route = routes.route("de", "fr")
    assert route.hops == (DE_EN, EN_FR) and route.pivot == "en" and route.targets == ("en", "fr")
    # Without English, the other pivot.
    assert PairRoutes([DE_FR_VIA_ES, ES_FR, DE_EN]).route("de", "fr").pivot == "es"


def test_a_multilingual_model_translates_into_each_of_its_tokens_languages():
    routes = PairRoutes([DE_EN, EN_MUL])
    route = routes.route("en", "it")
    assert route.hops == (EN_MUL,) and route.tokens == (">>ita<<",)
    pivoted = routes.route("de", "es")
    assert pivoted.hops == (DE_EN, EN_MUL) and pivoted.tokens == (None, ">>spa<<")
    assert routes.targets("de") == ["en", "es", "it"]
    assert routes.languages() == ["de", "en", "es", "it"]
    assert routes.described() == "de-en, en-mul (to es, it)"
    with pytest.raises(NoRoute):
        routes.route("en", "mul")  # the group's name is no language to translate into


def test_a_single_model_without_languages_takes_any_pair():
    model = entry(None, None)
    route = PairRoutes([model]).route("xx", "yy")
    assert route.hops == (model,) and route.targets == ("yy",) and route.tokens == (None,)


def test_no_route_says_what_the_server_has():
    routes = PairRoutes([DE_EN, EN_FR])
    with pytest.raises(NoRoute, match="both en"):
        routes.route("en", "en")
    with pytest.raises(NoRoute) as missing:
        routes.route("fr", "de")
    assert "de-en, en-fr" in str(missing.value)
    assert routes.targets("fr") == [] and routes.sources() == ["de", "en"]
