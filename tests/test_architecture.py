"""ARCHITECTURE.md stays the true map of the house: every source module is on it with a line
saying what it is for, nothing gone is left on it, every module's layer has a rank, and
every module has its tests.

The tests mirror the house: `src/transformer_nmt/<layer>/<module>.py` has its own
`tests/test_<layer>_<module>.py` (`tests/test_<module>.py` for a top-level module; a
package's `__init__.py` has `tests/test_<package>.py`), or its line on the map ends with
` Tested by tests/test_x.py.` (several files separated by ", "), naming existing test files
that import or run it. Exempt by rule, as there is nothing in them to test: `__main__.py`
files and `__init__.py` files that hold nothing but a docstring.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from functools import lru_cache
from pathlib import Path

from architecture_map import MAP, ROOT, layer_ranks, module_lines, named_tests, read_map

PACKAGE_DIR = ROOT / "src" / "transformer_nmt"
TESTS_DIR = ROOT / "tests"


def source_modules() -> set[str]:
    return {path.relative_to(PACKAGE_DIR).as_posix() for path in PACKAGE_DIR.rglob("*.py")}


def layer_of(path: str) -> str:
    """'decode/search/searches.py' -> 'decode'; 'config.py' -> 'config'; '__init__.py' -> '__init__'."""
    return path.split("/")[0].removesuffix(".py")


def own_test(path: str) -> str:
    """'decode/search/searches.py' -> 'tests/test_decode_search_searches.py'; 'config.py' ->
    'tests/test_config.py'; 'data/corpora/__init__.py' -> 'tests/test_data_corpora.py'."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "tests/test_" + "_".join(parts) + ".py"


def exempt(path: str) -> bool:
    """A `__main__.py`, or an `__init__.py` with nothing but a docstring (or nothing)."""
    name = path.rsplit("/", 1)[-1]
    if name == "__main__.py":
        return True
    if name != "__init__.py":
        return False
    body = ast.parse((PACKAGE_DIR / path).read_text(encoding="utf-8")).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
               and isinstance(node.value.value, str) for node in body)


def untested(modules: set[str], named: dict[str, list[str]], test_files: set[str]
             ) -> tuple[list[str], list[str]]:
    """The modules (not exempt) with neither their own test file nor a test named on the
    map, and the named test files that do not exist ('module: file')."""
    missing = sorted(path for path in modules if not exempt(path)
                     and own_test(path) not in test_files and path not in named)
    gone = sorted(f"{path}: {name}" for path, names in named.items() for name in names
                  if name not in test_files)
    return missing, gone


def existing_test_files() -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in TESTS_DIR.glob("test_*.py")}


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


def test_the_reader_finds_the_tests_a_line_names():
    text = ("- `serve/app.py`: the app. Tested by tests/test_serve_server.py.\n"
            "- `serve/pairs.py`: pairs. Tested by tests/test_serve_models.py, tests/test_a.py.\n"
            "- `errors.py`: errors; Tested by nothing in particular\n")
    assert named_tests(text) == {"serve/app.py": ["tests/test_serve_server.py"],
                               "serve/pairs.py": ["tests/test_serve_models.py", "tests/test_a.py"]}


def test_the_rule_names_own_tests_and_exempts_only_modules_without_behaviour():
    assert own_test("decode/search/beam.py") == "tests/test_decode_search_beam.py"
    assert own_test("calibrate.py") == "tests/test_calibrate.py"
    assert own_test("cli/__init__.py") == "tests/test_cli.py"
    assert own_test("data/corpora/__init__.py") == "tests/test_data_corpora.py"
    assert exempt("cli/__main__.py") and exempt("decode/__init__.py")
    assert exempt("documents/__init__.py")  # a docstring only
    assert not exempt("cli/__init__.py") and not exempt("data/corpora/__init__.py")
    assert not exempt("decode/search/beam.py")
    # One test file gone, one named on the map gone: both found.
    files = {"tests/test_decode_search_beam.py", "tests/test_serve_models.py"}
    assert untested({"decode/search/beam.py", "decode/text/job.py", "serve/pairs.py"},
                    {"serve/pairs.py": ["tests/test_serve_models.py", "tests/test_gone.py"]},
                    files) == (["decode/text/job.py"], ["serve/pairs.py: tests/test_gone.py"])


def test_every_module_has_its_own_test_file_or_names_existing_ones_on_the_map():
    text = MAP.read_text(encoding="utf-8")
    lines = module_lines(text)
    named = named_tests(text)
    malformed = sorted(path for path, line in lines.items()
                       if "Tested by" in line and path not in named)
    assert malformed == [], "a 'Tested by' that does not end its line as ' Tested by tests/x.py.'"
    missing, gone = untested(source_modules(), named, existing_test_files())
    assert missing == [], ("modules without tests/test_<layer>_<module>.py and without "
                           "' Tested by tests/....py.' on their line of ARCHITECTURE.md")
    assert gone == [], "ARCHITECTURE.md names test files that do not exist"


MODEL_MAY_IMPORT = ("torch", "transformer_nmt.config", "transformer_nmt.model")
"""What the paper's model (model/) is built of besides Python's standard library: torch,
its configuration, and itself."""


def imported_modules(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_model_imports_only_torch_its_config_and_itself():
    for path in sorted((PACKAGE_DIR / "model").glob("*.py")):
        text = path.read_text()
        foreign = {name for name in imported_modules(ast.parse(text))
                   if name.split(".")[0] not in sys.stdlib_module_names
                   and not any(name == root or name.startswith(root + ".")
                               for root in MODEL_MAY_IMPORT)}
        assert not foreign, f"model/{path.name} imports {sorted(foreign)}"


def test_decoding_plugs_into_the_model_through_its_cache_protocol_alone():
    """The one interface between decoding and the model: model/cache.py's DecodingCache,
    which every cache a search decodes with implements, and the decoder's `cache` is."""
    import typing

    import torch

    from transformer_nmt.config import get_preset
    from transformer_nmt.decode.attention.kv_cache import step_cache
    from transformer_nmt.model.cache import DecodingCache
    from transformer_nmt.model.transformer import Transformer

    model = Transformer(get_preset("tiny").model, 32).eval()
    hints = typing.get_type_hints(Transformer.decode)
    assert hints["cache"] == DecodingCache | None
    kept, _ = step_cache(model, True, 8)
    probed, _ = step_cache(model, True, 8, probe_layer=0)
    unkept, _ = step_cache(model, False, 8, probe_layer=0)
    for cache in (model.new_cache(), kept, probed, unkept):
        assert isinstance(cache, DecodingCache), type(cache)
    src, tgt = torch.tensor([[5, 6, 2]]), torch.tensor([[1]])
    with torch.inference_mode():  # each of them decodes a step
        for cache in (kept, probed, unkept):
            assert model.decode(tgt, model.encode(src), cache).logits.shape == (1, 1, 32)


def test_the_model_checks_no_layers_type():
    """Decoding's own layers plug in where the model says (its `projector`), not where
    the model tells them apart by type."""
    for path in sorted((PACKAGE_DIR / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(part, ast.Call) and getattr(part.func, "id", "") == "type"
                    for part in (node.left, *node.comparators)):
                raise AssertionError(f"model/{path.name}:{node.lineno} compares a type")


def test_no_private_method_of_the_model_is_overridden_outside_it():
    """What plugs into the model does so through its public interface: a class outside
    model/ that subclasses one of the model's overrides none of its private methods."""
    private = {}  # model class name -> its private (not dunder) methods
    for path in (PACKAGE_DIR / "model").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                private[node.name] = {item.name for item in node.body
                                      if isinstance(item, ast.FunctionDef)
                                      and item.name.startswith("_")
                                      and not item.name.endswith("__")}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.parent.name == "model":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {getattr(base, "id", getattr(base, "attr", "")) for base in node.bases}
            hooks = set().union(*(private.get(base, set()) for base in bases))
            overridden = sorted(item.name for item in node.body
                                if isinstance(item, ast.FunctionDef) and item.name in hooks)
            assert not overridden, (f"{path.relative_to(PACKAGE_DIR)}: {node.name} "
                                    f"overrides the model's private {overridden}")


NAMED_MODULE = re.compile(r"\btransformer_nmt(?:\.\w+)+")
NAMED_FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")
FILE_SUFFIXES = ("json", "jsonl", "txt", "pt", "md")
"""Endings of `transformer_nmt.X` that name a file (an export's transformer_nmt.json), not
a module."""
PLACES = (PACKAGE_DIR, ROOT / "src", ROOT, ROOT / "tests", *sorted(
    path for path in PACKAGE_DIR.rglob("*") if path.is_dir() and path.name != "__pycache__"))
"""Where a `path/to/file.py` that a comment names may be: relative to the package, to src/,
to the repository, or (a bare file name) beside the module that names it or in another
package."""


def prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring (triple-quoted string) of `text`."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT or (
                token.type == tokenize.STRING
                and token.string.lstrip("rbfuRBFU").startswith(('"' * 3, "'" * 3))):
            found.append((token.start[0], token.string))
    return found


def module_paths() -> dict[str, Path]:
    """{dotted module name: its file} of every module of the package."""
    paths = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return paths


@lru_cache(maxsize=None)
def top_level_names(path: Path) -> frozenset[str]:
    """What module `path` defines or imports at its top level; a package's __init__ also
    the names it loads on first use (string keys of its tables)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    if path.name == "__init__.py":
        names.update(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str))
    return frozenset(names)


def stale_names(text: str, modules: dict[str, Path]) -> list[str]:
    """The `transformer_nmt.x.y` names in `text` whose module does not exist or does not
    define the name after it, and the `path/to/file.py` names of no file."""
    stale = []
    for match in NAMED_MODULE.finditer(text):
        parts = match.group(0).split(".")
        if parts[-1] in FILE_SUFFIXES:
            continue
        cut = max(cut for cut in range(1, len(parts) + 1) if ".".join(parts[:cut]) in modules)
        if cut < len(parts) and parts[cut] not in top_level_names(modules[".".join(parts[:cut])]):
            stale.append(match.group(0))
    stale += [name for name in NAMED_FILE.findall(text)
              if not any((place / name).exists() for place in PLACES)]
    return stale


def test_the_name_checker_finds_modules_names_and_files_that_do_not_exist():
    modules = module_paths()
    assert stale_names("see transformer_nmt.decode.search.step.best_possible_scores, "
                       "transformer_nmt.decode.attention.probe.ATTENTION_LAYER and "
                       "decode/search/beam.py; beam.py; its transformer_nmt.json", modules) == []
    assert stale_names("transformer_nmt.decode.search.searches.ATTENTION_LAYER, "
                       "transformer_nmt.decode.gone.thing, transformer_nmt.gone, "
                       "decode/gone.py and gone_too.py", modules) == [
        "transformer_nmt.decode.search.searches.ATTENTION_LAYER",
        "transformer_nmt.decode.gone.thing", "transformer_nmt.gone", "decode/gone.py",
        "gone_too.py"]


def test_every_module_and_file_a_comment_or_docstring_names_exists():
    modules = module_paths()
    stale = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in sorted(PACKAGE_DIR.rglob("*.py"))
             for line, text in prose(path.read_text(encoding="utf-8"))
             for name in stale_names(text, modules)]
    assert stale == [], "names of modules or files that no longer exist (renamed? moved?)"
