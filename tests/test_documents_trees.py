"""The runs of paragraphs in an XML tree (documents/trees.py): dedicated text elements,
each a run of the paragraph above it, and mixed content, text and tails around inline
elements; code left alone, tabs and breaks parting the words on either side."""

from __future__ import annotations

from lxml import etree

from transformer_nmt.documents.trees import (XML_SPACE, MixedContent, mixed_content_runs,
                                             text_element_runs)


def texts(paragraphs) -> list[list[str]]:
    return [[run.get() for run in runs] for runs in paragraphs]


def test_text_elements_are_runs_of_the_paragraph_above_them():
    root = etree.fromstring("<doc><p><r><t>The </t><t>big</t></r><tab/><t>house</t></p>"
                            "<t>outside any paragraph</t><p><t>Two</t></p></doc>")
    paragraphs = text_element_runs(root, {"t"}, {"p"}, {"tab"})
    assert texts(paragraphs) == [["The ", "big ", "house"], ["Two"]]
    first, spaced, _ = paragraphs[0]
    spaced.set("GROSS  ")  # a tab follows: the translation's trailing spaces go
    first.set(" DAS ")  # edge spaces kept, as Word keeps them only when told to
    t1, t2 = list(root.iter("t"))[:2]
    assert (t2.text, t1.text, t1.get(XML_SPACE)) == ("GROSS", " DAS ", "preserve")


def test_mixed_content_runs_are_text_and_tails_code_kept_and_nested_paragraphs_their_own():
    root = etree.fromstring("<body><p>The <b>big</b> house<br/>now <code>x = 1</code> end"
                            "<p>inner</p> after</p><pre>kept <b>here</b></pre></body>")
    kinds = MixedContent(is_paragraph=lambda element: element.tag in ("p", "pre"),
                         is_kept=lambda element: element.tag in ("pre", "code"),
                         space_tags=frozenset({"br"}))
    paragraphs = mixed_content_runs(root, kinds)
    assert texts(paragraphs) == [["The ", "big", " house ", "now ", " end", " after"],
                                 ["inner"]]
    for run in paragraphs[0]:
        run.set(run.get().upper())
    assert etree.tostring(root).decode() == (
        "<body><p>THE <b>BIG</b> HOUSE<br/>NOW <code>x = 1</code> END<p>inner</p> AFTER</p>"
        "<pre>kept <b>here</b></pre></body>")
