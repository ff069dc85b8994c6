"""The runs of paragraphs in an lxml tree, for the two ways XML holds text: in dedicated
text elements (Office Open XML's <w:t> and <a:t>), or as mixed content, text and tails
around inline elements (OpenDocument's <text:p><text:span>, HTML's <p><b>)."""

from __future__ import annotations

from typing import Callable

from lxml import etree

from transformer_nmt.documents.runs import Run

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
Element = etree._Element


def text_element_runs(root: Element, text_tags: set[str],
                      paragraph_tags: set[str]) -> list[list[Run]]:
    """One list of runs per paragraph element, in document order: each text element
    (`text_tags`) is a run of the nearest paragraph (`paragraph_tags`) above it."""
    paragraphs: dict[Element, list[Run]] = {}
    for element in root.iter(*text_tags):
        paragraph = next((above for above in element.iterancestors(*paragraph_tags)), None)
        if paragraph is not None:
            paragraphs.setdefault(paragraph, []).append(_text_run(element))
    return list(paragraphs.values())


def _text_run(element: Element) -> Run:
    def set_text(text: str) -> None:
        element.text = text
        if text != text.strip():  # Word drops edge spaces unless told to keep them
            element.set(XML_SPACE, "preserve")
    return Run(lambda: element.text or "", set_text)


def mixed_content_runs(root: Element, is_paragraph: Callable[[Element], bool],
                       is_kept: Callable[[Element], bool]) -> list[list[Run]]:
    """One list of runs per paragraph element, in document order: its text, and the text
    and tails of the inline elements inside it (a paragraph inside it is one of its own,
    whose tail is the outer one's again). Elements `is_kept` says are code or data are
    neither entered nor translated."""
    found = []
    for element in root.iter():
        if isinstance(element.tag, str) and is_paragraph(element) \
                and not any(is_kept(above) for above in element.iterancestors()) \
                and not is_kept(element):
            runs = [_slot(element, "text")]
            _inline_runs(element, is_paragraph, is_kept, runs)
            found.append([run for run in runs if run is not None])
    return found


def _inline_runs(element: Element, is_paragraph: Callable[[Element], bool],
                 is_kept: Callable[[Element], bool], runs: list[Run | None]) -> None:
    for child in element:
        inline = isinstance(child.tag, str) and not is_paragraph(child) and not is_kept(child)
        if inline:
            runs.append(_slot(child, "text"))
            _inline_runs(child, is_paragraph, is_kept, runs)
        runs.append(_slot(child, "tail"))


def _slot(element: Element, attribute: str) -> Run | None:
    """The element's text or tail as a run (whitespace included: words carry their own
    spaces after translation); None where there is none."""
    if not getattr(element, attribute):
        return None
    return Run(lambda: getattr(element, attribute) or "",
               lambda text: setattr(element, attribute, text))
