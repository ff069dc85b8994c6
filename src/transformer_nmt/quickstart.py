"""`nmt quickstart`: the whole system on the default corpus, in one command.

prepare → train the small preset for a bounded time → average the last checkpoints →
calibrate the confidence of its translations on the validation split → evaluate on the
test split → translate example sentences → draw attention pictures →
print where everything is and what to run next. Every stage finds and reuses what an
earlier run of the command already made, so re-running it continues rather than restarts.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from transformer_nmt.attention_plot import compute_attention, write_attention_pictures
from transformer_nmt.calibrate import calibrate
from transformer_nmt.config import get_preset
from transformer_nmt.config.presets import SHORT_RUN
from transformer_nmt.data.prepare import PrepareOptions, prepare
from transformer_nmt.decode.text.translator import Translation, Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.evaluate import evaluate_model, format_confidence, format_table
from transformer_nmt.model_file import save_model_file
from transformer_nmt.training.checkpoint import (average_checkpoints, checkpoints_to_average,
                                              numbered_checkpoints)
from transformer_nmt.training.metrics import plot_metrics
from transformer_nmt.training.progress import SessionSummary
from transformer_nmt.training.session import train

# Sentences of the kind the default corpus teaches (its domain is scripture), per language.
EXAMPLES = {
    "en": ["In the beginning God created the heavens and the earth.",
           "The light shines in the darkness.",
           "Love your neighbor as yourself.",
           "He went up on the mountain and taught the people.",
           "Peace be with you."],
    "de": ["Im Anfang schuf Gott die Himmel und die Erde.",
           "Das Licht scheint in der Finsternis.",
           "Du sollst deinen Nächsten lieben wie dich selbst.",
           "Er ging auf den Berg und lehrte das Volk.",
           "Friede sei mit euch."],
    "fr": ["Au commencement, Dieu créa les cieux et la terre.",
           "La lumière luit dans les ténèbres.",
           "Tu aimeras ton prochain comme toi-même.",
           "Il monta sur la montagne et enseigna le peuple.",
           "La paix soit avec vous."],
}


@dataclass(frozen=True)
class RecipeSetting:
    """A setting the quickstart trains with in place of its preset's, and why."""

    field: str
    value: str
    why: str


RECIPE = (
    RecipeSetting("dropout", "0.1", "20 minutes show each pair only a few times, and 0.3 "
                  "regularises more than that needs: on the Bible, 20 minutes with 0.1 "
                  "ended at a far higher validation BLEU than with 0.3, and a little "
                  "higher than with none"),
)
"""Settings of the quickstart's recipe for a short budget, chosen by validation BLEU after
a default run on 2 cores; `nmt train` keeps the paper's."""


@dataclass
class QuickstartOptions:
    """What `nmt quickstart` runs; defaults give the whole run in little more than the
    training budget on 2 cores."""

    out: Path = Path("quickstart")
    """Directory that receives the data, the run, the model and the pictures."""
    corpus: str = "bible"
    """Corpus recipe (bible or multi30k)."""
    src: str = "en"
    """Source language."""
    tgt: str = "de"
    """Target language."""
    mirror: str | None = None
    """Local copy of a downloadable corpus (multi30k)."""
    preset: str = "small"
    """Model preset to train."""
    minutes: float = 20.0
    """Training time budget in minutes, summed over re-runs."""
    average_last: int = 2
    """Numbered checkpoints averaged into the final model: 2, a minute apart, because the
    run ends on a curve still falling steeply, where averaging the last 5 scored below the
    last 2; the paper averaged 5 or 20 of a converged model."""
    warmup: int = SHORT_RUN.warmup_steps
    """Warm-up steps at most: a run of the default budget on 2 cores makes a few thousand
    steps at most, of which the small preset's warm-up would be a large share or all. The
    peak stays the preset's (lr_scale shrinks by sqrt(warmup / preset's warmup))."""
    batch_tokens: int = SHORT_RUN.batch_tokens
    """Tokens per update and side, over all processes (the run's batch_tokens). Half the
    small preset's 4096: a time-bound CPU run makes twice the updates at nearly the same
    token rate, which raised Multi30k's test BLEU after an hour's run."""
    overrides: list[tuple[str, str]] = field(default_factory=list)
    """Further (field, value) pairs of model and training settings, as `nmt train --set`
    takes them."""
    device: str | None = None
    """Where every stage computes, training, evaluation and translation alike: 'cpu',
    'cuda', or None for CUDA when present."""
    progress: bool = True
    """Show progress bars."""


def _stage(log: Callable[[str], None], number: int, text: str) -> None:
    log(f"\n[{number}/6] {text}")


def _shorter_warmup(options: QuickstartOptions) -> list[tuple[str, str]]:
    """Overrides that warm up in options.warmup steps to the preset's peak learning rate.

    Eq. (3) peaks at lr_scale * d_model^-0.5 * warmup^-0.5, so the same peak after fewer
    warm-up steps needs lr_scale * sqrt(new / old).
    """
    regime = get_preset(options.preset).train
    if regime.warmup_steps <= options.warmup:
        return []
    scale = regime.lr_scale * math.sqrt(options.warmup / regime.warmup_steps)
    return [("warmup_steps", str(options.warmup)), ("lr_scale", f"{scale:.6g}")]


def _example_sentences(data_dir: Path, corpus: str, src: str, count: int = 5) -> list[str]:
    """Built-in examples for the Bible's languages, else the first lines of the test split
    (a model of image captions has no words for scripture)."""
    if corpus == "bible" and src in EXAMPLES:
        return EXAMPLES[src][:count]
    with open(data_dir / f"test.{src}", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line, _ in zip(handle, range(count))]


def _save_minutes(options: QuickstartOptions) -> float:
    """Minutes between checkpoints: a twentieth of the budget (the last five are kept)."""
    return max(options.minutes / 20, 0.05)


def training_overrides(options: QuickstartOptions) -> list[tuple[str, str]]:
    """The (field, value) pairs the quickstart trains its preset with: its budget, its
    checkpoints and validation, its recipe, then the user's own overrides."""
    # Validation (loss and greedy BLEU) every 300 steps: about ten points for the curves
    # picture for a small share of the training time (every 150 steps cost twice it).
    return [("max_time", str(options.minutes * 60)),
            ("save_every_minutes", str(_save_minutes(options))),
            ("keep_last", str(max(options.average_last, 5))), ("valid_every", "300"),
            ("valid_bleu", "true"), ("batch_tokens", str(options.batch_tokens)),
            *_shorter_warmup(options), *((r.field, r.value) for r in RECIPE),
            *options.overrides]


def recipe_lines(options: QuickstartOptions) -> list[str]:
    """One line per setting the quickstart trains with in place of its preset's (the
    paper's regime), saying why; settings the user gave are theirs and not listed."""
    preset = get_preset(options.preset)
    mine = {name for name, _ in options.overrides}
    lines = []
    if options.batch_tokens != preset.train.batch_tokens and "batch_tokens" not in mine:
        lines.append(f"batch_tokens {options.batch_tokens} (the preset: "
                     f"{preset.train.batch_tokens}): more updates in a time-bound run, at "
                     "nearly the same token rate")
    warmup = dict(_shorter_warmup(options))
    if warmup and "warmup_steps" not in mine:
        lines.append(f"warmup_steps {warmup['warmup_steps']} (the preset: "
                     f"{preset.train.warmup_steps}), to the same peak learning rate: "
                     f"{options.minutes:g} minutes on 2 cores are a few thousand steps")
    for setting in RECIPE:
        ours = getattr(preset.model, setting.field, getattr(preset.train, setting.field, None))
        if setting.field not in mine and str(ours) != setting.value:
            lines.append(f"{setting.field} {setting.value} (the preset: {ours}): {setting.why}")
    apart = _save_minutes(options)
    lines.append(f"the last {options.average_last} checkpoints averaged, "
                 f"{apart:g} minute{'' if apart == 1 else 's'} apart (the paper: 5 or 20, "
                 "10 minutes apart): the run ends on a curve still falling steeply, where "
                 "averaging more reaches back to worse weights")
    return lines


def _train(options: QuickstartOptions, data_dir: Path, run_dir: Path,
           log: Callable[[str], None]) -> tuple[SessionSummary, Path]:
    """Stage 2: train (or go on training) the run within the time budget; the session's
    summary and the picture of its curves."""
    overrides = training_overrides(options)
    summary = train(out=run_dir, data=data_dir, preset=options.preset, overrides=overrides,
                    device=options.device, command="nmt quickstart", progress=options.progress)
    for line in summary.lines:
        log(line)
    curves = plot_metrics(run_dir / "metrics.jsonl", run_dir / "curves.png", x_axis="wall")
    log(f"drew the training curves (validation loss and BLEU against time) into {curves}")
    return summary, curves


def _average(options: QuickstartOptions, run_dir: Path, model_path: Path,
             log: Callable[[str], None]) -> list[Path]:
    """Stage 3: average the run's last checkpoints into `model_path`; the files averaged."""
    count = min(options.average_last, len(numbered_checkpoints(run_dir)))
    _stage(log, 3, f"averaging the last {count} checkpoint{'' if count == 1 else 's'}, "
           "and calibrating the confidence of its translations")
    paths = checkpoints_to_average([run_dir], count)
    save_model_file(average_checkpoints(paths), model_path)
    log(f"averaged {', '.join(p.name for p in paths)} into {model_path}")
    return paths


def _calibrate(options: QuickstartOptions, data_dir: Path, model_path: Path,
               log: Callable[[str], None]) -> None:
    """Also stage 3: fit the model's confidence on the validation split, so that its
    translations say how far to trust them; a model whose validation translations are
    too alike to learn from goes on without one."""
    try:
        calibrate(model_path, data_dir, "valid", options=TranslatorOptions(device=options.device),
                  log=log)
    except UserError as error:
        log(f"no confidence for this model's translations: {error}")


def _describe(translation: Translation) -> str:
    """A translation as the quickstart shows it: the text, and its confidence if any."""
    if translation.confidence is None:
        return translation.text
    why = f": {', '.join(translation.confidence_reasons)}" if translation.confidence_reasons else ""
    return f"{translation.text}   (confidence {translation.confidence:.2f}{why})"


def quickstart(options: QuickstartOptions, log: Callable[[str], None] = print) -> dict:
    """Run every stage; return the paths and scores it produced."""

    started = time.time()
    out = Path(options.out)
    data_dir = out / "data" / f"{options.corpus}-{options.src}-{options.tgt}"
    run_dir = out / "run"
    model_path = out / "model.pt"
    pictures = out / "attention"

    _stage(log, 1, f"preparing the {options.corpus} corpus, {options.src}→{options.tgt}")
    prepare(PrepareOptions(corpus=options.corpus, src=options.src, tgt=options.tgt,
                           out=data_dir, mirror=options.mirror),
            command="nmt quickstart", progress=options.progress, log=log)

    _stage(log, 2, f"training the {options.preset} preset for up to {options.minutes:g} minutes, "
           "with a recipe for a short budget where it differs from the paper's:")
    for line in recipe_lines(options):
        log(f"  {line}")
    summary, curves = _train(options, data_dir, run_dir, log)
    paths = _average(options, run_dir, model_path, log)
    _calibrate(options, data_dir, model_path, log)

    decoding = TranslatorOptions(device=options.device).resolved()
    _stage(log, 4, "evaluating on the test split (beam 4, length penalty 0.6, on the "
           "runtime and in the precision 'auto' chose)")
    scores = evaluate_model(model_path, data_dir, "test", decoding)
    log(scores["speed"])
    log(format_table(scores))
    if scores.get("confidence"):
        log(format_confidence(scores["confidence"]))

    _stage(log, 5, "translating example sentences")
    translator = Translator.from_file(model_path, TranslatorOptions(device=options.device))
    examples = _example_sentences(data_dir, options.corpus, options.src)
    found = [best[0] for best in translator.translate_nbest(examples)]
    translations = [translation.text for translation in found]
    for source, translation in zip(examples, found):
        log(f"  {source}\n  → {_describe(translation)}")

    _stage(log, 6, "drawing attention pictures of the first example")
    maps = compute_attention(translator.model, translator.vocab, examples[0], translations[0])
    written = write_attention_pictures(maps, pictures)
    log(f"wrote {len(written)} pictures to {pictures}/ (overview: {written[-1].name})")

    log(f"\ndone in {(time.time() - started) / 60:.1f} minutes.")
    _log_where_and_what_next(log, data_dir, run_dir, model_path, len(paths), scores["json"],
                             pictures)
    sys.stdout.flush()
    return {"data": data_dir, "run": run_dir, "curves": curves, "model": model_path, "scores": scores,
            "train": summary, "seconds": time.time() - started,
            "translations": list(zip(examples, translations)), "pictures": written}


def _log_where_and_what_next(log: Callable[[str], None], data_dir: Path, run_dir: Path,
                             model_path: Path, averaged: int, scores: Path,
                             pictures: Path) -> None:
    """Where everything is, and the commands that go on from it."""
    q = shlex.quote
    log(f"  data:      {data_dir}/ (manifest.json, spm.model, token ids)")
    log(f"  run:       {run_dir}/ (checkpoints, metrics.jsonl, config.json, curves.png)")
    log(f"  model:     {model_path} (average of the last {averaged} checkpoints, with its "
        "confidence calibration when one could be fitted)")
    log(f"  scores:    {scores}")
    log(f"  pictures:  {pictures}/")
    log("next:")
    log(f"  train longer:     nmt train --resume {q(str(run_dir))} --max-time 2h")
    log(f"  average again:    nmt average {q(str(run_dir))} --last {averaged} --out {q(str(model_path))}")
    log(f"  translate a file: nmt translate --model {q(str(model_path))} --input FILE --output OUT")
    log(f"  type sentences:   nmt translate --model {q(str(model_path))} --interactive")
    log(f"  look at a pair:   nmt attention --model {q(str(model_path))} --src \"...\" --out DIR")
    log(f"  score a split:    nmt evaluate --model {q(str(model_path))} --data {q(str(data_dir))} --split test")
    log(f"  serve it:         nmt serve --model {q(str(model_path))}   (then open http://127.0.0.1:8080/)")
