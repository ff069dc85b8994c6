"""Command-line flags derived from the fields of a settings dataclass, so that a setting is
declared once, in its dataclass, and its flag, type, default, choices and help follow.

A field `max_len_a: float = setting(1.0, metavar="A")` with the docstring "An output has
at most ..." becomes `--max-len-a A`, a float defaulting to 1.0, its help the docstring
with "(default: 1.0)" added; a `Literal` field gets its choices, a bool field is a switch,
a tuple field a repeatable flag (a tuple of a `Literal`'s values with its choices). The
flag's dest is its name without dashes, as `rerunnable_command` needs.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any, Iterable

from transformer_nmt.fields import choices, field_docs, field_types, unwrap_optional

Container = argparse.ArgumentParser | argparse._ArgumentGroup


def flag_of(field: dataclasses.Field) -> str:
    """The command-line flag of `field`: declared in its metadata, else --FIELD-NAME."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def dest_of(field: dataclasses.Field) -> str:
    """Where argparse keeps the value of `field`'s flag."""
    return flag_of(field)[2:].replace("-", "_")


def chosen_fields(cls: type, names: Iterable[str] | None = None,
                  exclude: Iterable[str] = ()) -> list[dataclasses.Field]:
    """The fields of dataclass `cls` named in `names` (default: all) and not in
    `exclude`, in declaration order."""
    wanted = None if names is None else set(names)
    return [field for field in dataclasses.fields(cls)
            if (wanted is None or field.name in wanted) and field.name not in set(exclude)]


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _help(cls: type, field: dataclasses.Field, note: str | None) -> str:
    """The field's docstring as help: % escaped for argparse, a capitalised first word
    lowered and the closing full stop dropped, as other help reads, and the default added
    where it says something (not None, off or empty)."""
    text = field_docs(cls).get(field.name, "").replace("%", "%%").removesuffix(".")
    first = text.split(" ", 1)[0].rstrip(":;,")
    if first.isalpha() and first[1:].islower():
        text = text[0].lower() + text[1:]
    default = _default(field)
    shown = not (default is dataclasses.MISSING or default is None or default is False
                 or default in ("", ()))
    return f"{text} ({note}: {default})" if note and shown else text


def _argument(field: dataclasses.Field, kind: Any, default: Any) -> dict[str, Any]:
    """add_argument's keywords for a field of type `kind` whose flag defaults to `default`."""
    kind, _ = unwrap_optional(kind)
    listed = choices(kind)
    metavar = field.metadata.get("metavar")
    if kind is bool:
        action = argparse.BooleanOptionalAction if default is True else "store_true"
        return {"action": action, "default": default}
    if typing.get_origin(kind) is tuple:
        # A tuple of a Literal's values: each value given is one of its choices.
        return {"action": "append", "default": [] if default is None else list(default),
                "metavar": metavar, "choices": choices(typing.get_args(kind)[0])}
    if listed is not None:
        return {"choices": listed, "type": type(listed[0]), "default": default}
    if field.metadata.get("parse"):
        kind = str  # read later by the field's own parser, which names the field
    elif metavar is None and kind in (int, float):
        metavar = "N" if kind is int else "X"
    return {"type": kind if kind in (int, float, str, Path) else str, "default": default,
            "metavar": metavar}


def add_fields(container: Container, cls: type, names: Iterable[str] | None = None, *,
               exclude: Iterable[str] = (), groups: dict[Any, Container] | None = None,
               group_by: str = "group", unset: bool = False,
               note: str | None = "default") -> None:
    """Add a flag to `container` for each chosen field of dataclass `cls` (see
    `chosen_fields`); a field goes to the group in `groups` that its metadata's
    `group_by` mark names (no mark: the key None), else to `container`.

    unset: every flag defaults to None (False for a switch, [] for a repeatable one), so
    that only what was given overrides another source (a preset, the environment);
    note: the word before the field's default in the help (None: no default shown)."""
    kinds = field_types(cls)
    for field in chosen_fields(cls, names, exclude):
        default = _default(field)
        keywords = _argument(field, kinds[field.name], None if unset else default)
        if unset and keywords.get("action") == "store_true":
            keywords["default"] = None
        if default is dataclasses.MISSING:
            keywords.update(required=True, default=None)
        target = (groups or {}).get(field.metadata.get(group_by), container)
        target.add_argument(flag_of(field), dest=dest_of(field),
                            help=_help(cls, field, note), **keywords)


def field_values(args: argparse.Namespace, cls: type, names: Iterable[str] | None = None, *,
                 exclude: Iterable[str] = (), given_only: bool = False) -> dict[str, Any]:
    """{field name: value} of the chosen fields of `cls` (see `chosen_fields`) as `args`
    holds them, a repeatable flag's list as a tuple; given_only leaves out the flags
    that were not given (None, or an empty list)."""
    values = {}
    for field in chosen_fields(cls, names, exclude):
        value = getattr(args, dest_of(field))
        if isinstance(value, list):
            value = tuple(value)
        if given_only and value in (None, ()):
            continue
        values[field.name] = value
    return values
