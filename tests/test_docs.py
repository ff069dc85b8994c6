"""The README and the pages of docs/ stay true to the project: every relative link leads to
a file that exists, and every `nmt` command in their code blocks names a real subcommand
and only options that subcommand has (as `nmt SUBCOMMAND --help` lists them). A page moved
or renamed, a flag renamed or a typo in an example fails here, naming the page and line."""

from __future__ import annotations

import argparse
import re
from functools import lru_cache
from pathlib import Path

from transformer_nmt.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
EXTERNAL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # http:, https:, mailto:, ...
NMT_LINE = re.compile(r"^\s*(?:\$ )?(?:\.venv/bin/)?nmt\s+(.*)$")
ENDS_COMMAND = ("|", "&&", ";", ">", "#")


def page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def prose_lines(page: Path):
    """(line number, line) of every line of `page` outside fenced code blocks, with its
    inline code spans removed."""
    inside = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            yield number, INLINE_CODE.sub("", line)


def code_lines(page: Path):
    """(line number, line) of every line inside a fenced code block of `page`; a line that
    ends in a backslash is joined with the next ones and numbered as the first."""
    inside, pending, start = False, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def nmt_command(line: str) -> tuple[str, list[str]] | None:
    """(subcommand, its --flags) of a shell line that runs `nmt`, else None. The command
    ends at a pipe, `&&`, `;`, a redirection or a comment; `--flag=value` counts as
    `--flag`."""
    match = NMT_LINE.match(line)
    if not match:
        return None
    words = []
    for word in match.group(1).split():
        if word.startswith(ENDS_COMMAND) or word == "--":
            break
        words.append(word)
    if not words:
        return "", []
    return words[0], [word.split("=", 1)[0] for word in words[1:] if word.startswith("--")]


@lru_cache(maxsize=1)
def subcommand_options() -> dict[str, set[str]]:
    """{subcommand: every option string its parser takes}, from `nmt`'s own parser."""
    parser = build_parser()
    subparsers = next(action for action in parser._actions
                      if isinstance(action, argparse._SubParsersAction))
    return {name: {option for action in subparser._actions for option in action.option_strings}
            for name, subparser in subparsers.choices.items()}


def test_the_command_reader_finds_subcommand_and_flags():
    assert nmt_command("nmt translate --model m.pt --beam=4 --input a.en | head  # --nope") == (
        "translate", ["--model", "--beam", "--input"])
    assert nmt_command("  $ nmt serve --model m.pt > log 2>&1") == ("serve", ["--model"])
    assert nmt_command(".venv/bin/nmt quickstart") == ("quickstart", [])
    assert nmt_command("echo hi | nmt translate --model m.pt") is None
    assert nmt_command("nmtx --model m.pt") is None


def test_the_pages_are_found():
    assert (ROOT / "README.md") in PAGES and len(PAGES) > 1, PAGES


def test_every_relative_link_leads_to_a_file_that_exists():
    broken = []
    for page in PAGES:
        for number, line in prose_lines(page):
            for target in LINK.findall(line):
                path = target.split("#", 1)[0]
                if not path or EXTERNAL.match(path):
                    continue
                if not (page.parent / path).exists():
                    broken.append(f"{page_name(page)}:{number}: {target} does not exist")
    assert broken == [], "\n".join(broken)


def test_every_nmt_command_in_a_code_block_names_a_real_subcommand_and_its_flags():
    options = subcommand_options()
    wrong, checked = [], 0
    for page in PAGES:
        for number, line in code_lines(page):
            command = nmt_command(line)
            if command is None:
                continue
            checked += 1
            subcommand, flags = command
            where = f"{page_name(page)}:{number}"
            if subcommand not in options:
                wrong.append(f"{where}: `nmt {subcommand}` is not a subcommand of nmt")
                continue
            for flag in flags:
                if flag not in options[subcommand]:
                    wrong.append(f"{where}: `nmt {subcommand}` has no option {flag}")
    assert checked > 0, "no nmt command found in the code blocks of README.md and docs/"
    assert wrong == [], "\n".join(wrong)
