"""`nmt distill`: the stages, in order, each skipped when DIR/distill.json records it done.

```
DIR/
  distill.json     which stages are done, with their settings (distill/state.py)
  translate/       stage 1: `translate_corpus`'s directory: the teacher's n-best of the
                   training sources (and of --mono files), JSON lines with token scores
  select/          stage 2: train.SRC and train.TGT, the pairs the student learns from
  pairs/           stage 3, with --references (the default): those pairs and --data's
                   training pairs, one file per side
  data/            stage 3: those pairs prepared with the teacher's vocabulary, and the
                   valid and test splits of --data
  run/             stage 3: the student's training run
  student.pt       stage 3: its last checkpoints averaged
  student.shortlist.npz  stage 4: its lexical shortlist, counted on data/'s train split
  report/          stage 5: each model's test translations
  report.json      stage 5: teacher and student measured alike, as they are served
  student-ctranslate2/   stage 6, by default: the student for CTranslate2, its shortlist
                         as vmap.txt
  student.argosmodel     stage 6, with --export argos: an Argos Translate package of it
```

Within a stage, an interrupted run resumes where the stage's own machinery can: the
corpus translation by shards, the preparation from scratch, the training from its last
checkpoint.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any, Callable, Protocol

from transformer_nmt.config import DecodeConfig, ModelConfig, get_preset
from transformer_nmt.corpus import (CorpusOptions, file_sha256_of, merge, output_name,
                                    translate_corpus)
from transformer_nmt.data.manifest import MANIFEST, SPLITS, text_path
from transformer_nmt.data.prepare import PrepareOptions, prepare
from transformer_nmt.data.shortlist import DEFAULT_BEST, DEFAULT_FREQUENT
from transformer_nmt.data.text import LineWriter, read_lines
from transformer_nmt.decode.runtime.vmap import SUFFIX, make_shortlist, shortlist_path
from transformer_nmt.decode.text.translator import TranslatorOptions
from transformer_nmt.distill.measure import format_report, measure, served, served_options
from transformer_nmt.distill.options import DistillOptions
from transformer_nmt.distill.select import select
from transformer_nmt.distill.state import STAGES, DistillState, made_from
from transformer_nmt.errors import UserError
from transformer_nmt.evaluate import split_languages
from transformer_nmt.files import write_json_atomic
from transformer_nmt.interrupts import Terminated
from transformer_nmt.model_file import (model_languages, read_model_file, save_model_file,
                                        vocab_source)
from transformer_nmt.training.checkpoint import (average_checkpoints, checkpoints_to_average,
                                                 numbered_checkpoints)
from transformer_nmt.training.run import apply_overrides
from transformer_nmt.training.session import train

Log = Callable[[str], None]
REPORT = "report.json"
STUDENT = "student.pt"


def _stage(log: Log, stage: str, text: str) -> None:
    log(f"\n[{STAGES.index(stage) + 1}/{len(STAGES)}] {text}")


def _skipped(log: Log, stage: str, text: str, record: dict[str, Any]) -> dict[str, Any]:
    _stage(log, stage, f"{text}: done already ({record.get('summary', 'see distill.json')})")
    return record


EXPORTS = {"ctranslate2": "student-ctranslate2", "argos": "student.argosmodel"}
"""Where stage 6 writes each export of the student, in DIR."""
SHORTLIST = Path(STUDENT).stem + SUFFIX
"""The student's shortlist, beside it in DIR, where decoding and `nmt export` find it."""
OUTPUTS = {"translate": ("translate",), "select": ("select",),
           "train": ("data", "run", STUDENT), "shortlist": (SHORTLIST,),
           "report": ("report", REPORT), "export": tuple(EXPORTS.values())}
"""What each stage makes in DIR."""


class Exporter(Protocol):
    """What writes stage 6's exports: the export layer's `export.student.EXPORTER`,
    handed in by the command, since this layer lies below that one and cannot import it."""

    def check(self, fmt: str, model: ModelConfig) -> None:
        """UserError when `fmt` cannot be written here (its runtime is not installed) or
        cannot run a model of configuration `model`."""

    def write(self, fmt: str, model: Path, out: Path, quantization: str) -> Path:
        """The model file `model` exported as `fmt` to `out`, replacing an earlier export
        there once the new one is complete, its weights stored as `quantization`."""


def _finish(options: DistillOptions, state: DistillState, log: Log, stage: str,
            settings: dict[str, Any], files: list[Path], **facts: Any) -> dict[str, Any]:
    """Record `stage` done, after removing what later stages made from its previous
    output: their inputs have changed, and a data directory or a run made from other
    pairs would be refused or, worse, resumed. Nothing is removed when a stage fails."""
    for later in made_from(stage):
        for name in OUTPUTS[later]:
            path = Path(options.out) / name
            if path.is_dir():
                log(f"  removing {path}, made by stage {later} from the previous output")
                shutil.rmtree(path)
            elif path.exists():
                log(f"  removing {path}, made by stage {later} from the previous output")
                path.unlink()
    return state.finish(stage, settings, files, **facts)


def _translator(options: DistillOptions) -> TranslatorOptions:
    """The teacher's search: beam with n-best and each token's log-probability, which
    stage 2 chooses and filters by. No confidence: stage 2 does not read it, and for a
    calibrated teacher its pass cost more than the search."""
    return TranslatorOptions(decode=DecodeConfig(beam=options.beam, nbest=options.nbest),
                             engine=options.engine, device=options.device, token_scores=True,
                             workers=options.workers, confidence=False)


def cluster_command(options: DistillOptions, inputs: list[str], out: Path) -> str:
    """The `nmt translate-corpus` command that translates a part of stage 1 on a cluster
    (a job array's task I of N) into the same directory, with the same settings."""
    q = shlex.quote
    return (f"nmt translate-corpus --model {' '.join(q(t) for t in options.teachers)} "
            f"--input {' '.join(q(i) for i in inputs)} --out {q(str(out))} --format json "
            f"--beam {options.beam} --nbest {options.nbest} --shard-lines "
            f"{options.shard_lines} --shard I/N")


def translate_stage(options: DistillOptions, state: DistillState, log: Log) -> dict[str, Any]:
    """Stage 1: the teacher's n-best of the training sources and the --mono files."""
    src, _ = split_languages(options.data, None, None)
    inputs = [str(text_path(options.data, "train", src)), *options.mono]
    out = Path(options.out) / "translate"
    settings = {"teachers": [file_sha256_of(path) for path in options.teachers],
                "inputs": [str(Path(path).resolve()) for path in inputs],
                "beam": options.beam, "nbest": options.nbest}
    text = (f"translating {len(inputs)} file{'s' if len(inputs) > 1 else ''} with the teacher"
            f"{'s (an ensemble)' if len(options.teachers) > 1 else ''}, beam {options.beam}, "
            f"{options.nbest}-best")
    if (record := state.done("translate", settings)) is not None:
        return _skipped(log, "translate", text, record)
    _stage(log, "translate", f"{text}, into {out}")
    log(f"  on a cluster, each task of a job array may translate its part first:\n"
        f"    {cluster_command(options, inputs, out)}")
    corpus = CorpusOptions(models=tuple(options.teachers), inputs=tuple(inputs), out=str(out),
                           translator=_translator(options), output_format="json",
                           shard_lines=options.shard_lines, backend=options.backend,
                           ray_address=options.ray_address)
    # One local worker translates in this process: no process to start, nothing to hand over.
    here = options.workers == 1 and options.backend == "local"
    report = translate_corpus(corpus, (0, 1) if here else None)
    if here:
        merge(out)
    log(f"  {report.summary()}")
    files = [out / output_name(Path(path)) for path in inputs]
    return _finish(options, state, log, "translate", settings, files,
                   summary=report.summary(), sources=inputs)


def select_stage(options: DistillOptions, state: DistillState, translated: dict[str, Any],
                 log: Log) -> dict[str, Any]:
    """Stage 2: per sentence the candidate closest to the reference, the worst dropped."""
    src, tgt = split_languages(options.data, None, None)
    out = Path(options.out) / "select"
    settings = {"drop": options.drop}
    text = (f"choosing per sentence the candidate closest to the reference (sentence chrF), "
            f"dropping the worst {options.drop:.0%} by the teacher's per-token cross-entropy")
    if (record := state.done("select", settings)) is not None:
        return _skipped(log, "select", text, record)
    _stage(log, "select", text)
    # The training sources come first and have references; --mono files have none.
    references = [text_path(options.data, "train", tgt)] + [None] * len(options.mono)
    inputs = [(Path(source), Path(output), reference) for source, output, reference
              in zip(translated["sources"], translated["files"], references)]
    selection = select(inputs, options.drop, out / f"train.{src}", out / f"train.{tgt}")
    summary = selection.summary(options.drop)
    log(f"  {summary}")
    return _finish(options, state, log, "select", settings,
                   [Path(path) for path in selection.files], summary=summary,
                   kept=selection.kept, sentences=selection.sentences,
                   dropped_empty=selection.empty, dropped_worst=selection.worst)


def _concatenate(parts: list[Path], out: Path) -> Path:
    """`parts`' lines one after the other, written whole into `out`."""
    with LineWriter(out) as written:
        for part in parts:
            for line in read_lines(part):
                written.write(line)
    return out


def _prepare_student_data(options: DistillOptions, selected: dict[str, Any], log: Log) -> Path:
    """The selected pairs (and --data's training pairs, with --references), with --data's
    valid and test splits, prepared with the teacher's vocabulary (a student shares its
    teacher's pieces, and an ensemble's teachers share one vocabulary)."""
    src, tgt = split_languages(options.data, None, None)
    vocab = vocab_source(options.teachers[0])
    for other in options.teachers[1:]:
        if vocab_source(other).sha256 != vocab.sha256:
            raise UserError(f"{other} has another vocabulary than {options.teachers[0]}; "
                            "an ensemble's teachers must share one")
    files = {"train_src": selected["files"][0], "train_tgt": selected["files"][1]}
    if options.references:
        pairs = Path(options.out) / "pairs"
        pairs.mkdir(exist_ok=True)
        for side, lang in (("train_src", src), ("train_tgt", tgt)):
            files[side] = str(_concatenate([Path(files[side]), text_path(options.data,
                                            "train", lang)], pairs / f"train.{lang}"))
    for split in SPLITS[1:]:
        files[f"{split}_src"] = str(text_path(options.data, split, src))
        files[f"{split}_tgt"] = str(text_path(options.data, split, tgt))
    data = Path(options.out) / "data"
    # No length filters: the data was filtered when --data was prepared, and the teacher's
    # outputs are bounded by its own length limit.
    prepare(PrepareOptions(corpus="files", src=src, tgt=tgt, out=data, files=files,
                           vocab=vocab, max_len=0, max_ratio=0),
            command="nmt distill", progress=options.progress, log=log)
    return data


def average_last_checkpoints(run: Path, last: int, out: Path) -> list[Path]:
    """Average the last `last` numbered checkpoints of `run` (as many as there are, at
    least one) into the model file `out`; the checkpoints averaged."""
    count = min(last, len(numbered_checkpoints(run)))
    paths = checkpoints_to_average([run], max(count, 1))
    save_model_file(average_checkpoints(paths), out)
    return paths


def train_stage(options: DistillOptions, state: DistillState, selected: dict[str, Any],
                log: Log) -> dict[str, Any]:
    """Stage 3: prepare the student's data, train the student, average its checkpoints."""
    preset = get_preset(options.student)
    settings = {"student": options.student, "overrides": [list(o) for o in options.overrides],
                "average_last": options.average_last, "references": options.references}
    model, _ = apply_overrides(preset.model, preset.train, options.overrides)
    shaped = " with --set" if model != preset.model else ""
    text = (f"training the student, preset {options.student}{shaped} ({model.encoder_layers} "
            f"encoder and {model.decoder_layers} decoder layers, d_model {model.d_model}), on the "
            f"selected pairs{' and the references' if options.references else ''} with the "
            "teacher's vocabulary")
    if (record := state.done("train", settings)) is not None:
        return _skipped(log, "train", text, record)
    _stage(log, "train", text)
    data = _prepare_student_data(options, selected, log)
    run = Path(options.out) / "run"
    summary = train(out=run, data=data, preset=options.student,
                    overrides=list(options.overrides), device=options.device,
                    command="nmt distill", progress=options.progress)
    for line in summary.lines:
        log(f"  {line}")
    # Training stopped by a signal has written its checkpoint and returned; the stage is
    # not done, and the next run resumes the training.
    if summary.stopped_by == "SIGINT":
        raise KeyboardInterrupt
    if summary.stopped_by == "SIGTERM":
        raise Terminated
    student = Path(options.out) / STUDENT
    paths = average_last_checkpoints(run, options.average_last, student)
    done = f"averaged {', '.join(p.name for p in paths)} into {student}"
    log(f"  {done}")
    return _finish(options, state, log, "train", settings, [student], summary=done,
                   data=str(data), run=str(run))


def shortlist_stage(options: DistillOptions, state: DistillState, student: Path,
                    log: Log) -> dict[str, Any]:
    """Stage 4: the student's lexical shortlist, counted on the pairs it learned from
    (DIR/data's train split) and written beside it, where CTranslate2 finds it: in the
    report and in the export, each batch's output layer is cut to its sources' candidate
    pieces. It takes seconds, so that other settings redo it rather than being refused."""
    data = Path(options.out) / "data"
    settings = {"student": file_sha256_of(student), "best": DEFAULT_BEST,
                "frequent": DEFAULT_FREQUENT}
    text = "counting the student's shortlist on the pairs it learned from"
    if (record := state.done("shortlist", settings, redo_if_changed=True)) is not None:
        return _skipped(log, "shortlist", text, record)
    _stage(log, "shortlist", text)
    if not (data / MANIFEST).exists():
        raise UserError(f"{data}: the pairs the student learned from are gone, and its "
                        f"shortlist is counted on them; delete {student} and run again: "
                        "stage 3 prepares them again and finds the training done")
    path, stats = make_shortlist(student, data, "train", DEFAULT_BEST, DEFAULT_FREQUENT,
                                 progress=options.progress)
    summary = (f"{path} from {stats.pairs} pairs: a sentence's candidates "
               f"{stats.mean_candidates:.0f} of the {stats.vocab_size} pieces on average")
    log(f"  {summary}")
    return _finish(options, state, log, "shortlist", settings, [path], summary=summary)


def report_stage(options: DistillOptions, state: DistillState, student: Path,
                 log: Log) -> dict[str, Any]:
    """Stage 5: teacher and student measured alike on the test split, on this machine's
    CPU, as they are served: on CTranslate2 in int8, the student with its shortlist, the
    same lines in the same batches, one model after the other in this run."""
    src, tgt = split_languages(options.data, None, None)
    out = Path(options.out)
    shortlist = shortlist_path(student)
    base = served_options(options.report_beam)
    settings = {"beam": options.report_beam, "student": file_sha256_of(student),
                "shortlist": file_sha256_of(shortlist) if shortlist.exists() else None,
                "engine": base.engine, "precision": base.precision}
    text = (f"measuring teacher and student on the test split as they are served (CTranslate2 "
            f"int8 on the CPU, the student with its shortlist): greedy and beam "
            f"{options.report_beam}, in the same batches, each in a fresh process")
    if (record := state.done("report", settings)) is not None:
        _skipped(log, "report", text, record)
        log(record["table"])
        return record
    _stage(log, "report", text)
    sources, references = text_path(options.data, "test", src), text_path(options.data, "test", tgt)
    rows = {}
    for label, models in (("teacher", [Path(t) for t in options.teachers]), ("student", [student])):
        rows[label] = measure(models, sources, references, tgt, options.report_beam, base,
                              out / "report" / f"{label}.test.{tgt}")
    comparison = served(rows, options.report_beam)
    table = format_report(rows, comparison)
    log(table)
    write_json_atomic(out / REPORT, {"split": "test", "data": str(options.data), **rows,
                                     "served": comparison})
    return _finish(options, state, log, "report", settings, [out / REPORT],
                   summary=f"{out / REPORT}", table=table)


def _bytes(path: Path) -> int:
    """The size of a file, or of the files under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(part.stat().st_size for part in path.rglob("*") if part.is_file())


def _needed(exporter: Exporter | None) -> Exporter:
    if exporter is None:
        # A caller's mistake, not the user's: the command always passes one.
        raise ValueError("--export needs an exporter: pass distill(..., "
                         "exporter=transformer_nmt.export.student.EXPORTER)")
    return exporter


def _export_by_hand(student: Path, log: Log) -> None:
    q = shlex.quote(str(student))
    log(f"  or later, by hand: nmt export --model {q} --to ctranslate2 OUT --quantization int8"
        " (its shortlist included)")
    log(f"                     nmt export --model {q} --to argos OUT.argosmodel")
    log(f"  int8 without an export: nmt translate --model {q} --precision int8 ...")


def export_stage(options: DistillOptions, state: DistillState, student: Path,
                 exporter: Exporter | None, log: Log) -> dict[str, Any] | None:
    """Stage 6: the student exported to each --export format (its shortlist, where stage 4
    made it, in CTranslate2's as vmap.txt), or, with none, the commands that would export
    it printed. Changed settings redo it rather than being refused: an
    export takes seconds, nothing is made from it, and each output is replaced only once
    the new one is complete. An earlier export of this student in a format not asked for
    this time is left as it was (a retrained student removes them all, see `_finish`)."""
    if not options.exports:
        _stage(log, "export", "exporting the student: none asked for (--export none)")
        _export_by_hand(student, log)
        return None
    exporter = _needed(exporter)
    out = Path(options.out)
    shortlist = shortlist_path(student)
    settings = {"formats": list(options.exports), "quantization": options.quantization,
                "student": file_sha256_of(student),
                "shortlist": file_sha256_of(shortlist) if shortlist.exists() else None}
    text = (f"exporting the student ({options.quantization} weights) to "
            f"{' and '.join(options.exports)}")
    if (record := state.done("export", settings, redo_if_changed=True)) is not None:
        return _skipped(log, "export", text, record)
    _stage(log, "export", text)
    files, megabytes = [], {}
    for fmt in options.exports:
        path = out / EXPORTS[fmt]
        exporter.write(fmt, student, path, options.quantization)
        megabytes[fmt] = round(_bytes(path) / 1e6, 2)
        use = (f"ctranslate2.Translator({str(path)!r}) loads it" if fmt == "ctranslate2"
               else "`argospm install` or LibreTranslate takes it")
        if (path / "vmap.txt").exists():
            use += ", and translate_batch(..., use_vmap=True) uses its shortlist"
        log(f"  wrote {path} ({megabytes[fmt]} MB); {use}")
        files.append(path)
    for fmt, name in EXPORTS.items():
        if fmt not in options.exports and (out / name).exists():
            log(f"  {out / name}, an earlier export not asked for this time, is left as it was")
    summary = ", ".join(f"{EXPORTS[fmt]} {megabytes[fmt]} MB" for fmt in options.exports)
    return _finish(options, state, log, "export", settings, files, summary=summary,
                   megabytes=megabytes)


def distill(options: DistillOptions, log: Log = print,
            exporter: Exporter | None = None) -> dict[str, Any]:
    """Run every stage not done yet; the report (what DIR/report.json holds). `exporter`
    writes stage 6's exports (`export.student.EXPORTER`); needed with options.exports."""
    # An unknown preset or a bad --set is refused before hours of translating.
    preset = get_preset(options.student)
    student_config, _ = apply_overrides(preset.model, preset.train, options.overrides)
    for path in options.teachers:
        if not Path(path).is_file():
            raise UserError(f"{path}: no such teacher model file")
    for path in options.mono:
        if not Path(path).is_file():
            raise UserError(f"{path}: no such --mono file")
    # A missing runtime, or one that cannot run the student, is refused before hours of
    # work, not after them.
    for fmt in options.exports:
        _needed(exporter).check(fmt, student_config)
    languages = split_languages(options.data, None, None)
    for path in options.teachers:
        recorded = model_languages(read_model_file(path))
        if recorded is not None and recorded != languages:
            raise UserError(f"{path} translates {'-'.join(recorded)}, but {options.data} is "
                            f"{'-'.join(languages)}; give data of the teacher's direction")
    Path(options.out).mkdir(parents=True, exist_ok=True)
    state = DistillState(Path(options.out))
    translated = translate_stage(options, state, log)
    selected = select_stage(options, state, translated, log)
    trained = train_stage(options, state, selected, log)
    student = Path(trained["files"][0])
    shortlist_stage(options, state, student, log)
    report_stage(options, state, student, log)
    export_stage(options, state, student, exporter, log)
    return json.loads((Path(options.out) / REPORT).read_text(encoding="utf-8"))
