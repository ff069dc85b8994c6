"""The runs of paragraphs in an lxml tree, for the two ways XML holds text: in dedicated
text elements (Office Open XML's <w:t> and <a:t>), or as mixed content, text and tails
around inline elements (OpenDocument's <text:p><text:span>, HTML's <p><b>)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lxml import etree

from transformer_nmt.documents.runs import Run, spaced

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
Element = etree._Element


def text_element_runs(root: Element, text_tags: set[str], paragraph_tags: set[str],
                      space_tags: set[str]) -> list[list[Run]]:
    """One list of runs per paragraph element, in document order: each text element
    (`text_tags`) is a run of the nearest paragraph (`paragraph_tags`) above it; a tab or
    break (`space_tags`) parts the words on either side."""
    paragraphs: dict[Element, list[Run]] = {}
    for element in root.iter(*text_tags, *space_tags):
        paragraph = next((above for above in element.iterancestors(*paragraph_tags)), None)
        if paragraph is None:
            continue
        runs = paragraphs.setdefault(paragraph, [])
        if element.tag not in space_tags:
            runs.append(_text_run(element))
        elif runs:
            runs[-1] = spaced(runs[-1])
    return list(paragraphs.values())


def _text_run(element: Element) -> Run:
    def set_text(text: str) -> None:
        element.text = text
        if text != text.strip():  # Word drops edge spaces unless told to keep them
            element.set(XML_SPACE, "preserve")
    return Run(lambda: element.text or "", set_text)


@dataclass(frozen=True)
class MixedContent:
    """What a vocabulary's elements are to its text."""

    is_paragraph: Callable[[Element], bool]
    is_kept: Callable[[Element], bool]
    """Code or data: neither entered nor translated."""
    space_tags: frozenset[str] = frozenset()
    """Empty elements that part words: tabs, line breaks."""


def mixed_content_runs(root: Element, kinds: MixedContent) -> list[list[Run]]:
    """One list of runs per paragraph element, in document order: its text, and the text
    and tails of the inline elements inside it (a paragraph inside it is one of its own,
    whose tail is the outer one's again)."""
    found = []
    for element in root.iter():
        if isinstance(element.tag, str) and kinds.is_paragraph(element) \
                and not kinds.is_kept(element) \
                and not any(kinds.is_kept(above) for above in element.iterancestors()):
            runs: list[Run] = []
            _add_slot(runs, element, "text")
            _inline_runs(element, kinds, runs)
            found.append(runs)
    return found


def _inline_runs(element: Element, kinds: MixedContent, runs: list[Run]) -> None:
    for child in element:
        is_element = isinstance(child.tag, str)
        if is_element and child.tag in kinds.space_tags and runs:
            runs[-1] = spaced(runs[-1])
        elif is_element and not kinds.is_paragraph(child) and not kinds.is_kept(child):
            _add_slot(runs, child, "text")
            _inline_runs(child, kinds, runs)
        _add_slot(runs, child, "tail")


def _add_slot(runs: list[Run], element: Element, attribute: str) -> None:
    """The element's text or tail as a run, where it has one (whitespace included: words
    carry their own spaces after translation)."""
    if getattr(element, attribute):
        runs.append(Run(lambda: getattr(element, attribute) or "",
                        lambda text: setattr(element, attribute, text)))
