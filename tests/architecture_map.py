"""ARCHITECTURE.md read as data: the rank of every layer, the one line of every module and
the tests it names (the tests of the map and of the imports both read it, so the page is
the one table)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "ARCHITECTURE.md"

_LAYER_ROW = re.compile(r"^\| *(\d+) *\| *((?:`[\w.]+`(?:, *)?)+) *\|")
_MODULE_LINE = re.compile(r"^- `([\w/.]+\.py)`: *(.*)$")
_TESTED_BY = re.compile(r" Tested by (tests/[\w.]+\.py(?:, tests/[\w.]+\.py)*)\.$")


def layer_ranks(text: str, section: str = "## Layers") -> dict[str, int]:
    """Layer name -> rank, from the rows of the table under the heading `section` ('| 6 |
    `decode` | ...'): the package's layers, or a layer's own parts ('### `decode`'). A
    text without that heading is read whole."""
    lines = text.splitlines()
    if section in lines:
        start = lines.index(section) + 1
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")),
                   len(lines))
        lines = lines[start:end]
    ranks = {}
    for line in lines:
        row = _LAYER_ROW.match(line)
        if row:
            for name in re.findall(r"`([\w.]+)`", row.group(2)):
                ranks[name] = int(row.group(1))
    return ranks


def module_lines(text: str) -> dict[str, str]:
    """Module path under the package ('decode/search/searches.py') -> its line of description."""
    return {match.group(1): match.group(2).strip() for line in text.splitlines()
            if (match := _MODULE_LINE.match(line))}


def named_tests(text: str) -> dict[str, list[str]]:
    """Module path -> the test files its line names at its end (' Tested by
    tests/test_a.py, tests/test_b.py.'), for the modules whose line names any."""
    found = {}
    for path, line in module_lines(text).items():
        named = _TESTED_BY.search(line)
        if named:
            found[path] = named.group(1).split(", ")
    return found


def part_ranks(text: str, layer: str = "decode") -> dict[str, int]:
    """Part of `layer` (its sub-package) -> rank, from the table under its heading."""
    return layer_ranks(text, f"### `{layer}`")


def read_map(path: Path = MAP) -> tuple[dict[str, int], dict[str, str]]:
    text = path.read_text(encoding="utf-8")
    return layer_ranks(text), module_lines(text)
