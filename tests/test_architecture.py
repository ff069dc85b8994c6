"""ARCHITECTURE.md stays the true map of the house: every source module is on it with a line
saying what it is for, nothing gone is left on it, and every module's layer has a rank."""

from __future__ import annotations

from architecture_map import ROOT, layer_ranks, module_lines, read_map

PACKAGE_DIR = ROOT / "src" / "transformer_nmt"


def source_modules() -> set[str]:
    return {path.relative_to(PACKAGE_DIR).as_posix() for path in PACKAGE_DIR.rglob("*.py")}


def layer_of(path: str) -> str:
    """'decode/search.py' -> 'decode'; 'config.py' -> 'config'; '__init__.py' -> '__init__'."""
    return path.split("/")[0].removesuffix(".py")


def test_the_reader_finds_ranks_and_module_lines():
    text = ("| rank | layer | what |\n|---|---|---|\n| 10 | `serve`, `export` | x |\n"
            "| 0 | `errors` | y |\n\n- `serve/app.py`: the app.\n- `errors.py`: errors.\n")
    assert layer_ranks(text) == {"serve": 10, "export": 10, "errors": 0}
    assert module_lines(text) == {"serve/app.py": "the app.", "errors.py": "errors."}


def test_every_source_module_is_on_the_map_with_a_line():
    _, modules = read_map()
    actual = source_modules()
    assert sorted(actual - set(modules)) == [], "modules missing from ARCHITECTURE.md"
    assert sorted(set(modules) - actual) == [], "ARCHITECTURE.md lists modules that are gone"
    assert [path for path, line in modules.items() if len(line) < 10] == []


def test_every_layer_has_a_rank_and_every_rank_a_layer_that_exists():
    ranks, _ = read_map()
    layers = {layer_of(path) for path in source_modules()}
    assert sorted(layers - set(ranks)) == []
    assert sorted(set(ranks) - layers) == []
