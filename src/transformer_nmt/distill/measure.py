"""Stage 5 of `nmt distill`: teacher and student measured alike on this machine, as they
are served: size, BLEU and chrF on the test split, sentences per second greedy and with
beam search, and peak memory; then the comparison users care about, the teacher's beam
search against the student's greedy one.

Both decode as `nmt translate` does on a CPU by default: on CTranslate2 in int8, with the
model's shortlist where it has one (the student's, from stage 4), PyTorch only where
CTranslate2 cannot (not installed, an ensemble of teachers), each row saying which. Every
search decodes the same lines in the same batches: neither model's speed comes from
larger batches than the other's.

Each model is measured in a fresh process of its own, so that its peak resident memory is
its own (the operating system's high-water mark only ever rises within a process) and
neither model's threads or caches warm the other's run. Those processes fork from a server
that has imported this module once, so that each starts without importing PyTorch and
CTranslate2 again; the server has run nothing, so no threads or caches come with the fork.
"""

from __future__ import annotations

import multiprocessing
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import LineWriter
from transformer_nmt.decode.device.policy import batch_size
from transformer_nmt.decode.device.threads import default_workers
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
TIMED_PASSES = 3
"""Timed passes over the test split per search, of which the median counts: a student's
greedy pass over a few hundred lines takes well under a second, where one pass's time
varied by a third."""


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


def served_options(beam: int) -> TranslatorOptions:
    """How the report decodes every model and search: as `nmt translate` serves a model on
    a CPU (CTranslate2 where it can, int8, the model's shortlist where it has one), but in
    the batches of beam `beam`'s default size, whichever the search, so that the teacher's
    beam search and the student's greedy one decode the same lines in the same batches.
    No confidence: nothing reads it, and it would cost a calibrated teacher a pass."""
    workers = default_workers("cpu")
    return TranslatorOptions(engine="auto", device="cpu", precision="int8", workers=workers,
                             batch_size=batch_size(DecodeConfig(beam=beam), workers),
                             confidence=False)


def measure_here(models: Sequence[str], sources: Path, references: Path, tgt_lang: str,
                 beam: int, base: TranslatorOptions, hypotheses: Path) -> dict[str, Any]:
    """Translate `sources` greedily and with beam `beam`, as `base` says, timed (the
    median of TIMED_PASSES passes, the model's loading not counted), score both against
    `references`, and write the beam translations to `hypotheses`; with the runtime that
    decoded, whether it used a shortlist, and this process's peak memory."""
    lines, refs = read_text(sources), read_text(references)
    result: dict[str, Any] = {"sentences": len(lines), "beam": beam}
    for name, decode in (("greedy", DecodeConfig(beam=1)), ("beam", DecodeConfig(beam=beam))):
        translator = Translator.from_files(list(models), replace(base, decode=decode))
        # One untimed pass over a few lines: the first batches pay for one-time work
        # (threads, kernels, weight layouts) that a running translator does not.
        list(translator.translate(lines[:WARM_UP_LINES]))
        times = []
        for _ in range(TIMED_PASSES):
            started = time.perf_counter()
            found = list(translator.translate(lines))
            times.append(time.perf_counter() - started)
        seconds = statistics.median(times)
        scores = score(found, refs, tgt_lang)
        result[f"{name}_sentences_per_second"] = len(lines) / max(seconds, 1e-9)
        result[f"{name}_bleu"], result[f"{name}_chrf"] = scores["bleu"], scores["chrf"]
        result["precision"] = translator.options.precision
        result["runtime"] = translator.runtime
        result["shortlist"] = bool(translator.ctranslate2 and translator.ctranslate2.use_vmap)
        result["batch_sentences"] = translator.options.batch_size
        if name == "beam":
            with LineWriter(hypotheses) as writer:
                writer.write_lines(found)
    result["bleu"], result["chrf"] = result["beam_bleu"], result["beam_chrf"]
    result["peak_memory_mb"] = _peak_memory_mb()
    return result


def _fresh_processes() -> multiprocessing.context.BaseContext:
    """Processes forked from multiprocessing's fork server, which imports this module when
    it starts (the first use in this process) and then only forks; spawned where there is
    no fork server (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def measure(models: Sequence[Path], sources: Path, references: Path, tgt_lang: str,
            beam: int, base: TranslatorOptions, hypotheses: Path) -> dict[str, Any]:
    """`measure_here` in a fresh process, with the model's size and parameters added."""
    with ProcessPoolExecutor(1, mp_context=_fresh_processes()) as pool:
        try:
            result = pool.submit(measure_here, [str(m) for m in models], sources, references,
                                 tgt_lang, beam, base, hypotheses).result()
        except BrokenProcessPool:
            raise UserError(f"measuring {' + '.join(map(str, models))}: its process died "
                            "(out of memory?); run the command again to retry") from None
    return {"models": [str(m) for m in models], **model_size(models), **result}


def served(rows: dict[str, dict[str, Any]], beam: int) -> dict[str, Any]:
    """The teacher's beam search (beam `beam`) against the student's greedy search, as
    users serve each, from `rows` (teacher and student, measured alike)."""
    def search(row: dict[str, Any], name: str, words: str) -> dict[str, Any]:
        return {"search": words, "runtime": row["runtime"], "shortlist": row["shortlist"],
                "bleu": row[f"{name}_bleu"], "chrf": row[f"{name}_chrf"],
                "sentences_per_second": row[f"{name}_sentences_per_second"]}

    teacher = search(rows["teacher"], "beam", f"beam {beam}")
    student = search(rows["student"], "greedy", "greedy")
    return {"teacher": teacher, "student": student,
            "sentences": rows["student"]["sentences"],
            "batch_sentences": rows["student"]["batch_sentences"],
            "speedup": student["sentences_per_second"] / teacher["sentences_per_second"],
            "bleu_difference": student["bleu"] - teacher["bleu"]}


def format_report(rows: dict[str, dict[str, Any]],
                  comparison: dict[str, Any] | None = None) -> str:
    """The report's table: one row per model (teacher, student), one column per measure;
    then, where given, the teacher and the student as served (`served`)."""
    table = [["", *(heading for _, heading, _ in COLUMNS)]]
    for label, row in rows.items():
        table.append([label, *(form.format(row[key]) for key, _, form in COLUMNS)])
    widths = [max(len(cells[i]) for cells in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width)
                       for i, (cell, width) in enumerate(zip(cells, widths)))
             for cells in table]
    if comparison is None:
        return "\n".join(lines)
    lines.append(f"as served, the same {comparison['sentences']} lines in batches of at most "
                 f"{comparison['batch_sentences']}:")
    for label in ("teacher", "student"):
        one = comparison[label]
        shortlist = ", its shortlist" if one["shortlist"] else ""
        lines.append(f"  {label}, {one['search']} on {one['runtime']}{shortlist}: BLEU "
                     f"{one['bleu']:.1f}, chrF {one['chrf']:.1f}, "
                     f"{one['sentences_per_second']:.1f} sent/s")
    lines.append(f"  the student: {comparison['speedup']:.2f}x the teacher's sentences per "
                 f"second, {comparison['bleu_difference']:+.1f} BLEU")
    return "\n".join(lines)
