"""One server for every pair (serve/pairs.py, models.py; pivot.py's hops in the app): the
models of --model and --models, routing by source and target, pivoting through a shared
language, models loaded on demand and the least recently used unloaded beyond
--max-models-loaded, and what /v1/models, /languages and /frontend/settings say of them."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from serve_fixtures import make_app, running_server, with_languages
from transformer_nmt.errors import UserError
from transformer_nmt.serve.models import model_paths, scan_models
from transformer_nmt.serve.pairs import ModelEntry, NoRoute, PairRoutes

GERMAN = "Ein Mann in einem blauen Hemd fährt mit seinem Fahrrad die Straße hinunter."


def entry(source: str | None, target: str | None) -> ModelEntry:
    name = f"{source}-{target}.pt"
    return ModelEntry(Path(name), name, source, target)


def test_a_pair_goes_to_its_model_or_through_english_first_then_other_pivots():
    routes = PairRoutes([entry("de", "en"), entry("en", "fr"), entry("de", "es"),
                         entry("es", "fr"), entry("es", "it")])
    assert [hop.pair for hop in routes.route("de", "en").hops] == ["de-en"]
    through = routes.route("de", "fr")
    assert [hop.pair for hop in through.hops] == ["de-en", "en-fr"] and through.pivot == "en"
    assert routes.route("de", "it").pivot == "es"
    assert routes.route("de", "en").pivot is None
    assert routes.targets("de") == ["en", "es", "fr", "it"]
    assert routes.sources() == ["de", "en", "es"]
    assert routes.languages() == ["de", "en", "es", "fr", "it"]


def test_a_pair_without_a_route_is_refused_saying_what_the_server_has():
    routes = PairRoutes([entry("de", "en"), entry("en", "fr")])
    with pytest.raises(NoRoute, match="fr is not supported as source language: this server "
                       "translates de-en, en-fr"):
        routes.route("fr", "de")
    with pytest.raises(NoRoute, match="de is not supported as target language from en"):
        routes.route("en", "de")
    with pytest.raises(NoRoute, match="both en"):
        routes.route("en", "en")


def test_a_lone_model_without_recorded_languages_takes_any_pair():
    routes = PairRoutes([entry(None, None)])
    assert routes.route("xx", "yy").hops == (routes.only,)
    assert routes.sources() == [] and routes.languages() == []


@pytest.fixture(scope="module")
def models(served_model, tmp_path_factory) -> Path:
    """A directory of three models: de→en, en→fr and en→de (one network, three pairs)."""
    directory = tmp_path_factory.mktemp("models")
    for source, target in (("de", "en"), ("en", "fr"), ("en", "de")):
        made = with_languages(served_model, tmp_path_factory.mktemp("one"), source, target)
        shutil.move(made, directory / f"{source}-{target}.pt")
    (directory / "notes.txt").write_text("not a model")
    return directory


def test_a_models_directory_gives_its_model_files_in_name_order(models, tmp_path):
    assert [path.name for path in model_paths([], [models])] == ["de-en.pt", "en-de.pt",
                                                                 "en-fr.pt"]
    with pytest.raises(UserError, match="no such directory"):
        model_paths([], [tmp_path / "missing"])
    with pytest.raises(UserError, match="no model files"):
        model_paths([], [tmp_path])
    with pytest.raises(UserError, match="given twice"):
        model_paths([models / "de-en.pt"], [models])
    with pytest.raises(UserError, match="no model to serve"):
        model_paths([], [])


def test_two_models_of_one_pair_or_one_without_languages_among_several_are_refused(
        models, model_file, tmp_path):
    shutil.copy(models / "de-en.pt", tmp_path / "other.pt")
    with pytest.raises(UserError, match="both translate de-en; serve one of them"):
        scan_models([models / "de-en.pt", tmp_path / "other.pt"])
    with pytest.raises(UserError, match="records no language pair"):
        scan_models([models / "de-en.pt", model_file])
    (tmp_path / "broken.pt").write_bytes(b"not a model")
    with pytest.raises(UserError, match="broken.pt"):
        scan_models([models / "de-en.pt", tmp_path / "broken.pt"])


@pytest.fixture(scope="module")
def client(models):
    with TestClient(make_app(model_paths([], [models]), max_characters=2000)) as client:
        yield client


def lt_translate(client, q, source, target, **fields):
    return client.post("/translate", json={"q": q, "source": source, "target": target,
                                           **fields})


def test_v1_models_lists_every_model_and_every_pair_with_its_pivot(client):
    described = client.get("/v1/models").json()
    assert [model["name"] for model in described["models"]] == ["de-en.pt", "en-de.pt",
                                                                 "en-fr.pt"]
    assert all(model["loaded"] and model["precision"] == "fp32"
               for model in described["models"])
    assert {(pair["source"], pair["target"]): pair["pivot"] for pair in described["pairs"]} \
        == {("de", "en"): None, ("de", "fr"): "en", ("en", "de"): None, ("en", "fr"): None}
    assert described["defaults"]["beam"] == 2 and described["limits"]["max_characters"] == 2000
    one = client.get("/v1/model")
    assert one.status_code == 404 and "GET /v1/models" in one.json()["error"]


def test_languages_lists_each_language_with_every_target_it_reaches(client):
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": []}]


def test_libretranslate_routes_by_pair_and_pivots_where_no_model_has_it(client):
    direct = lt_translate(client, "the dog runs", "en", "fr")
    assert direct.status_code == 200 and "pivot" not in direct.json()
    through = lt_translate(client, GERMAN, "de", "fr")
    assert through.status_code == 200 and through.json()["pivot"] == "en"
    english = lt_translate(client, GERMAN, "de", "en").json()["translatedText"]
    assert through.json()["translatedText"] == lt_translate(
        client, english, "en", "fr").json()["translatedText"]
    refused = lt_translate(client, "the dog runs", "fr", "de")
    assert refused.status_code == 400
    assert refused.json()["error"] == ("fr is not supported as source language: this server "
                                       "translates de-en, en-de, en-fr")


def test_source_auto_detects_among_the_languages_that_reach_the_target(client):
    answer = lt_translate(client, GERMAN, "auto", "fr").json()
    assert answer["detectedLanguage"]["language"] == "de" and answer["pivot"] == "en"
    assert lt_translate(client, GERMAN, "auto", "it").status_code == 400


def test_v1_translate_chooses_by_source_and_target_and_says_which_models(client):
    answer = client.post("/v1/translate", json={"text": GERMAN, "source": "de",
                                                "target": "fr", "alignments": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["models"] == ["de-en.pt", "en-fr.pt"] and body["pivot"] == "en"
    [result] = body["translations"]
    assert result["pivot"]["language"] == "en" and result["pivot"]["text"]
    pivot_words = " ".join(sentence["source"] for sentence in result["sentences"]).split()
    assert pivot_words == result["pivot"]["text"].split()  # the sentences are the pivot's
    source_words, target_words = len(GERMAN.split()), len(result["text"].split())
    assert all(0 <= s < source_words and 0 <= t < target_words
               for s, t in result["alignment"])
    missing = client.post("/v1/translate", json={"text": GERMAN})
    assert missing.status_code == 422 and "give source and target" in missing.json()["error"]
    attention = client.post("/v1/translate", json={"text": GERMAN, "source": "de",
                                                   "target": "fr", "attention": True})
    assert attention.status_code == 422 and "through en" in attention.json()["error"]


def test_a_text_the_first_model_cannot_read_is_warned_of_or_sent_back_through_a_pivot(
        client):
    japanese = "日本語の文章です。"
    [result] = client.post("/v1/translate", json={"text": japanese, "source": "de",
                                                  "target": "fr"}).json()["translations"]
    assert result["warnings"][0].startswith("into en: sentence 1: most of the source is "
                                            "unknown to the model's vocabulary")
    assert lt_translate(client, japanese, "de", "fr").json()["translatedText"] == japanese


def test_a_file_is_translated_through_a_pivot(client):
    answer = client.post("/translate_file", files={"file": ("note.txt", GERMAN.encode())},
                         data={"source": "de", "target": "fr"})
    assert answer.status_code == 200, answer.text
    path = answer.json()["translatedFileUrl"].split("://", 1)[1].split("/", 1)[1]
    translated = client.get("/" + path).text
    assert translated.strip() == lt_translate(client, GERMAN, "de", "fr").json()[
        "translatedText"]


def test_frontend_settings_in_libretranslates_shape(client):
    settings = client.get("/frontend/settings").json()
    assert settings["charLimit"] == 2000 and settings["keyRequired"] is False
    assert settings["language"]["source"] == {"code": "de", "name": "German"}
    assert settings["language"]["target"]["code"] in ("en", "fr")
    assert ".docx" in settings["supportedFilesFormat"] and settings["filesTranslation"]


def test_beyond_max_models_loaded_the_least_recently_used_idle_model_is_unloaded(models):
    app = make_app(model_paths([], [models]), max_models_loaded=1)
    with TestClient(app) as client:
        def loaded() -> list[str]:
            return [model["name"] for model in client.get("/v1/models").json()["models"]
                    if model["loaded"]]

        assert loaded() == ["de-en.pt"]  # the first, at start
        first = lt_translate(client, "the dog runs", "en", "fr").json()["translatedText"]
        assert loaded() == ["en-fr.pt"]
        assert lt_translate(client, GERMAN, "de", "fr").status_code == 200  # two at once
        assert len(loaded()) == 1
        assert lt_translate(client, "the dog runs", "en", "fr").json()[
            "translatedText"] == first  # loaded again, same translation
        metrics = client.get("/metrics").text
        assert "nmt_models_loaded 1.0" in metrics
        assert "nmt_model_loads_total 4.0" in metrics  # de-en at start, en-fr, de-en, en-fr


def test_nmt_serve_takes_several_models_and_directories(models, tmp_path):
    shutil.copy(models / "en-fr.pt", tmp_path / "en-fr.pt")
    with running_server(models / "de-en.pt", "--model", str(models / "en-de.pt"),
                        "--models", str(tmp_path), "--max-models-loaded", "2") as (url, _):
        with urllib.request.urlopen(url + "/v1/models") as response:
            described = json.load(response)
    assert [(model["name"], model["loaded"]) for model in described["models"]] == [
        ("de-en.pt", True), ("en-de.pt", True), ("en-fr.pt", False)]
    assert described["max_models_loaded"] == 2


def test_a_model_whose_file_went_away_after_start_is_a_503_naming_it(models, tmp_path):
    for name in ("de-en.pt", "en-fr.pt"):
        shutil.copy(models / name, tmp_path / name)
    with TestClient(make_app(model_paths([], [tmp_path]), max_models_loaded=1)) as client:
        (tmp_path / "en-fr.pt").unlink()
        answer = lt_translate(client, "the dog runs", "en", "fr")
        assert answer.status_code == 503
        assert answer.json()["error"].startswith("the model for en-fr could not be loaded: ")
        assert lt_translate(client, GERMAN, "de", "en").status_code == 200


def test_each_models_batcher_sees_the_slots_of_the_others_at_work(models):
    """A batch decodes alone, with every core, only while no other model's slot works
    (decode/device/policy.py's decodes_alone): the pool tells each batcher of the others."""
    with TestClient(make_app(model_paths([], [models]))) as client:
        first, second, _ = [model.service.batcher
                            for model in client.app.state.pool.loaded.values()]
        try:
            first._free_slots = []  # its one slot at work
            assert first.busy_elsewhere(first) == 0 and second.busy_elsewhere(second) == 1
            second._free_slots = []  # another model's slot at work beside it
            assert first.busy_elsewhere(first) == 1
        finally:  # free again, or stopping the server would wait for them
            first._free_slots = second._free_slots = [0]


def test_libretranslates_client_works_unchanged_against_two_models_and_a_pivot(models):
    from libretranslatepy import LibreTranslateAPI

    with running_server(models / "de-en.pt", "--model", str(models / "en-fr.pt")) as (url, _):
        client = LibreTranslateAPI(url)
        assert client.languages() == [
            {"code": "de", "name": "German", "targets": ["en", "fr"]},
            {"code": "en", "name": "English", "targets": ["fr"]},
            {"code": "fr", "name": "French", "targets": []}]
        assert client.detect(GERMAN)[0]["language"] == "de"
        through = client.translate(GERMAN, "de", "fr")
        assert through == client.translate(client.translate(GERMAN, "de", "en"), "en", "fr")
        assert client.translate(GERMAN, "auto", "fr") == through


def test_the_models_loaded_at_start_are_read_once(models, monkeypatch):
    from transformer_nmt.serve import models as pool_module

    reads = []
    read = pool_module.read_model_file
    monkeypatch.setattr(pool_module, "read_model_file",
                        lambda path: reads.append(Path(path).name) or read(path))
    monkeypatch.setattr(pool_module, "load_for_inference", None)  # never read again
    make_app(model_paths([], [models]), max_models_loaded=2)
    assert reads == ["de-en.pt", "en-de.pt", "en-fr.pt"]
