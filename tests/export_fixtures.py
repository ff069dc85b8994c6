"""Helpers of the export tests: the sentences both decoders translate, and ours."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.manifest import text_path
from transformer_nmt.data.text import read_lines
from transformer_nmt.decode.translator import Translator, TranslatorOptions
from transformer_nmt.model_file import load_for_inference


def task_sentences(data: Path) -> list[str]:
    """The tiny task's unseen test sources and some it was trained on."""
    return (list(read_lines(text_path(data, "test", "en")))
            + list(read_lines(text_path(data, "train", "en")))[:16])


def our_tokens(model_path: Path, lines: list[str], decode: DecodeConfig) -> list[list[int]]:
    """Our best translation of each line, as token ids, decoded in fp32 on the CPU by the
    search alone: the runtimes compared with it have no guard against degenerate output."""
    translator = Translator(load_for_inference(model_path),
                            TranslatorOptions(decode=replace(decode, guard=False), device="cpu",
                                              workers=1, precision="fp32"))
    return [found[0].tokens for found in translator.translate_nbest(lines)]
