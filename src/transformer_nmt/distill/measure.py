"""Stage 4 of `nmt distill`: teacher and student measured alike on this machine: size,
BLEU and chrF on the test split, sentences per second greedy and with beam search, and
peak memory.

Each model is measured in a fresh process of its own, so that its peak resident memory is
its own (the operating system's high-water mark only ever rises within a process) and
neither model's threads or caches warm the other's run.
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Sequence

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import LineWriter
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.evaluate import read_text, score
from transformer_nmt.model_file import build_model, model_preset, read_model_file

COLUMNS = (("parameters", "params", "{:,}"), ("megabytes", "MB", "{:.1f}"),
           ("bleu", "BLEU", "{:.1f}"), ("chrf", "chrF", "{:.1f}"),
           ("greedy_bleu", "greedy BLEU", "{:.1f}"),
           ("greedy_sentences_per_second", "greedy sent/s", "{:.1f}"),
           ("beam_sentences_per_second", "beam sent/s", "{:.1f}"),
           ("peak_memory_mb", "peak MB", "{:.0f}"))
"""The report's columns: key, heading, format. BLEU and chrF are beam search's."""
WARM_UP_LINES = 16


def model_size(paths: Sequence[Path]) -> dict[str, Any]:
    """Parameters (each shared tensor once) and file size of a model or an ensemble."""
    parameters = 0
    presets = []
    for path in paths:
        payload = read_model_file(path)
        parameters += sum(p.numel() for p in build_model(payload, path).parameters())
        presets.append(model_preset(payload)[0] or "custom")
    return {"parameters": parameters, "presets": presets,
            "megabytes": sum(Path(path).stat().st_size for path in paths) / 1e6}


def _peak_memory_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux counts kibibytes, macOS bytes.
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def measure_here(models: Sequence[str], sources: Path, references: Path, tgt_lang: str,
                 beam: int, device: str | None, hypotheses: Path) -> dict[str, Any]:
    """Translate `sources` greedily and with beam `beam`, timed (the model's loading
    not counted), score both against `references`, and write the beam translations to
    `hypotheses`; with this process's peak memory."""
    lines, refs = read_text(sources), read_text(references)
    result: dict[str, Any] = {"sentences": len(lines), "beam": beam}
    for name, decode in (("greedy", DecodeConfig(beam=1)), ("beam", DecodeConfig(beam=beam))):
        translator = Translator.from_files(list(models), TranslatorOptions(decode=decode,
                                                                           device=device))
        # One untimed pass over a few lines: the first batches pay for one-time work
        # (threads, kernels, weight layouts) that a running translator does not.
        list(translator.translate(lines[:WARM_UP_LINES]))
        started = time.perf_counter()
        found = list(translator.translate(lines))
        seconds = time.perf_counter() - started
        scores = score(found, refs, tgt_lang)
        result[f"{name}_sentences_per_second"] = len(lines) / max(seconds, 1e-9)
        result[f"{name}_bleu"], result[f"{name}_chrf"] = scores["bleu"], scores["chrf"]
        result["precision"] = translator.options.precision
        if name == "beam":
            with LineWriter(hypotheses) as writer:
                writer.write_lines(found)
    result["bleu"], result["chrf"] = result["beam_bleu"], result["beam_chrf"]
    result["peak_memory_mb"] = _peak_memory_mb()
    return result


def measure(models: Sequence[Path], sources: Path, references: Path, tgt_lang: str,
            beam: int, device: str | None, hypotheses: Path) -> dict[str, Any]:
    """`measure_here` in a fresh process, with the model's size and parameters added."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            result = pool.submit(measure_here, [str(m) for m in models], sources, references,
                                 tgt_lang, beam, device, hypotheses).result()
        except BrokenProcessPool:
            raise UserError(f"measuring {' + '.join(map(str, models))}: its process died "
                            "(out of memory?); run the command again to retry") from None
    return {"models": [str(m) for m in models], **model_size(models), **result}


def format_report(rows: dict[str, dict[str, Any]]) -> str:
    """The report's table: one row per model (teacher, student), one column per measure."""
    table = [["", *(heading for _, heading, _ in COLUMNS)]]
    for label, row in rows.items():
        table.append([label, *(form.format(row[key]) for key, _, form in COLUMNS)])
    widths = [max(len(cells[i]) for cells in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.rjust(width) if i else cell.ljust(width)
                               for i, (cell, width) in enumerate(zip(cells, widths)))
                     for cells in table)
