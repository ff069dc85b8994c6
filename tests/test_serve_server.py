"""`nmt serve` as a real process (serve/server.py, cli/serve.py): LibreTranslate's own
client works unchanged, and SIGTERM loses no accepted request."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from libretranslatepy import LibreTranslateAPI

from serve_fixtures import running_server, with_languages

KEY = "k3y-for-tests"


@pytest.fixture(scope="module")
def served_model(model_file, tmp_path_factory):
    return with_languages(model_file, tmp_path_factory.mktemp("served"))


def post_json(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_libretranslate_client_translates_unchanged_with_a_key_from_the_environment(
        served_model):
    with running_server(served_model, env={"NMT_API_KEY": KEY}) as (url, _):
        client = LibreTranslateAPI(url, api_key=KEY)
        assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                      {"code": "de", "name": "German", "targets": []}]
        text = "the dog runs in the green garden"
        status, ours = post_json(url + "/v1/translate", {"text": text}, {"X-API-Key": KEY})
        assert status == 200
        assert client.translate(text, "en", "de") == ours["translations"][0]["text"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            LibreTranslateAPI(url, api_key="wrong").translate(text, "en", "de")
        assert refused.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as unsupported:
            client.translate(text, "fr", "de")
        assert unsupported.value.code == 400


def test_sigterm_answers_every_accepted_request_then_exits_0(served_model):
    # Sentences wait up to 3 s for company, so every request is accepted and queued
    # when the signal comes.
    with running_server(served_model, "--max-wait-ms", "3000") as (url, process):
        texts = [f"the dog runs . the cat sleeps number {i} ." for i in range(8)]
        with ThreadPoolExecutor(len(texts)) as pool:
            answers = [pool.submit(post_json, url + "/v1/translate", {"text": text})
                       for text in texts]
            wait_for_queued(url, 2 * len(texts))
            process.send_signal(signal.SIGTERM)
            results = [answer.result() for answer in answers]
        assert [status for status, _ in results] == [200] * len(texts)
        assert all(len(body["translations"][0]["sentences"]) == 2 for _, body in results)
        assert process.wait(timeout=30) == 0


def wait_for_queued(url: str, sentences: int, seconds: float = 30) -> None:
    """Until /metrics shows `sentences` sentences waiting to be decoded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("nmt_queue_sentences ") and \
                        float(line.split()[1]) >= sentences:
                    return
        time.sleep(0.05)
    raise AssertionError(f"{sentences} sentences never waited in the queue")


def test_a_wrong_model_path_is_a_one_line_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "serve", "--model",
                             str(tmp_path / "missing.pt")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "missing.pt" in result.stderr
