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


@pytest.mark.parametrize("source, texts, translated", [
    ("abc \u202eevil\u202c def", ["abc ", "evil", " def"], "ABC \u202eEVIL\u202c DEF"),
    ("<p>\u2067x\u2069 \u200e</p>", ["x"], "<p>\u2067X\u2069 \u200e</p>"),
    ("<p>\u202e</p><b>\u200f \u2066</b>", [], "<p>\u202e</p><b>\u200f \u2066</b>"),
    ("\u061cone\u200etwo\u202a\u202bthree", ["one", "two", "three"],
     "\u061cONE\u200eTWO\u202a\u202bTHREE"),
])
def test_bidi_controls_are_kept_in_place_and_cut_the_text_around_them(source, texts,
                                                                     translated):
    """A model cannot translate them (none is in its vocabulary) and drops them; kept, an
    override keeps enclosing its translated text and is still closed after it."""
    markup = parse_html(source)
    assert markup.texts == texts
    assert markup.join(texts) == source
    assert markup.join([text.upper() for text in texts]) == translated


def test_a_bidi_control_written_as_an_entity_is_kept_as_the_character():
    markup = parse_html("<p>a&rlm; b</p>")
    assert markup.texts == ["a", " b"]
    assert markup.join(["x", " y"]) == "<p>x\u200f y</p>"


@pytest.mark.parametrize("source, texts, translated", [
    # A tag's name starts with an ASCII letter: the rest is text a browser shows.
    ("<p>x <1p> y</p>", ["x <1p> y"], "<p>X &lt;1P&gt; Y</p>"),
    ("a<\u202ep>b", ["a<", "p>b"], "A&lt;\u202eP&gt;B"),
    # After its first letter, a tag's name runs to whitespace, / or >: this is a tag.
    ("<p\u202e>x</p\u202e>", ["x"], "<p\u202e>X</p\u202e>"),
])
def test_what_html_reads_as_text_is_sent_for_translation_and_its_tags_kept(
        source, texts, translated):
    markup = parse_html(source)
    assert markup.texts == texts
    assert markup.join([text.upper() for text in texts]) == translated
