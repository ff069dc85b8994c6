"""The package's version (version.py): one leaf module that pyproject.toml and the API
read, so that every place that records the version records the same one."""

from __future__ import annotations

import ast
import re
import tomllib

import transformer_nmt
from architecture_map import ROOT
from transformer_nmt.version import __version__

VERSION_FILE = ROOT / "src" / "transformer_nmt" / "version.py"


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:[.-]?(?:a|b|rc|dev|post)\d*)?", __version__)


def test_pyproject_reads_the_version_from_this_module():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "transformer_nmt.version.__version__"}


def test_the_api_exports_the_same_version():
    assert transformer_nmt.__version__ == __version__


def test_the_module_is_a_leaf_that_imports_nothing():
    tree = ast.parse(VERSION_FILE.read_text(encoding="utf-8"))
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
