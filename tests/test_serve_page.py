"""The web page of `nmt serve` in a real headless browser: a real server on a free loopback
port with a tiny model (or three, one per language pair), Debian's chromium driven by
Playwright.

Skips, saying why, where no chromium is installed (`.ci/run` installs Debian's with
apt-get) or the serve or test extras are missing. Playwright's own browser download is not
used: the browser on PATH is launched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install -e '.[serve]'")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed: pip install -e '.[test]'")

from serve_fixtures import with_languages  # noqa: E402 (needs the serve extra)

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for path in map(shutil.which, BROWSERS) if path), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason=f"no browser on PATH (looked for {', '.join(BROWSERS)}): "
           "install one, e.g. apt-get install chromium, to run the web page's browser test")

SENTENCE = "the house is small . a dog runs in the green garden"
"""Words of the tiny model's vocabulary (decode_fixtures.WORDS)."""
API_KEY = "page-test-key"
STARTUP_SECONDS = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_ready(process: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nmt serve exited with {process.returncode}: "
                               f"{process.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"nmt serve was not ready within {STARTUP_SECONDS} s")


def start_server(model: Path, *extra: str) -> Iterator[str]:
    """`nmt serve` in a subprocess; yields its base URL and stops it afterwards."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("NMT_API_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "transformer_nmt.cli", "serve", "--model", str(model),
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(process, url)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(model_file) -> Iterator[str]:
    yield from start_server(model_file)


@pytest.fixture(scope="module")
def keyed_server(served_model) -> Iterator[str]:
    """A server of one model that records its pair (en→de), which wants a key."""
    yield from start_server(served_model, "--api-key", API_KEY)


@pytest.fixture(scope="module")
def pairs_server(model_file, tmp_path_factory) -> Iterator[str]:
    """A server of three models made from the test model: de→en, en→fr and en→de; so
    de→fr goes through English, and nothing translates from French."""
    directory = tmp_path_factory.mktemp("pairs")
    paths = []
    for source, target in (("de", "en"), ("en", "fr"), ("en", "de")):
        made = with_languages(model_file, tmp_path_factory.mktemp("one"), source, target)
        paths.append(shutil.move(made, directory / f"{source}-{target}.pt"))
    first, *others = paths
    yield from start_server(first, *(part for path in others for part in ("--model", str(path))))


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=BROWSER)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.errors = []  # uncaught errors of the page's scripts
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    yield opened
    context.close()


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#model-info strong")  # /v1/models was read and shown


def unauthorized_error(url: str) -> str:
    """The server's one-line error to a translation request without a key (a 401)."""
    request = urllib.request.Request(f"{url}/v1/translate", data=json.dumps({"text": SENTENCE}).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=30)
    assert answer.value.code == 401
    return json.loads(answer.value.read())["error"]


def translate(page) -> dict:
    """Type SENTENCE, press Ctrl+Enter, and return the server's JSON answer."""
    return sent(page, lambda: page.press("#source", "Control+Enter"), SENTENCE)[1]


def sent(page, action, text: str | None = None) -> tuple[dict, dict]:
    """(request body, answer body) of the translation request `action` makes, after
    typing `text` if given; once the page has shown the answer."""
    if text is not None:
        page.fill("#source", text)
    with page.expect_response(lambda r: r.url.endswith("/v1/translate")) as answer:
        action()
    page.wait_for_function("document.querySelector('#translate-button').disabled === false")
    return answer.value.request.post_data_json, answer.value.json()


def options_of(page) -> dict[str, str]:
    """The pair picker's options: value to label."""
    return dict(page.eval_on_selector_all(
        "#pair-select option", "options => options.map(o => [o.value, o.textContent])"))


def test_typing_a_sentence_shows_its_translation_and_hovering_a_word_lights_the_source(
        page, server):
    open_page(page, server)
    assert page.is_hidden("#key-field")  # no key needed, none asked for
    assert page.is_hidden("#pair-picker")  # its model records no pair: nothing to choose

    body = translate(page)
    page.wait_for_selector("#output .tw")
    document = body["translations"][0]
    assert page.inner_text("#output") == document["text"]
    sentence = document["sentences"][0]
    assert sentence["attention"]["layers"], "the page asks for attention"

    target_word = page.locator("#output .tw").first
    target_word.hover()
    assert "hot" in target_word.get_attribute("class")
    lit_in_card = page.locator("#sentences .sw.lit")
    lit_in_editor = page.locator("#source-backdrop .sw.lit")
    assert lit_in_card.count() >= 1
    assert lit_in_editor.count() == lit_in_card.count()
    source_words = SENTENCE.split()
    for index in range(lit_in_card.count()):
        assert lit_in_card.nth(index).inner_text() in source_words
    # The cards show the words the server grouped the pieces into.
    card = page.locator("#sentence-0")
    for side in ("source", "target"):
        shown = card.locator(f".{side[0]}w").all_inner_texts()
        assert shown == [word["text"] for word in sentence["attention"][f"{side}_words"]]

    page.mouse.move(0, 0)
    assert page.locator(".sw.lit").count() == 0
    assert page.errors == []


def test_the_heatmaps_draw_every_layer_and_head(page, server):
    open_page(page, server)
    attention = translate(page)["translations"][0]["sentences"][0]["attention"]
    page.locator("details.heatmaps summary").first.click()
    page.wait_for_selector("details.heatmaps .heat-main canvas")  # drawn when opened
    layers, heads = len(attention["layers"]), len(attention["layers"][0])
    assert page.locator("details.heatmaps .heat-cell canvas").count() == layers * heads
    assert page.locator("details.heatmaps .heat-main canvas").count() == 1
    # A small map chosen is shown large and used for the highlights; chosen again, the
    # average is.
    last_cell = page.locator("details.heatmaps .heat-cell").last
    last_cell.click()
    assert page.input_value("#layer-select") == str(layers - 1)
    assert page.input_value("#head-select") == str(heads - 1)
    assert f"layer {layers}, head {heads}" in page.inner_text("details.heatmaps .heat-main")
    page.locator("details.heatmaps .heat-cell").last.click()
    assert page.input_value("#layer-select") == page.input_value("#head-select") == "avg"
    assert page.errors == []


def test_a_server_with_a_key_asks_for_it_shows_its_error_and_remembers_the_key(
        page, keyed_server):
    open_page(page, keyed_server)
    assert page.is_visible("#key-field")
    # One pair: no picker, but the labels name its languages and requests carry them.
    assert page.is_hidden("#pair-picker")
    assert page.title() == "English → German · transformer-nmt"
    assert page.text_content("#source-label") == "English text"

    translate(page)
    page.wait_for_selector("#status.error")
    error_line = page.inner_text("#status")
    assert unauthorized_error(keyed_server) in error_line

    page.fill("#api-key", API_KEY)
    page.dispatch_event("#api-key", "change")
    request, body = sent(page, lambda: page.press("#source", "Control+Enter"), SENTENCE)
    assert (request["source"], request["target"]) == ("en", "de")
    page.wait_for_selector("#output .tw")
    assert page.inner_text("#output") == body["translations"][0]["text"]
    assert page.evaluate("localStorage.getItem('transformer-nmt.api-key')") == API_KEY
    assert page.errors == []


def test_the_picker_offers_every_pair_and_requests_carry_the_chosen_one(page, pairs_server):
    open_page(page, pairs_server)
    assert options_of(page) == {"de:en": "German → English",
                                "de:fr": "German → French (via English)",
                                "en:de": "English → German", "en:fr": "English → French"}
    assert page.input_value("#pair-select") == "de:en"  # the first pair
    assert page.title() == "German → English · transformer-nmt"

    page.select_option("#pair-select", "en:fr")
    assert page.title() == "English → French · transformer-nmt"
    assert page.text_content("#target-label") == "French translation"
    assert "en-fr.pt" in page.inner_text("#model-info")
    request, body = sent(page, lambda: page.click("#translate-button"), SENTENCE)
    assert (request["source"], request["target"]) == ("en", "fr")
    assert body["models"] == ["en-fr.pt"] and body["pivot"] is None
    # Nothing translates French back: the swap button is disabled, saying why.
    assert page.is_disabled("#swap-button")
    assert "does not translate French → English" in page.get_attribute("#swap-button", "title")
    assert page.errors == []


def test_the_swap_button_turns_the_pair_and_the_translation_around(page, pairs_server):
    open_page(page, pairs_server)
    assert page.get_attribute("#swap-button", "aria-label") == "Swap languages"
    page.select_option("#pair-select", "en:de")
    translation = translate(page)["translations"][0]["text"]
    assert translation.strip(), "the test model translates SENTENCE into something"

    page.focus("#swap-button")  # from the keyboard
    request, _ = sent(page, lambda: page.keyboard.press("Enter"))
    assert page.input_value("#pair-select") == "de:en"
    assert page.input_value("#source") == translation
    assert (request["text"], request["source"], request["target"]) == (translation, "de", "en")

    page.click("#swap-button")  # and back, whatever the translation was
    assert page.input_value("#pair-select") == "en:de"
    page.wait_for_function("document.querySelector('#translate-button').disabled === false")
    assert page.title() == "English → German · transformer-nmt"
    assert page.errors == []


def test_a_pair_through_a_pivot_shows_the_pivot_text_and_offers_no_attention(
        page, pairs_server):
    open_page(page, pairs_server)
    page.select_option("#pair-select", "de:fr")
    assert page.is_disabled("#want-attention") and not page.is_checked("#want-attention")
    assert page.inner_text("#attention-note") == "not via English"
    assert page.inner_text("#direction").split() == ["German", "→", "French", "via", "English"]
    info = page.inner_text("#model-info")
    assert "de-en.pt" in info and "en-fr.pt" in info

    request, body = sent(page, lambda: page.click("#translate-button"), SENTENCE)
    assert (request["source"], request["target"], request["attention"]) == ("de", "fr", False)
    pivot = body["translations"][0]["pivot"]
    assert body["pivot"] == pivot["language"] == "en"
    assert page.inner_text("#pivot-text").split() == ["via", "English:", *pivot["text"].split()]
    assert page.is_disabled("#swap-button")  # no fr→de either

    # Back to a pair of one model: attention as it was, the translation asked for again.
    request, body = sent(page, lambda: page.select_option("#pair-select", "de:en"))
    assert (request["source"], request["target"], request["attention"]) == ("de", "en", True)
    assert page.is_enabled("#want-attention") and page.is_checked("#want-attention")
    assert page.is_hidden("#pivot-text") and page.is_hidden("#attention-note")
    assert page.errors == []


def test_the_chosen_pair_is_remembered_while_the_server_offers_it(page, pairs_server):
    open_page(page, pairs_server)
    page.select_option("#pair-select", "en:fr")
    page.reload()
    page.wait_for_selector("#model-info strong")
    assert page.input_value("#pair-select") == "en:fr"
    page.evaluate("localStorage.setItem('transformer-nmt.pair', 'fr:de')")  # not offered
    page.reload()
    page.wait_for_selector("#model-info strong")
    assert page.input_value("#pair-select") == "de:en"
    assert page.errors == []
