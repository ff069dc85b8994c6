"""The web page's static files: shipped with the package, found through importlib.resources
(as the server finds them), self-contained so that the page works offline, and ES modules
that import one another without a build step: every import resolves to a module that
exports the name, and every module is served with a JavaScript type, or the browser
would refuse to run it."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from serve_fixtures import make_app

ENTRY = "main.js"
"""The module index.html loads; it imports the others."""
ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r'^import\s*(?:\{([^}]*)\}\s*from\s*)?"([^"]+)";', re.MULTILINE)
"""An import statement of a module: the names it takes and the module it names."""
EXPORT = re.compile(r"^export\s+(?:async\s+)?(?:function|const|let|class)\s+(\w+)",
                    re.MULTILINE)
LOOKUP = re.compile(r'\$\("([^"]+)"\)')
"""An element of index.html that dom.js looks up by id."""


def static_dir():
    return files("transformer_nmt.serve") / "static"


def modules() -> list[str]:
    return sorted(entry.name for entry in static_dir().iterdir() if entry.name.endswith(".js"))


def imports_of(module: str) -> list[tuple[str, list[str]]]:
    """(imported module, names it takes) of each import statement of `module`."""
    text = (static_dir() / module).read_text(encoding="utf-8")
    return [(target, [name.strip() for name in names.split(",") if name.strip()])
            for names, target in IMPORT.findall(text)]


PAGE_FILES = ("index.html", "style.css", *modules())


class _References(HTMLParser):
    """Every src and href attribute of a page, and every id."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]
        self.ids += [value for name, value in attrs if name == "id" and value]


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
    assert f"/static/{ENTRY}" in page.urls and "/static/style.css" in page.urls
    for url in page.urls:
        assert url.startswith(("/", "#", "data:")), f"index.html refers to {url!r}"
        if url.startswith("/static/"):
            assert (static_dir() / url.removeprefix("/static/")).is_file(), url
    for name in PAGE_FILES:
        text = (static_dir() / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://|url\(\s*['\"]?//", text), f"{name} refers outside the server"


def test_every_element_the_scripts_look_up_is_in_the_page_once():
    # A missing id makes dom.js hand out null, which fails only when that element is used
    # (the pair picker, say, only on a server of several models).
    page = _References()
    page.feed((static_dir() / "index.html").read_text(encoding="utf-8"))
    looked_up = LOOKUP.findall((static_dir() / "dom.js").read_text(encoding="utf-8"))
    assert "pair-select" in looked_up and "swap-button" in looked_up
    for element in looked_up:
        assert page.ids.count(element) == 1, f"dom.js looks up #{element}: in index.html " \
                                             f"{page.ids.count(element)} times"


def test_the_page_loads_its_entry_module_as_a_module():
    index = (static_dir() / "index.html").read_text(encoding="utf-8")
    assert f'<script type="module" src="/static/{ENTRY}"></script>' in index
    assert index.count("<script") == 1


@pytest.mark.parametrize("module", modules())
def test_every_import_names_a_module_beside_it_that_exports_the_names(module):
    for target, names in imports_of(module):
        assert target.startswith("./") and target.endswith(".js"), \
            f"{module} imports {target!r}: only ./NAME.js resolves without a build step"
        path = static_dir() / target.removeprefix("./")
        assert path.is_file(), f"{module} imports {target}, which does not exist"
        exported = set(EXPORT.findall(path.read_text(encoding="utf-8")))
        assert set(names) <= exported, f"{module} imports {set(names) - exported} from {target}"


def test_every_module_is_reached_from_the_entry_and_none_imports_in_a_cycle():
    reached = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path + (module,))}"
        if module in reached:
            return
        reached.add(module)
        for target, _ in imports_of(module):
            visit(target.removeprefix("./"), path + (module,))

    visit(ENTRY, ())
    assert reached == set(modules()), f"never imported: {set(modules()) - reached}"


def test_every_module_is_served_with_a_javascript_type(model_file):
    client = TestClient(make_app(model_file))
    for module in modules():
        answer = client.get(f"/static/{module}")
        assert answer.status_code == 200, module
        assert answer.headers["content-type"].split(";")[0] in (
            "text/javascript", "application/javascript"), module
