"""The web page's static files: shipped with the package, found through importlib.resources
(as the server finds them), and self-contained so that the page works offline."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path

import pytest

PAGE_FILES = ("index.html", "app.js", "style.css")
ROOT = Path(__file__).resolve().parents[1]


def static_dir():
    return files("transformer_nmt.serve") / "static"


class _References(HTMLParser):
    """Every src and href attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


@pytest.mark.parametrize("name", PAGE_FILES)
def test_each_page_file_is_found_as_a_package_resource(name):
    resource = static_dir() / name
    assert resource.is_file()
    assert resource.read_text(encoding="utf-8").strip()


def test_package_data_ships_every_static_file():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["transformer_nmt.serve"]
    shipped = [entry.name for entry in static_dir().iterdir()
               if any(fnmatch.fnmatch(f"static/{entry.name}", p) for p in patterns)]
    assert sorted(shipped) == sorted(entry.name for entry in static_dir().iterdir())


def test_the_page_loads_nothing_from_outside_the_server():
    page = _References()
    page.feed((static_dir() / "index.html").read_text(encoding="utf-8"))
    assert "/static/app.js" in page.urls and "/static/style.css" in page.urls
    for url in page.urls:
        assert url.startswith(("/", "#", "data:")), f"index.html refers to {url!r}"
        if url.startswith("/static/"):
            assert (static_dir() / url.removeprefix("/static/")).is_file(), url
    for name in PAGE_FILES:
        text = (static_dir() / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://|url\(\s*['\"]?//", text), f"{name} refers outside the server"
