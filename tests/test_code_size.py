"""Small files with one concern, and functions that fit on a screen: no module of
src/transformer_nmt over MAX_MODULE_LINES lines, no function (a method, a nested function,
an async one) over MAX_FUNCTION_LINES.

Sizes are measured with `ast`: a module's lines, and a function's from its `def` to its
last line (end_lineno - lineno + 1); a nested function counts in its own right and inside
its parent. What is over is named as path:line with its size, so that the failure says
where to split.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE_DIR = SRC / "transformer_nmt"

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60

def module_size(text: str) -> int:
    """The lines of a module's text."""
    return len(text.splitlines())


def long_functions(text: str, limit: int) -> list[tuple[int, str, int]]:
    """(line, name, lines) of every function in `text` longer than `limit` lines, nested
    ones included, in line order."""
    found = [(node.lineno, node.name, node.end_lineno - node.lineno + 1)
             for node in ast.walk(ast.parse(text))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted(entry for entry in found if entry[2] > limit)


def oversized(package_dir: Path = PACKAGE_DIR, root: Path = SRC
              ) -> tuple[list[str], list[str]]:
    """'path:1 has N lines' for each module over MAX_MODULE_LINES, and 'path:LINE name
    has N lines' for each function over MAX_FUNCTION_LINES."""
    modules, functions = [], []
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        size = module_size(text)
        if size > MAX_MODULE_LINES:
            modules.append(f"{relative}:1 has {size} lines")
        functions += [f"{relative}:{line} {name} has {size} lines"
                      for line, name, size in long_functions(text, MAX_FUNCTION_LINES)]
    return modules, functions


def test_the_measure_counts_nested_functions_on_their_own_and_in_their_parent():
    text = ("def outer():\n"
            "    a = 1\n"
            "    def inner():\n"
            "        b = 2\n"
            "        c = 3\n"
            "        return b + c\n"
            "    return inner\n"
            "\n"
            "\n"
            "async def short():\n"
            "    pass\n")
    assert long_functions(text, 3) == [(1, "outer", 7), (3, "inner", 4)]
    assert long_functions(text, 4) == [(1, "outer", 7)]
    assert long_functions(text, 7) == []
    assert module_size(text) == 11


def test_the_check_names_file_line_and_size(tmp_path):
    package = tmp_path / "transformer_nmt"
    package.mkdir()
    long_body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (package / "big.py").write_text("\n" * (MAX_MODULE_LINES - 1) + "def f():\n" + long_body,
                                     encoding="utf-8")
    (package / "fine.py").write_text("def g():\n    pass\n", encoding="utf-8")
    modules, functions = oversized(package, tmp_path)
    size = MAX_MODULE_LINES + MAX_FUNCTION_LINES
    assert modules == [f"transformer_nmt/big.py:1 has {size} lines"]
    assert functions == [f"transformer_nmt/big.py:{MAX_MODULE_LINES} f has "
                         f"{MAX_FUNCTION_LINES + 1} lines"]


def test_no_module_over_450_lines_and_no_function_over_60():
    modules, functions = oversized()
    assert modules == [], f"modules over {MAX_MODULE_LINES} lines: split them by concern"
    assert functions == [], (f"functions over {MAX_FUNCTION_LINES} lines: split them by "
                             "concern")



MAX_MODEL_LINES = 800
"""The network alone fits in a sitting's read: the model package's lines, all modules."""


def test_the_model_package_stays_readable_in_one_sitting():
    lines = sum(module_size(path.read_text(encoding="utf-8"))
                for path in (PACKAGE_DIR / "model").rglob("*.py"))
    assert lines <= MAX_MODEL_LINES, (
        f"src/transformer_nmt/model/ has {lines} lines (at most {MAX_MODEL_LINES}): move what "
        "is not the network (decoding's, training's) to the layer that uses it")
