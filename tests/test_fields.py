"""What a settings dataclass declares about its fields (fields.py): marks that group them,
docstrings that are their help, types that refuse a wrong value, and text read as each
field's type (a --set, an environment variable)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.fields import (check_types, choices, field_docs, field_types, marked,
                                    parse_duration, parse_text, setting, unwrap_optional)


@dataclass(frozen=True)
class Knobs:
    """A made-up settings dataclass, as a newcomer would add one."""

    width: int = setting(3, flag="--wide", metavar="W", resume="free")
    """How wide,
    on two lines."""
    ratio: float = setting(0.5, resume="free")
    """How much."""
    mode: Literal["fast", "exact"] = "exact"
    """Which way."""
    loud: bool = False
    tags: tuple[str, ...] = ()
    """Labels."""
    name: str | None = None
    """A name."""
    limit: int | None = None
    """A cap."""
    out: Path = Path("out")
    """Where."""
    wait: float = setting(0.0, parse=parse_duration)
    """How long."""


@pytest.mark.parametrize("text, seconds", [
    ("90", 90), (90, 90), ("90s", 90), ("10m", 600), ("2h", 7200), ("1h30m", 5400),
    ("1.5d", 129600), (" 2H ", 7200), ("0", 0), ("1d2h3m4s", 93784), ("0.5", 0.5),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text, message", [
    ("", "cannot read duration ''"),
    ("x", "cannot read duration 'x'"),
    ("10q", "cannot read duration '10q'"),
    ("1h 30m", "cannot read duration '1h 30m'"),
    ("h", "cannot read duration 'h'"),
    ("-5", "duration '-5' must not be negative"),
    ("nan", "duration 'nan' "),
])
def test_unreadable_or_negative_durations_are_user_errors(text, message):
    with pytest.raises(UserError, match="^" + message):
        parse_duration(text)


def test_marks_group_fields_and_the_metadata_keeps_flag_and_metavar():
    assert marked(Knobs, "resume", "free") == {"width", "ratio"}
    assert marked(Knobs, "resume", "batch split") == frozenset()
    width = Knobs.__dataclass_fields__["width"]
    assert (width.default, width.metadata["flag"], width.metadata["metavar"]) == (3, "--wide",
                                                                                  "W")


def test_the_docstring_under_a_field_is_its_help_on_one_line():
    docs = field_docs(Knobs)
    assert docs["width"] == "How wide, on two lines."
    assert docs["mode"] == "Which way."
    assert "loud" not in docs  # no docstring under it


def test_types_are_evaluated_and_optionals_and_literals_unwrapped():
    kinds = field_types(Knobs)
    assert kinds["width"] is int and kinds["out"] is Path
    assert unwrap_optional(kinds["limit"]) == (int, True)
    assert unwrap_optional(kinds["width"]) == (int, False)
    assert choices(kinds["mode"]) == ("fast", "exact")
    assert choices(Literal["a"] | None) == ("a",) and choices(kinds["width"]) is None


def test_values_of_other_types_are_refused_by_field_name():
    check_types(Knobs(width=5, ratio=2, tags=("a",), limit=None, out="elsewhere"))
    for changes, message in [
            ({"width": 5.0}, "width must be a whole number, not 5.0"),
            ({"width": True}, "width must be a whole number, not True"),
            ({"ratio": True}, "ratio must be a number, not True"),
            ({"mode": "slow"}, "mode must be one of 'fast', 'exact', not 'slow'"),
            ({"loud": 1}, "loud must be one of False, True, not 1"),
            ({"tags": ("a", 2)}, r"tags must be a tuple, not \('a', 2\)"),
            ({"limit": "7"}, "limit must be a whole number, not '7'"),
            ({"out": 3}, "out must be a path, not 3")]:
        with pytest.raises(UserError, match="^" + message):
            check_types(Knobs(**changes))


def test_text_reads_as_each_fields_type():
    assert parse_text(Knobs, "width", "7") == 7
    assert parse_text(Knobs, "ratio", "0.25") == 0.25
    assert parse_text(Knobs, "loud", "Yes") is True and parse_text(Knobs, "loud", "off") is False
    assert parse_text(Knobs, "tags", "a, b,") == ("a", "b")
    assert parse_text(Knobs, "name", "") == ""  # an optional string is the text itself
    assert parse_text(Knobs, "limit", "none") is None and parse_text(Knobs, "limit", "4") == 4
    assert parse_text(Knobs, "out", "x/y") == Path("x/y")
    assert parse_text(Knobs, "wait", "1h30m") == 5400.0  # the field's own parser
    assert parse_text(Knobs, "mode", "fast") == "fast"
    for name, text, message in [("width", "7.5", "width must be an int, not '7.5'"),
                                ("ratio", "much", "ratio must be a float, not 'much'"),
                                ("loud", "maybe", "loud must be a bool, not 'maybe'")]:
        with pytest.raises(UserError, match="^" + message):
            parse_text(Knobs, name, text)
