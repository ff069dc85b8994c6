"""The HTTP API of `nmt serve` in-process (serve/app.py, service.py, libretranslate.py,
middleware.py, access.py): answers, LibreTranslate's shapes, and every refusal."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from transformer_nmt.config import ALPHA_RANGE
from transformer_nmt.decode.quality import confidence
from transformer_nmt.decode.quality.unknown import UNKNOWN_SOURCE
from fastapi.testclient import TestClient

from decode_fixtures import sentences, with_calibration
from serve_fixtures import make_app
from transformer_nmt.errors import UserError
from transformer_nmt.serve.batcher import Batcher

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def client(served_model):
    with TestClient(make_app(served_model, max_characters=2000, max_sentences=20)) as client:
        yield client


def translate(client, **body):
    return client.post("/v1/translate", json=body)


def test_a_text_of_several_sentences_comes_back_as_one_text_with_each_sentence(client):
    text = "the dog runs in the garden . the cat sleeps .\n\nchildren play near old trees"
    answer = translate(client, text=text).json()
    [result] = answer["translations"]
    assert [s["source"] for s in result["sentences"]] == [
        "the dog runs in the garden .", "the cat sleeps .", "children play near old trees"]
    joined = (f"{result['sentences'][0]['text']} {result['sentences'][1]['text']}\n\n"
              f"{result['sentences'][2]['text']}")
    assert result["text"] == joined
    assert answer["elapsed_ms"] >= 0


def test_a_list_of_texts_keeps_its_order_and_empty_texts_stay_empty(client):
    texts = sentences(3, seed=21) + ["", "   "]
    results = translate(client, text=texts).json()["translations"]
    alone = [translate(client, text=text).json()["translations"][0] for text in texts[:3]]
    assert results[:3] == alone
    assert results[3] == {"text": "", "sentences": []}
    assert results[4] == {"text": "   ", "sentences": []}


def test_nbest_alignments_and_attention_when_asked(client):
    answer = translate(client, text="the house is small", beam=3, nbest=3, alignments=True,
                       attention=True).json()
    [sentence] = answer["translations"][0]["sentences"]
    scores = [entry["score"] for entry in sentence["nbest"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert sentence["nbest"][0]["text"] == sentence["text"]
    assert all(len(pair) == 2 for pair in sentence["alignment"])
    attention = sentence["attention"]
    layers = attention["layers"]
    assert attention["source_tokens"][-1] == attention["target_tokens"][-1] == "</s>"
    heads = layers[0]
    assert len(heads[0]) == len(attention["target_tokens"])
    assert len(heads[0][0]) == len(attention["source_tokens"])
    for row in heads[0]:
        assert sum(row) == pytest.approx(1, abs=0.01)


def test_each_sentence_says_what_the_guard_found_and_whether_it_fell_back(client):
    results = translate(client, text=sentences(4, seed=8)).json()["translations"]
    found = [sentence for result in results for sentence in result["sentences"]]
    assert found
    for sentence in found:
        assert isinstance(sentence["degenerate"], list)
        assert isinstance(sentence["fallback"], bool)


def test_the_model_is_described(client):
    card = client.get("/v1/model").json()
    assert card["source_language"] == "en" and card["target_language"] == "de"
    assert card["preset"] == "tiny"
    assert card["parameters"] > 0 and card["vocabulary_size"] == 60
    assert card["defaults"] == {"beam": 2, "alpha": 0.6, "nbest": 1}
    # The page bounds its alpha field by the range DecodeConfig accepts, not a rule of its own.
    assert (card["limits"]["min_alpha"], card["limits"]["max_alpha"]) == ALPHA_RANGE
    assert card["api_key_required"] is False


def test_health_readiness_docs_and_metrics(client):
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").json() == {"status": "ready"}
    assert client.get("/docs").status_code == 200
    translate(client, text="a dog runs")
    metrics = client.get("/metrics").text
    assert re.search(r'nmt_requests_total\{route="/v1/translate",status="200"\} [1-9]', metrics)
    for name in ("nmt_request_latency_seconds_bucket", "nmt_batch_sentences_count",
                 "nmt_queue_sentences", "nmt_target_tokens_total",
                 "nmt_decode_target_tokens_per_second"):
        assert name in metrics


def test_html_keeps_the_markup(client):
    html = "<p>the dog runs <b>fast</b></p>"
    answer = client.post("/translate", json={"q": html, "source": "en", "target": "de",
                                             "format": "html"}).json()["translatedText"]
    assert re.fullmatch(r"<p>.*<b>.*</b></p>", answer, re.DOTALL)


@pytest.mark.parametrize("body, status, names", [
    (b'{"text": "a"', 400, "not valid JSON"),
    (b'{"text": "\xff\xfe"}', 400, "not valid JSON"),
    (b'[1, 2]', 422, "JSON object"),
    (b'{"text": 3}', 422, "'text'"),
    (b'{"text": ["a", 4]}', 422, "'text.1'"),
    (b'{"text": "a", "beam": "4"}', 422, "'beam'"),
    (b'{"text": "a", "bam": 4}', 422, "unknown field 'bam'"),
    (b'{"beam": 4}', 422, "'text' is missing"),
    (b'', 422, "the request body is empty: send a JSON object with the field 'text'"),
    (b'{"text": "a", "beam": 0}', 422, "beam must be between 1 and 16"),
    (b'{"text": "a", "beam": 2, "nbest": 3}', 422, "nbest must be between 1 and the beam"),
    (b'{"text": "a", "alpha": 1e308}', 422, "alpha"),
])
def test_bad_requests_get_one_line_errors_naming_the_field(client, body, status, names):
    answer = client.post("/v1/translate", content=body,
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == status
    message = answer.json()["error"]
    assert names in message and "\n" not in message


def test_over_the_size_limits_is_413_naming_the_limit(client):
    too_long = translate(client, text="a " * 1500)
    assert too_long.status_code == 413 and "max_characters" in too_long.json()["error"]
    too_many = translate(client, text=" ".join(["the dog runs."] * 25))
    assert too_many.status_code == 413 and "max_sentences" in too_many.json()["error"]
    huge_body = client.post("/v1/translate", content=b"x" * 100_000,
                            headers={"Content-Type": "application/json"})
    assert huge_body.status_code == 413


def test_a_full_queue_is_429_and_a_slow_translation_504(served_model):
    with TestClient(make_app(served_model, max_queue=2)) as client:
        answer = translate(client, text="one dog. two cats. three trees.")
        assert answer.status_code == 429 and "max_queue" in answer.json()["error"]
    with TestClient(make_app(served_model, timeout_s=0.0001)) as client:
        answer = translate(client, text="the dog runs in the garden")
        assert answer.status_code == 504 and "timeout_s" in answer.json()["error"]
        assert client.get("/health").status_code == 200


def test_the_api_key_is_required_on_translation_endpoints_only(served_model):
    with TestClient(make_app(served_model, api_key=KEY)) as client:
        assert translate(client, text="a").status_code == 401
        assert client.post("/v1/translate", json={"text": "a"},
                           headers={"X-API-Key": "wrong"}).status_code == 403
        assert client.post("/v1/translate", json={"text": "a"},
                           headers={"X-API-Key": KEY}).status_code == 200
        assert client.post("/v1/translate", json={"text": "a"},
                           headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        libre = {"q": "a", "source": "en", "target": "de"}
        assert client.post("/translate", json=libre).status_code == 401
        assert client.post("/translate", json={**libre, "api_key": "no"}).status_code == 403
        assert client.post("/translate", json={**libre, "api_key": KEY}).status_code == 200
        assert client.get("/v1/model").json()["api_key_required"] is True
        assert client.get("/health").status_code == 200


def test_cors_is_off_unless_an_origin_is_given(served_model, client):
    origin = {"Origin": "https://app.example"}
    assert "access-control-allow-origin" not in client.get("/v1/model", headers=origin).headers
    with TestClient(make_app(served_model, cors_origins=("https://app.example",))) as allowed:
        answer = allowed.get("/v1/model", headers=origin)
        assert answer.headers["access-control-allow-origin"] == "https://app.example"


def current_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return int(next(line for line in status if line.startswith("VmRSS")).split()[1])


BAD_BODIES = [b"", b"{", b"\xff" * 50, b'{"text": null}', b'{"text": [[]]}',
              b'{"text": "a", "beam": -1}', b'{"text": "a", "nbest": 1000}',
              json.dumps({"text": "x" * 3000}).encode(), b'{"text": {"a": 1}}', b"null",
              b'{"text": "a", "attention": "yes"}', b'"just a string"']


def test_hundreds_of_bad_requests_leave_a_working_server_and_bounded_memory(client):
    def send_all():
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(
                lambda body: client.post("/v1/translate", content=body,
                                         headers={"Content-Type": "application/json"}),
                BAD_BODIES * 25))
        assert all(400 <= answer.status_code < 500 for answer in answers)

    send_all()  # first allocations of every error path
    before = current_rss_kib()
    send_all()
    send_all()
    assert current_rss_kib() - before < 30 * 1024
    assert translate(client, text="the dog runs").status_code == 200


def test_a_glossary_puts_its_target_terms_into_the_sentences_with_its_source_terms(client):
    text = "the dog runs . a cat sleeps on a warm roof ."
    plain = translate(client, text=text).json()["translations"][0]["sentences"]
    termed = translate(client, text=text, glossary={"DOG": "green garden", "tree": "old"})
    first, second = termed.json()["translations"][0]["sentences"]
    assert "green garden" in first["text"]
    assert second == plain[1]  # no source term: translated as without a glossary
    too_big = translate(client, text="a", glossary={f"w{i}": "x" for i in range(101)})
    assert too_big.status_code == 422 and "glossary" in too_big.json()["error"]


def test_every_route_of_the_app_is_counted_by_its_path_and_any_other_path_as_other(client):
    for path in ("/languages", "/docs", "/openapi.json", "/no-such-page"):
        client.get(path)
    metrics = client.get("/metrics").text
    for route in ("/languages", "/docs", "/openapi.json", "other"):
        assert f'nmt_requests_total{{route="{route}"' in metrics, route
    assert "/no-such-page" not in metrics


class WaitTimedOut(Exception):
    """asyncio.TimeoutError as Python 3.10 has it: not the built-in TimeoutError."""


@pytest.fixture
def timeouts_of_python_3_10(monkeypatch):
    """asyncio.wait_for raises an asyncio.TimeoutError that is not the built-in one, as
    before Python 3.11, so that code catching the built-in class misses it."""
    wait_for = asyncio.wait_for

    async def wait_for_as_in_3_10(awaitable, timeout):
        try:
            return await wait_for(awaitable, timeout)
        except TimeoutError:
            raise WaitTimedOut from None

    monkeypatch.setattr(asyncio, "TimeoutError", WaitTimedOut)
    monkeypatch.setattr(asyncio, "wait_for", wait_for_as_in_3_10)


def test_short_waits_keep_the_batcher_and_the_timeout_working_on_python_3_10(
        served_model, timeouts_of_python_3_10):
    # A lone sentence waits for company until max_wait_ms runs out: a timeout the
    # batcher's loop must survive.
    with TestClient(make_app(served_model, max_wait_ms=20)) as client:
        for text in ("the dog runs", "a cat sleeps"):
            assert translate(client, text=text).status_code == 200
        assert client.get("/ready").status_code == 200
    with TestClient(make_app(served_model, timeout_s=0.0001)) as client:
        assert translate(client, text="the dog runs in the garden").status_code == 504


def test_a_dead_batcher_makes_ready_fail_and_is_logged_with_its_traceback(
        served_model, monkeypatch, caplog):
    def broken(batcher, oldest):
        raise RuntimeError("the batcher broke")

    monkeypatch.setattr(Batcher, "_wait_for_company", broken)
    with TestClient(make_app(served_model), raise_server_exceptions=False) as client:
        assert client.get("/ready").status_code == 200
        # The request that was waiting gets the error rather than its timeout.
        assert translate(client, text="the dog runs").status_code == 500
        ready = client.get("/ready")
        assert ready.status_code == 503 and "batcher stopped" in ready.json()["error"]
        refused = translate(client, text="the dog runs")
        assert refused.status_code == 503 and "batcher stopped" in refused.json()["error"]
    [failure] = [record for record in caplog.records if record.name.endswith("batcher")]
    assert failure.levelname == "ERROR" and failure.exc_info is not None
    assert "the batcher broke" in caplog.text and "Traceback" in caplog.text


def test_attention_comes_with_the_words_of_its_pieces_and_attention_between_words(client):
    text = "the green garden is small"
    [sentence] = translate(client, text=text, attention=True).json()[
        "translations"][0]["sentences"]
    attention = sentence["attention"]
    source_words, target_words = attention["source_words"], attention["target_words"]
    assert [word["text"] for word in source_words] == text.split()
    assert " ".join(word["text"] for word in target_words) == sentence["text"]
    for words, tokens in ((source_words, attention["source_tokens"]),
                          (target_words, attention["target_tokens"])):
        pieces = [index for word in words for index in word["pieces"]]
        assert pieces == sorted(pieces) and tokens[pieces[-1] + 1:] == ["</s>"]
    word_layers = attention["word_layers"]
    assert len(word_layers) == len(attention["layers"])
    for heads in word_layers:
        assert len(heads) == len(attention["layers"][0])
        for rows in heads:
            assert len(rows) == len(target_words)
            assert all(len(row) == len(source_words) for row in rows)
    assert "attention" not in translate(client, text=text).json()[
        "translations"][0]["sentences"][0]


@pytest.fixture(scope="module")
def calibrated_model(served_model, tmp_path_factory):
    """The served model with a calibration that gives every translation confidence 0.5."""
    return with_calibration(served_model, tmp_path_factory.mktemp("calibrated") / "model.pt")


@pytest.fixture
def sound_outputs(monkeypatch):
    """No output counts as degenerate for its confidence: the tiny model's mostly are, and
    then get 0 whatever the calibration, which these tests follow through the APIs."""
    monkeypatch.setattr(confidence, "output_reasons", lambda *arguments: [])


def test_a_degenerate_sentence_gets_confidence_0_in_our_api_and_libretranslates(
        calibrated_model):
    """An empty output for a source of digits was degenerate in /v1 while LibreTranslate
    gave it the calibration's 0.5; both now read the one confidence, 0 with its reasons.
    (Words with the digits: the test vocabulary has no digits, and a source mostly unknown
    to it would come back from LibreTranslate as it was sent.)"""
    source = "12345 the dog runs"
    with TestClient(make_app(calibrated_model)) as calibrated:
        ours = translate(calibrated, text=source).json()
        libre = calibrated.post("/translate", json={"q": source, "source": "en",
                                                    "target": "de"}).json()
    [sentence] = ours["translations"][0]["sentences"]
    assert sentence["text"] == "" and sentence["fallback"] is False
    assert "only_symbols" in sentence["degenerate"]
    assert sentence["confidence"] == 0.0 and sentence["nbest"][0]["confidence"] == 0.0
    assert "has no letter or digit, though the source has some" in \
        sentence["confidence_reasons"]
    assert libre == {"translatedText": "", "confidence": 0.0}


def test_plain_text_reaches_the_model_without_bidi_controls_and_html_keeps_them(
        client, monkeypatch):
    """An embedding or isolate was an unknown piece to the model, which also cut the word
    it opened: plain text is now translated as the reader sees it, without them."""
    [model] = client.app.state.pool.loaded.values()
    translator = model.service.translator
    begin, seen = translator.begin, []

    def recording_begin(items, *arguments, **options):
        job = begin(items, *arguments, **options)
        seen.extend(job.ids)
        return job

    monkeypatch.setattr(translator, "begin", recording_begin)
    clean = "the dog runs in the garden"
    marked = "\u2067the\u2069 \u202bdog\u202c runs \u200fin the \u2068garden\u2069"
    [expected] = translate(client, text=clean).json()["translations"]
    [result] = translate(client, text=marked).json()["translations"]
    libre = client.post("/translate", json={"q": marked, "source": "en", "target": "de"})
    assert seen == [seen[0]] * 3 and translator.vocab.unk_id not in seen[0]
    assert result["text"] == expected["text"] == libre.json()["translatedText"]
    assert result["sentences"][0]["source"] == marked and "warnings" not in result
    html = client.post("/translate", json={"q": f"<p>{marked}</p>", "source": "en",
                                           "target": "de", "format": "html"})
    assert html.json()["translatedText"].count("\u2069") == 2  # kept in place


def test_a_sentence_the_vocabulary_cannot_read_is_warned_of_and_libretranslate_sends_it_back(
        client):
    """18,900 characters of Japanese sent to a German model came back as one fluent
    unrelated sentence; now /v1 says so, and LibreTranslate's API gives the text back
    as it was sent, as LibreTranslate does for a language it does not have."""
    japanese = "日本語の文章をドイツ語のモデルに送りました。"
    text = f"the dog runs. {japanese}"
    [result] = translate(client, text=text).json()["translations"]
    known, unknown = result["sentences"]
    assert unknown["source"] == japanese and unknown["text"] != japanese
    assert unknown["confidence"] == 0.0 and unknown["confidence_reasons"] == [UNKNOWN_SOURCE]
    assert known["confidence"] is None and known["confidence_reasons"] == []
    assert result["warnings"] == [f"sentence 2: {UNKNOWN_SOURCE}; its translation is "
                                  "invented, not translated"]
    assert "warnings" not in translate(client, text="the dog runs.").json()["translations"][0]
    libre = client.post("/translate", json={"q": japanese, "source": "en",
                                            "target": "de"}).json()
    assert libre == {"translatedText": japanese, "confidence": 0.0}
    both = client.post("/translate", json={"q": text, "source": "en", "target": "de"}).json()
    assert both == {"translatedText": f"{known['text']} {japanese}"}


@pytest.mark.usefixtures("sound_outputs")
def test_each_sentence_has_its_confidence_in_our_api_and_libretranslates(calibrated_model,
                                                                        client):
    plain = translate(client, text="a dog runs. the cat sleeps.").json()["translations"][0]
    assert [sentence["confidence"] for sentence in plain["sentences"]] == [None, None]
    assert client.get("/v1/model").json()["confidence"] is None
    with TestClient(make_app(calibrated_model)) as calibrated:
        answer = translate(calibrated, text="a dog runs. the cat sleeps.", nbest=2).json()
        for sentence in answer["translations"][0]["sentences"]:
            assert sentence["confidence"] == 0.5 and sentence["confidence_reasons"] == []
            assert "withheld" not in sentence
            assert [hyp["confidence"] for hyp in sentence["nbest"]] == [0.5, 0.5]
        libre = calibrated.post("/translate", json={"q": ["a dog runs", ""], "source": "en",
                                                    "target": "de"}).json()
        assert libre["confidence"] == [0.5, None] and "withheld" not in libre
        card = calibrated.get("/v1/model").json()["confidence"]
        assert card["target"] == "made by hand" and card["sentences"] == 10


@pytest.mark.usefixtures("sound_outputs")
def test_below_the_minimum_confidence_a_sentence_comes_back_empty_saying_why(
        calibrated_model, served_model):
    with TestClient(make_app(calibrated_model, min_confidence=0.6)) as strict:
        answer = translate(strict, text="a dog runs. the cat sleeps.").json()
        [result] = answer["translations"]
        assert result["text"].strip() == ""
        for sentence in result["sentences"]:
            assert sentence["withheld"] is True and sentence["text"] == ""
            assert sentence["nbest"] == []
            assert sentence["reason"].startswith("confidence 0.50 is below this server's "
                                                 "minimum 0.6")
        libre = strict.post("/translate", json={"q": "a dog runs", "source": "en",
                                                "target": "de"}).json()
        assert libre == {"translatedText": "", "confidence": 0.5, "withheld": True}
    with TestClient(make_app(calibrated_model, min_confidence=0.4)) as lenient:
        [result] = translate(lenient, text="a dog runs.").json()["translations"]
        assert "withheld" not in result["sentences"][0]
        assert result["sentences"][0]["text"] == result["text"]
    with pytest.raises(UserError, match="nmt calibrate"):
        make_app(served_model, min_confidence=0.5)


def test_glossary_terms_longer_than_any_output_are_refused_naming_them(client):
    # 11 subword pieces each (the test vocabulary spells most words piece by piece);
    # the model's outputs have at most 255.
    phrase = "green garden house "
    alone = translate(client, text="the dog runs .", glossary={"dog": phrase * 30})
    assert alone.status_code == 422
    message = alone.json()["error"]
    assert "for 'dog'" in message and "330 subword pieces" in message
    assert "more than the 255" in message and "\n" not in message
    # Two terms that fit alone but not together in one sentence.
    glossary = {"dog": phrase * 12, "cat": phrase * 11 + "warm roof"}
    together = translate(client, text="the dog sees the cat .", glossary=glossary)
    assert together.status_code == 422
    assert "'dog', 'cat'" in together.json()["error"]


def test_attention_beyond_max_attention_cells_is_refused_before_decoding(served_model):
    text = "the dog runs in the green garden . the cat sleeps on a warm roof ."
    with TestClient(make_app(served_model, max_attention_cells=1000)) as client:
        assert client.get("/v1/model").json()["limits"]["max_attention_cells"] == 1000
        refused = translate(client, text=" ".join([text] * 3), attention=True)
        assert refused.status_code == 413
        message = refused.json()["error"]
        assert "max_attention_cells (1000)" in message and "without attention" in message
        assert client.get("/metrics").text.count("nmt_source_tokens_total 0.0") == 1
        assert translate(client, text=" ".join([text] * 3)).status_code == 200
        answer = translate(client, text=text, attention=True)
        assert answer.status_code == 200
        # What was counted before decoding bounds the maps sent.
        cells = sum(len(sentence["attention"]["source_tokens"]) *
                    len(sentence["attention"]["target_tokens"])
                    for sentence in answer.json()["translations"][0]["sentences"])
        assert 0 < cells <= 1000
