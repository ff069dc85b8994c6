"""HTML files (.html), read by lxml's HTML parser: every block element (a paragraph,
heading, list item, table cell, title) is a paragraph, whose runs are its text and the
text of the inline elements inside it (<b>, <a>, <span>, ...); code, scripts, styles and
elements marked translate="no" are kept as they are. The tree is written back by lxml:
elements, attributes and entities mean what they meant, though quoting and entity
spelling may be lxml's."""

from __future__ import annotations

import re

import lxml.html
from lxml import etree

from transformer_nmt.documents.plain import BadText
from transformer_nmt.documents.runs import Run
from transformer_nmt.documents.trees import MixedContent, mixed_content_runs

INLINE = {"a", "abbr", "b", "bdi", "bdo", "big", "br", "cite", "data", "del", "dfn", "em",
          "font", "i", "img", "ins", "label", "mark", "q", "s", "small", "span", "strong",
          "sub", "sup", "time", "tt", "u", "wbr"}
"""Elements inside a sentence: their text is translated with the text around them."""
KEPT = {"script", "style", "code", "pre", "kbd", "samp", "var", "textarea", "template",
        "svg", "math"}
"""Elements whose text is code or data, kept as written."""
_WHOLE_DOCUMENT = re.compile(r"<\s*(!doctype|html|body)\b", re.IGNORECASE)


HTML_TEXT = MixedContent(lambda element: element.tag not in INLINE,
                         lambda element: element.tag in KEPT or element.get("translate") == "no",
                         frozenset({"br"}))


class Html:
    """An HTML document or fragment as lxml's tree."""

    def __init__(self, text: str) -> None:
        self.whole = _WHOLE_DOCUMENT.search(text) is not None
        # Bytes, so that an XML declaration naming the encoding is allowed.
        parser = lxml.html.HTMLParser(encoding="utf-8")
        try:
            self.root = lxml.html.document_fromstring(text.encode("utf-8"), parser=parser) \
                if text.strip() else None
        except (etree.ParserError, ValueError) as error:
            raise BadText(f"it is not HTML lxml can read ({error})") from None

    def paragraphs(self) -> list[list[Run]]:
        if self.root is None:
            return []
        return mixed_content_runs(self.root, HTML_TEXT)

    def to_text(self) -> str:
        if self.root is None:
            return ""
        if self.whole:
            doctype = self.root.getroottree().docinfo.doctype
            return (doctype + "\n" if doctype else "") + lxml.html.tostring(
                self.root, encoding="unicode", method="html")
        # A fragment: lxml wrapped it in <html><body>, which it did not have.
        body = self.root.find("body")
        if body is None:
            return lxml.html.tostring(self.root, encoding="unicode", method="html")
        return (body.text or "") + "".join(
            lxml.html.tostring(child, encoding="unicode", method="html") for child in body)
