"""What a settings dataclass declares about each of its fields, read in one place.

A field's annotation is its type (a `Literal` lists its choices), its default is the
default everywhere, its docstring (the string under it, as fairseq2 keeps one per field)
is its help, and its metadata, given through `setting`, holds the rest: the command-line
flag when it is not the field's name, and marks that put it in a group (`marked`). From
these, `check_types` refuses a value of the wrong type, `parse_text` reads a value from
text (a `--set`, an environment variable), and the command line derives its flags
(cli/flags.py), so that adding a setting is one edit.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Callable, Literal

from transformer_nmt.errors import UserError

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def setting(default: Any = dataclasses.MISSING, *, flag: str | None = None,
            metavar: str | None = None, parse: Callable[[str], Any] | None = None,
            **marks: Any) -> Any:
    """A dataclass field with `default` and what is declared about it: `flag`, the
    command-line flag when it is not --FIELD-NAME; `metavar`, its placeholder in help;
    `parse`, how to read it from text when its type does not say (a duration); `marks`,
    the groups it belongs to (see `marked`)."""
    metadata = {"flag": flag, "metavar": metavar, "parse": parse, **marks}
    return dataclasses.field(default=default, metadata=metadata)


def marked(cls: type, mark: str, value: Any = True) -> frozenset[str]:
    """Names of the fields of dataclass `cls` whose metadata gives `mark` the `value`."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get(mark) == value)


def parse_duration(text: str) -> float:
    """Seconds in '90', '90s', '10m', '2h', '1h30m' or '1.5d'; UserError otherwise."""
    text = str(text).strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise UserError(f"cannot read duration {text!r}; write e.g. 3600, 90s, 10m, "
                            "2h or 1h30m") from None
        seconds = sum(float(number) * _SECONDS[unit] for number, unit in parts)
    if seconds < 0 or seconds != seconds:
        raise UserError(f"duration {text!r} must not be negative")
    return seconds


@cache
def field_types(cls: type) -> dict[str, Any]:
    """The annotation of every field of dataclass `cls`, evaluated; None where it names
    something its module imports for type checkers only (such a field is not checked)."""
    namespace = vars(sys.modules[cls.__module__])
    kinds = {}
    for field in dataclasses.fields(cls):
        try:
            kinds[field.name] = (eval(field.type, namespace) if isinstance(field.type, str)
                                 else field.type)
        except NameError:
            kinds[field.name] = None
    return kinds


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls`, on one line ('' where the
    source cannot be read, as in a frozen application)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for statement, following in zip(body, body[1:]):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[statement.target.id] = " ".join(following.value.value.split())
    return docs


def unwrap_optional(kind: Any) -> tuple[Any, bool]:
    """(the type inside `X | None`, True), or (`kind`, False) for any other type."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(inner) == 1 and len(typing.get_args(kind)) == 2:
            return inner[0], True
    return kind, False


def choices(kind: Any) -> tuple | None:
    """The values of a `Literal` type (inside `| None` too), else None."""
    kind, _ = unwrap_optional(kind)
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else None


def _describe(kind: Any) -> str:
    """What a value of `kind` must be, for an error message."""
    listed = choices(kind)
    if listed is not None:
        return f"one of {', '.join(map(repr, listed))}"
    return {int: "a whole number", float: "a number", bool: "one of False, True",
            str: "a string", Path: "a path"}.get(kind, f"a {getattr(kind, '__name__', kind)}")


def _fits(value: Any, kind: Any) -> bool:
    """Whether `value` is of type `kind` (ints count as floats; bools count as neither)."""
    if kind is None or kind is Any:
        return True
    kind, optional = unwrap_optional(kind)
    if value is None:
        return optional
    listed = choices(kind)
    if listed is not None:
        return any(value == choice and type(value) is type(choice) for choice in listed)
    origin = typing.get_origin(kind)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return isinstance(value, tuple) and all(_fits(element, item) for element in value)
    if origin is dict:
        return isinstance(value, dict)
    if kind is float:
        return type(value) in (int, float)
    if kind in (int, bool, str):
        return type(value) is kind
    if kind is Path:
        return isinstance(value, (str, Path))
    return isinstance(value, kind)


def check_types(config: Any) -> None:
    """UserError naming the first field of dataclass instance `config` whose value is not
    of its declared type: an int field refuses 8.0 and True, a Literal field anything
    but its choices."""
    for name, kind in field_types(type(config)).items():
        value = getattr(config, name)
        if not _fits(value, kind):
            raise UserError(f"{name} must be {_describe(unwrap_optional(kind)[0])}, "
                            f"not {value!r}")


def parse_text(cls: type, name: str, text: str) -> Any:
    """The value of field `name` of dataclass `cls` written as `text` (a --set, an
    environment variable); UserError naming the field when it cannot be read. A tuple of
    strings is written comma-separated; an optional field that is not a string is 'none'
    or empty for None (an optional string is always the text, so that an empty API key
    stays an error rather than no key)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    if field.metadata.get("parse"):
        return field.metadata["parse"](text)
    kind, optional = unwrap_optional(field_types(cls)[name])
    if optional and kind is not str and text.strip().lower() in ("", "none"):
        return None
    listed = choices(kind)
    try:
        if kind is bool or (listed is not None and isinstance(listed[0], bool)):
            if text.strip().lower() not in _TRUE + _FALSE:
                raise ValueError(text)
            return text.strip().lower() in _TRUE
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if typing.get_origin(kind) is tuple:
            return tuple(item.strip() for item in text.split(",") if item.strip())
        if kind is Path:
            return Path(text)
    except ValueError:
        written = {int: "an int", float: "a float", bool: "a bool"}.get(kind)
        raise UserError(f"{name} must be {written or _describe(kind)}, not {text!r}") from None
    return text
