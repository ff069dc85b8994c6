"""format=html: text nodes translated, markup kept (serve/html_text.py)."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("source, texts", [
    ("<![CDATA[x < y]]> a", [" a"]),
    ("<p>a<!-- note -- more --></p><!---->", ["a"]),
    ("<?xml version='1.0'?><?php echo 1 ?>a", ["a"]),
    ("<!DOCTYPE html><!doctype HTML PUBLIC '-//W3C//DTD HTML 4.01//EN'>a", ["a"]),
    ("<![if !IE]>a<![endif]>", ["a"]),
    ("<P CLASS=x>a</P ><BR/ ></ p>", ["a"]),
    ("<p>&nbsp;</p>&#160; <code>&lt;b&gt; &amp;&copy</code>", []),
    ("<p>one<p>two<li>three", ["one", "two", "three"]),
    ("a </> b", ["a ", " b"]),
    ("<script>if (a < b) {", []),
    ("<p>text <b", ["text "]),
    ('<p>text</p><div class="unfinished', ["text"]),
    ("<p>text</p><!-- unfinished", ["text"]),
])
def test_markup_that_is_not_translated_comes_back_byte_for_byte(source, texts):
    markup = parse_html(source)
    assert markup.texts == texts
    # The text nodes hold nothing that escaping changes: the markup around them is the
    # source's own, character for character.
    assert markup.join(texts) == source


def test_text_around_a_lone_angle_bracket_or_entity_is_one_node():
    markup = parse_html("<p>a < b &amp; c</p>")
    assert markup.texts == ["a < b & c"]
    assert markup.join(["x < y"]) == "<p>x &lt; y</p>"
