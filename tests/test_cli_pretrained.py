"""`nmt import` (cli/pretrained.py): its choices are the library's, so that neither
offers what the other lacks."""

from __future__ import annotations

from transformer_nmt.cli.pretrained import BPES as CLI_BPES
from transformer_nmt.cli.pretrained import SOURCES as CLI_SOURCES
from transformer_nmt.pretrained.fairseq import BPES
from transformer_nmt.pretrained.write import SOURCES


def test_the_cli_offers_the_bpes_the_library_knows():
    assert CLI_BPES == BPES


def test_the_cli_offers_the_sources_the_library_reads():
    assert CLI_SOURCES == SOURCES
