"""Markdown (documents/markdown.py): only the text of its text tokens changes; markup,
links' targets, code and images stay as written."""

from __future__ import annotations

from document_fixtures import shout
from transformer_nmt.documents.formats import translate_document


def test_markdown_changes_only_the_text_of_its_text_tokens():
    source = ("# Title *here*\n\nSome **bold** text over\ntwo lines with [a link](http://x.y"
              ' "t") and `code`.\n\n- item one\n- item two\n\n| a | b |\n|---|---|\n'
              "| cell one | 42 |\n\n![alt text](img.png)\n\n```\ncode block\n```\n")
    assert translate_document(source.encode(), "a.md", shout).decode() == (
        "# TITLE *HERE*\n\nSOME **BOLD** TEXT OVER\nTWO LINES WITH [A LINK](http://x.y"
        ' "t") AND `code`.\n\n- ITEM ONE\n- ITEM TWO\n\n| A | B |\n|---|---|\n'
        "| CELL ONE | 42 |\n\n![alt text](img.png)\n\n```\ncode block\n```\n")
