"""format=html: text nodes translated, markup kept (serve/html_text.py)."""

from __future__ import annotations

from transformer_nmt.serve.html_text import parse_html


def test_markup_is_kept_and_text_nodes_are_replaced():
    source = '<p class="intro">Hello &amp; <b>bold</b> world!</p><br/><!-- note -->'
    markup = parse_html(source)
    assert markup.texts == ["Hello & ", "bold", " world!"]
    assert markup.join(markup.texts) == source
    assert markup.join([t.upper() for t in markup.texts]) == \
        '<p class="intro">HELLO &amp; <b>BOLD</b> WORLD!</p><br/><!-- note -->'


def test_code_scripts_and_translate_no_are_not_translated():
    source = ('<script>if (a < b) run();</script><code>x = 1</code>'
              '<span translate="no">Brand</span><i>text</i>')
    markup = parse_html(source)
    assert markup.texts == ["text"]
    assert markup.join(["TEXT"]) == source.replace("<i>text</i>", "<i>TEXT</i>")


def test_translations_are_escaped_back_into_html():
    markup = parse_html("<p>a</p>")
    assert markup.join(["<b> & co"]) == "<p>&lt;b&gt; &amp; co</p>"


def test_plain_text_without_tags_is_one_node():
    markup = parse_html("Just text.")
    assert markup.texts == ["Just text."]
