"""CTranslate2 as a same-machine reference for bench/translate_speed.py.

CTranslate2 (pip install ctranslate2) is the fastest CPU translator of the field, in C++.
This module hands it the very weights of one of our Transformers through the project's
own exporter (transformer_nmt.export.ctranslate2, `nmt export --to ctranslate2`), so that
both systems decode the same model on the same CPU in the same run. Not a project
dependency: the benchmark skips this reference when it is missing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import ctranslate2

# torch and the project only where weights are exported: a process that only translates
# with CTranslate2 should not carry torch's ~220 MB in its peak memory.
if TYPE_CHECKING:
    from transformer_nmt.data.vocab import Vocab
    from transformer_nmt.model.transformer import Transformer


def export(model: Transformer, vocab: Vocab, directory: Path) -> Path:
    """Write `model` as a float32 CTranslate2 model directory; returns it."""
    from transformer_nmt.export.ctranslate2 import write_ctranslate2
    from transformer_nmt.model_file import InferenceModel

    meta = {"model_config": dataclasses.asdict(model.cfg)}
    directory.mkdir(parents=True, exist_ok=True)
    write_ctranslate2(InferenceModel(model, vocab, Path("random-model.pt"), meta), directory)
    return directory


COMPUTE_TYPES = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16", "fp16": "float16"}


def load(directory: Path, precision: str, threads: int, workers: int = 1,
         device: str = "cpu") -> ctranslate2.Translator:
    """The exported model, converted on load to `precision` (CTranslate2's compute type of
    that name); `workers` batches decoded in parallel, each on threads // workers threads."""
    return ctranslate2.Translator(str(directory), device=device,
                                  compute_type=COMPUTE_TYPES[precision],
                                  inter_threads=workers,
                                  intra_threads=max(threads // workers, 1))


def translate(translator: ctranslate2.Translator, sources: list[list[str]], beam: int,
              length: int, asynchronous: bool = False) -> list:
    """Exactly `length` output pieces per sentence (EOS forbidden before, decoding stopped
    at it), with beam search of width `beam`, no length penalty; best hypothesis each.
    Sources end with "</s>" as ours do; the exported model appends it itself, so it is
    taken off here.
    asynchronous: return CTranslate2's pending results instead (`.result()` waits), so
    that several batches can be queued for its parallel workers."""
    sources = [pieces[:-1] if pieces and pieces[-1] == "</s>" else pieces for pieces in sources]
    results = translator.translate_batch(
        sources, beam_size=beam, max_batch_size=0, min_decoding_length=length,
        max_decoding_length=length, length_penalty=0.0, num_hypotheses=1,
        return_end_token=False, asynchronous=asynchronous)
    if asynchronous:
        return results
    return [result.hypotheses[0] for result in results]
