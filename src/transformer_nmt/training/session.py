"""One session of `nmt train`: read the data, build or restore the model, step until a
limit or a signal, log, validate and checkpoint as due.

`train` is the entry point; every process of a torchrun launch calls it and only rank 0
writes files. What a session starts from (precision, data, the model fresh, resumed or
fine-tuned) is training/session_start.py's; one optimizer step is `Trainer.train_step`
(training/trainer.py); when to log, validate and save is training/cadence.py's; what the
run has done is kept in training/progress.py's dataclasses; the run directory's rules
are training/run.py's and resuming is training/checkpoint.py's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from tqdm import tqdm

from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.collate import Batch, collate
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_link
from transformer_nmt.memory import keep_kernels_once
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload, save_model_file
from transformer_nmt.runtime import length_multiple, validation_precision
from transformer_nmt.training.batch_size import describe_batch, plan_batch
from transformer_nmt.training.cadence import Cadence
from transformer_nmt.training.checkpoint import BEST, restore, rng_states, save_numbered
from transformer_nmt.training.distributed import Distributed, init_distributed, shutdown
from transformer_nmt.training.early_stopping import EarlyStopping, better
from transformer_nmt.training.loss import perplexity
from transformer_nmt.training.metrics import MetricsLog, PeakFlops, format_duration
from transformer_nmt.training.precision import DTYPES
from transformer_nmt.training.progress import (Interval, RunProgress, SessionSummary,
                                               finished_lines, report_lines, validation_line)
from transformer_nmt.training.run import (RunPlan, may_hold_run, plan_run, session_record,
                                          write_run_config)
from transformer_nmt.training.run_lock import RunLock
from transformer_nmt.training.session_start import (batch_shapes, decide_precision, fresh_model,
                                                   read_checkpoint, read_data, read_start_weights)
from transformer_nmt.training.signals import StopSignals
from transformer_nmt.training.trainer import StepResult, Trainer
from transformer_nmt.training.validation import translation_scores, validation_batches

ValidScores = Callable[[Transformer], dict[str, float]]


class _Session:
    """One `train` call: the run's state restored or begun, the loop over optimizer steps
    to a limit or a signal, and the files it writes into the run directory."""

    def __init__(self, plan: RunPlan, context: Distributed, progress: bool,
                 valid_scores: ValidScores | None, command: str) -> None:
        self.plan, self.context, self.cfg = plan, context, plan.train
        self.main = context.is_main
        self.run_dir = plan.run_dir
        self.command = command
        self.show_progress = progress and self.main
        self.batch = plan_batch(self.cfg.batch_tokens, self.cfg.max_tokens,
                                self.cfg.update_freq, context.world_size)
        self.precision, self.precision_reason = context.main_reads(
            lambda: decide_precision(plan, context.device, self.batch.per_batch_tokens))
        self.train_data, self.valid_data, self.vocab = read_data(plan)
        model = fresh_model(plan, self.vocab, context.rank)
        checkpoint = read_checkpoint(plan, context, len(self.vocab))
        if checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
        elif self.cfg.init_from:
            model.load_state_dict(read_start_weights(plan, context)["model"])
        self.trainer = Trainer(model, self.cfg, context, self.precision, self.cfg.compile)
        self.length_multiple = length_multiple(context.device, self.precision)
        self.valid_precision = validation_precision(context.device, self.precision)
        self.shapes = batch_shapes(self.cfg, self.train_data, self.batch.per_batch_tokens)
        if self.shapes is not None:
            self.length_multiple = 1  # the grid's lengths are the shapes that occur
        self.sampler = TokenBatchSampler(
            self.train_data.src_lengths, self.train_data.tgt_lengths,
            self.batch.per_batch_tokens, seed=self.cfg.seed, rank=context.rank,
            world_size=context.world_size, length_multiple=self.length_multiple,
            shapes=self.shapes)
        self.progress = RunProgress()
        self.resume_step = None
        if checkpoint is not None:
            self.progress = restore(checkpoint, self.trainer, self.sampler, context)
            self.resume_step = self.trainer.step
        self.valid_scores = self._valid_scores(valid_scores)
        self.early_stopping = EarlyStopping(self.cfg.valid_metric, self.cfg.patience)
        self.cadence = Cadence(self.cfg, can_validate=self.valid_data is not None)
        self.interval = Interval()
        self.last_update: StepResult | None = None
        self.last_validation: dict[str, Any] | None = None
        self.last_saved: Path | None = None
        self.last_saved_step = -1

    def _valid_scores(self, given: ValidScores | None) -> ValidScores | None:
        """What scores the model's translations of the valid split, if anything should."""
        cfg = self.cfg
        if not cfg.valid_bleu and cfg.valid_metric == "loss":
            return None
        return given or (lambda model: translation_scores(
            model, self.valid_data, self.vocab, self.batch.per_batch_tokens,
            self.context.device, self.valid_precision, cfg.valid_beam, cfg.valid_sentences))

    @property
    def epoch(self) -> float:
        """Passes over the training data, fractional (batches of every process counted)."""
        return self.sampler.epoch + self.sampler.consumed / max(self.sampler.num_batches, 1)

    def _time_up(self, wall: float) -> bool:
        """Whether `wall` training seconds reach max_time (as this process counts them)."""
        return bool(self.cfg.max_time) and wall >= self.cfg.max_time

    def _limit(self, time_up: bool) -> str | None:
        """The limit that ends training now, if any (`time_up`: max_time is reached)."""
        cfg = self.cfg
        if self.trainer.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs and self.sampler.epoch >= cfg.max_epochs:
            return "max_epochs"
        if time_up:
            return "max_time"
        if self.early_stopping.out_of_patience(self.progress):
            return "patience"
        return None

    def train(self) -> SessionSummary:
        """Train from the run's restored state to a limit or a signal."""
        already = self._limit(self._time_up(self.progress.wall))
        if already is not None:
            return self._summary("finished", 0.0, finished_already=already)
        log = self._begin() if self.main else None
        peak = PeakFlops(self.context.device, DTYPES[self.precision])
        try:
            with StopSignals() as signals:
                stopped_by = self._loop(log, signals, peak)
        finally:
            if log is not None:
                log.close()
        return self._summary(stopped_by, peak.value)

    def _begin(self) -> MetricsLog:
        """Record this session in config.json, say how it batches (and fine-tunes), and
        open the metrics log (rank 0 only)."""
        cfg = self.cfg
        self.plan.record["sessions"].append(session_record(
            from_step=self.trainer.step, command=self.command,
            world_size=self.context.world_size, device=str(self.context.device),
            precision=self.precision, batch=self.batch._asdict()))
        write_run_config(self.run_dir, self.plan.record)
        tqdm.write(describe_batch(self.batch, self.context.world_size), file=sys.stderr)
        if self.precision_reason:
            tqdm.write(self.precision_reason, file=sys.stderr)
        if self.resume_step is None and cfg.init_from:
            tqdm.write(f"fine-tuning from the weights of {cfg.init_from}: fresh optimizer, "
                       f"{cfg.warmup_steps} warm-up steps to a peak rate of "
                       f"{self.trainer.schedule.peak:.3g}", file=sys.stderr)
        return MetricsLog(self.run_dir, self.resume_step)

    def _loop(self, log: MetricsLog | None, signals: StopSignals, peak: PeakFlops) -> str:
        """Optimizer steps, each followed by the work that is due, until something stops
        the session; what stopped it."""
        wall_before, started = self.progress.wall, time.perf_counter()
        self.interval.reset()
        self.cadence.restart_clock()
        # Under a time limit the step limit is usually far away: a bar towards it would
        # promise an ETA of days, so the bar counts steps and the postfix says the time left.
        bar = tqdm(total=None if self.cfg.max_time else self.cfg.max_steps,
                   initial=self.trainer.step, unit="step", dynamic_ncols=True,
                   disable=not self.show_progress, file=sys.stderr)
        self._indices = iter(self.sampler)
        stopped_by = None
        try:
            while stopped_by is None:
                result = self._take_step()
                wall = self.progress.wall = wall_before + time.perf_counter() - started
                seconds = self.interval.seconds()
                if result.updated:
                    self._count_update(result, bar, wall, seconds, peak)
                else:
                    self._report_skip(result, log, wall)
                stopped_by = self._after_step(result, log, signals, wall, seconds, peak)
        finally:
            bar.close()
        return stopped_by

    def _take_step(self) -> StepResult:
        """One optimizer step on the next update_freq batches of this process (fewer at
        the end of an epoch, None where its share has run out); then the next epoch
        begins if this one has run out."""
        batches: list[Batch | None] = []
        limit = self.plan.model.max_positions
        while (len(batches) < self.batch.update_freq
               and self.sampler.position < len(self.sampler)):
            indices = next(self._indices)
            batches.append(collate(self.train_data, indices, max_len=limit,
                                   length_multiple=self.length_multiple, shapes=self.shapes)
                           if indices else None)
        result = self.trainer.train_step(batches)
        if self.sampler.position >= len(self.sampler):
            self.sampler.set_epoch(self.sampler.epoch + 1)
            self._indices = iter(self.sampler)
        return result

    def _count_update(self, result: StepResult, bar: tqdm, wall: float, seconds: float,
                      peak: PeakFlops) -> None:
        """Add an applied update to the run's and the interval's sums, and show it."""
        self.last_update = result
        self.progress.add(result)
        self.interval.add(result)
        mfu = self.interval.mfu(seconds, peak.value, self.context.world_size)
        time_left = (f" {format_duration(max(self.cfg.max_time - wall, 0))} left"
                     if self.cfg.max_time else "")
        bar.set_postfix_str(
            f"loss {result.loss / result.tgt_tokens:.3f} "
            f"ppl {perplexity(result.nll / result.tgt_tokens):.1f} lr {result.lr:.2e} "
            f"{self.interval.tgt / seconds:.0f} tgt tok/s mfu {mfu:.1%}{time_left}",
            refresh=False)
        bar.update(1)

    def _after_step(self, result: StepResult, log: MetricsLog | None, signals: StopSignals,
                    wall: float, seconds: float, peak: PeakFlops) -> str | None:
        """Log, validate and save as due after a step; what stops the session, if anything.
        Every process decides alike: the signals and clocks of all are agreed first."""
        signalled, time_up, save_time_up = self.context.any(
            signals.received is not None, self._time_up(wall), self.cadence.save_time_up())
        stopped_by = self._limit(time_up) or ((signals.received or "signal") if signalled
                                              else None)
        step = self.trainer.step if result.updated else None
        if log is not None and self.interval.steps and self.cadence.log_due(
                step, stopped_by is not None):
            self._log_interval(log, wall, seconds, peak)
        pause_start = time.perf_counter()
        validate = self.cadence.validation_due(step, stopped_by is not None, signalled)
        improved = validate and self._validate(log, wall)
        if validate:
            stopped_by = stopped_by or self._limit(time_up)
        if self.cadence.save_due(step, stopped_by is not None, save_time_up):
            self._save(best=improved)
            self.cadence.restart_clock()
        elif improved:
            self._save(best=True, numbered=False)
        if validate or save_time_up:
            # Pauses re-measure MFU's denominator: a start-up measurement taken while the
            # cores were shared would inflate every MFU of the run.
            peak.refresh()
        self.interval.started += time.perf_counter() - pause_start
        return stopped_by

    def _log_interval(self, log: MetricsLog, wall: float, seconds: float,
                      peak: PeakFlops) -> None:
        """Write the "train" record of the updates since the last one, and start anew."""
        log.write("train", self.trainer.step, wall, epoch=round(self.epoch, 4),
                  **self.interval.record(seconds, self.last_update, peak.value,
                                         self.context.world_size),
                  tokens_seen=self.progress.tgt_tokens, skipped=self.trainer.skipped_total)
        self.interval.reset()

    def _report_skip(self, result: StepResult, log: MetricsLog | None, wall: float) -> None:
        """Log a skipped update; stop with an error after too many bad ones in a row."""
        trainer = self.trainer
        if log is not None:
            log.write("skip", trainer.step, wall, reason=result.skipped,
                      bad_in_a_row=trainer.bad_steps)
            tqdm.write(f"step {trainer.step + 1}: update skipped ({result.skipped})",
                       file=sys.stderr)
        if trainer.bad_steps >= max(self.cfg.max_bad_steps, 1):
            where = (f"; the last good checkpoint is {self.last_saved}" if self.last_saved
                     else "")
            raise UserError(
                f"training diverged: {trainer.bad_steps} updates in a row had a non-finite "
                f"loss or gradient after step {trainer.step}{where}; try a smaller lr_scale, "
                "a longer warmup_steps, precision fp32 or clip_norm=1")

    def _validate(self, log: MetricsLog | None, wall: float) -> bool:
        """Validate, count it towards early stopping, log it; whether the run's
        valid_metric improved."""
        started = time.perf_counter()
        cfg, progress, step = self.cfg, self.progress, self.trainer.step
        result = self.trainer.evaluate(validation_batches(
            self.valid_data, self.batch.per_batch_tokens, self.plan.model.max_positions,
            seed=cfg.seed, rank=self.context.rank, world_size=self.context.world_size),
            self.valid_precision)
        scores: dict[str, float] = {}
        if self.valid_scores is not None:
            scores = self.valid_scores(self.trainer.raw_model) if self.main else None
            scores = self.context.broadcast(scores)
        if better("loss", result["nll"], progress.best_valid_nll):
            progress.best_valid_nll = result["nll"]
        value = result["nll"] if cfg.valid_metric == "loss" else scores[cfg.valid_metric]
        improved = self.early_stopping.record(progress, value, step)
        self.last_validation = {"step": step, "metric": cfg.valid_metric, "value": value,
                                "nll": result["nll"], "bleu": scores.get("bleu"),
                                "chrf": scores.get("chrf")}
        if log is not None:
            log.write("valid", step, wall, epoch=round(self.epoch, 4),
                      loss=result["loss"], nll=result["nll"], ppl=result["ppl"],
                      tokens=result["tokens"], bleu=scores.get("bleu"), chrf=scores.get("chrf"),
                      metric=cfg.valid_metric, best=improved,
                      bad_validations=progress.bad_validations,
                      seconds=round(time.perf_counter() - started, 3))
            tqdm.write(validation_line(step, result, scores, improved, progress,
                                       cfg.valid_metric, cfg.patience), file=sys.stderr)
        return improved

    def _payload(self) -> dict[str, Any]:
        """A full training checkpoint (collective: every process must call it)."""
        states = self.context.gather(rng_states())
        data = self.plan.record["data"]
        payload = model_payload(self.trainer.raw_model, self.vocab.to_bytes(),
                                (data["src_lang"], data["tgt_lang"]), self.vocab.target_bytes())
        payload.update(
            step=self.trainer.step, epoch=self.epoch, preset=self.plan.preset,
            train_config=self.plan.record["train"], data_digest=self.plan.data_digest,
            world_size=self.context.world_size, trainer=self.trainer.state_dict(),
            sampler=self.sampler.state_dict(), rng=states, progress=self.progress.to_dict(),
        )
        if "init_from" in self.plan.record:
            payload["init_from"] = self.plan.record["init_from"]
        if self.last_validation is not None and self.last_validation["step"] == self.trainer.step:
            # `nmt average --best K` ranks numbered checkpoints by this.
            payload["validation"] = dict(self.last_validation)
        return payload

    def _save(self, best: bool = False, numbered: bool = True) -> None:
        """Write checkpoint_{step}.pt (+ last) and/or checkpoint_best.pt."""
        step = self.trainer.step
        payload = self._payload()
        if not self.main:
            return
        if numbered and self.last_saved_step != step:
            self.last_saved = save_numbered(self.run_dir, payload, step, self.cfg.keep_last)
            self.last_saved_step = step
        if best:
            if self.last_saved_step == step and self.last_saved is not None:
                atomic_link(self.last_saved, self.run_dir / BEST)
            else:
                save_model_file(payload, self.run_dir / BEST)

    def _summary(self, stopped_by: str, peak: float, finished_already: str | None = None
                 ) -> SessionSummary:
        """What this session did; rank 0's carries the lines to print."""
        progress = self.progress
        summary = SessionSummary(
            self.run_dir, self.trainer.step, self.epoch, progress.tgt_tokens,
            progress.src_tokens, progress.wall, progress.flops, peak, self.context.world_size,
            "finished" if finished_already else stopped_by, progress.best_valid_nll,
            self.cfg.valid_metric, progress.best_valid, progress.best_valid_step,
            self.last_saved)
        if self.main:
            summary.lines = (finished_lines(summary, finished_already) if finished_already
                             else report_lines(summary, self.context.device.type,
                                               self.precision, getattr(self.cfg, stopped_by, None)))
        return summary


def train(*, out: str | Path | None = None, resume: str | Path | None = None,
          data: str | Path | None = None, preset: str | None = None,
          config_file: str | Path | None = None, overrides: Iterable[tuple[str, Any]] = (),
          init_from: str | Path | None = None, device: str | None = None, command: str = "",
          progress: bool = True, valid_scores: ValidScores | None = None,
          collective_timeout: float | None = None) -> SessionSummary:
    """`nmt train`: start, resume or refuse the run in `out` (or `resume`), then train one
    session of it.

    overrides: (field, value) pairs of ModelConfig/TrainConfig fields, applied in order
    over the preset and config file; values may be strings, as typed on a command line.
    init_from: a model file or checkpoint whose weights start a new run (fine-tuning; see
    training/init_from.py for its defaults and checks).
    device: 'cpu', 'cuda', 'cuda:N', or None for CUDA when present. Under torchrun every
    process calls this; only rank 0 writes files. valid_scores: a function of the model
    returning its validation {'bleu', 'chrf'} (default: `translation_scores` of the
    validation split with the run's valid_beam and valid_sentences), called when
    cfg.valid_bleu or a valid_metric other than 'loss' asks for them.
    collective_timeout: under torchrun, seconds a process waits for the others in a
    collective before it fails (None: PyTorch's default). A process that stops (killed,
    say) ends the others with a UserError naming it, once they find out: at once where
    its connections close, else after this timeout.
    Returns the summary, whose `lines` the main process should print.
    """
    context = init_distributed(device, collective_timeout)
    if context.device.type == "cpu":
        keep_kernels_once()
    lock = None

    def lock_and_plan() -> RunPlan:
        nonlocal lock
        run_dir = resume if resume is not None else out
        # Held before the run directory is read, until training ends: a second
        # training into the same directory would interleave its checkpoints.
        if run_dir is not None and may_hold_run(Path(run_dir)):
            lock = RunLock(run_dir)
        return plan_run(out=out, resume=resume, data=data, preset=preset,
                        config_file=config_file, overrides=list(overrides),
                        init_from=init_from)
    try:
        plan = context.main_reads(lock_and_plan)
        return _Session(plan, context, progress, valid_scores, command).train()
    except RuntimeError as error:  # what a failed collective raises, among other errors
        lost = context.enabled and context.lost_process_error(f"the run in {resume or out}")
        if not lost:
            raise
        raise lost from error
    finally:
        if lock is not None:
            lock.release()
        shutdown(context)
