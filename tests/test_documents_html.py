"""HTML (documents/html.py): tags, attributes and code kept, inline elements translated in
context with their paragraph, and a fragment left a fragment."""

from __future__ import annotations

from document_fixtures import shout
from transformer_nmt.documents.formats import translate_document


def test_html_keeps_tags_attributes_code_and_translates_inline_elements_in_context():
    source = (b'<!DOCTYPE html>\n<html><head><title>My page</title></head><body>'
              b'<h1 class="t">A title</h1><p>The <b>big</b> house &amp; '
              b'<a href="x.html">a link</a></p><pre>keep me</pre>'
              b'<p translate="no">not me</p><ul><li>item one</li></ul>'
              b'<img src="a.png" alt="pic"></body></html>')
    translated = translate_document(source, "page.html", shout).decode()
    assert translated.startswith("<!DOCTYPE html>")
    for kept in ('<h1 class="t">A TITLE</h1>', "<p>THE <b>BIG</b> HOUSE &amp; "
                 '<a href="x.html">A LINK</a></p>', "<pre>keep me</pre>",
                 '<p translate="no">not me</p>', "<li>ITEM ONE</li>", "<title>MY PAGE</title>",
                 '<img src="a.png" alt="pic">'):
        assert kept in translated


def test_an_html_fragment_stays_a_fragment():
    assert translate_document(b"<p>The <i>small</i> dog.</p>\n<p>Two</p>", "a.htm",
                              shout).decode() == "<p>THE <i>SMALL</i> DOG.</p>\n<p>TWO</p>"
