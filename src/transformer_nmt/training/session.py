"""The whole of `nmt train`: decide the run, read the data, build or restore the model,
loop until a limit or a signal, log, validate and checkpoint.

`train` is the entry point; every process of a torchrun launch calls it and only rank 0
writes files. One optimizer step is `Trainer.train_step` (training/trainer.py); what the run
has done is kept in training/progress.py's dataclasses; the run directory's rules are
training/run.py's.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from tqdm import tqdm

from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.collate import Batch, collate
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.manifest import SPM_MODEL, read_manifest
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_link
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload, read_model_file, save_model_file
from transformer_nmt.runtime import resolve_precision
from transformer_nmt.training.batch_size import describe_batch, plan_batch
from transformer_nmt.training.checkpoint import BEST, rng_states, save_numbered, set_rng_states
from transformer_nmt.training.distributed import Distributed, init_distributed, shutdown
from transformer_nmt.training.init_from import read_init_weights
from transformer_nmt.training.loss import perplexity
from transformer_nmt.training.metrics import MetricsLog, PeakFlops, format_duration
from transformer_nmt.training.precision import DTYPES
from transformer_nmt.training.progress import (Interval, ProgressState, TrainSummary,
                                            finished_lines, report_lines)
from transformer_nmt.training.run import (RunPlan, check_checkpoint, may_hold_run, plan_run,
                                       resume_candidates, session_record, write_run_config)
from transformer_nmt.training.run_lock import RunLock
from transformer_nmt.training.signals import StopSignals
from transformer_nmt.training.trainer import StepResult, Trainer
from transformer_nmt.training.validation import better, translation_scores, validation_batches


class _Session:
    """The state of one `train` call: the loop, its bookkeeping and its files."""

    def __init__(self, plan: RunPlan, context: Distributed, progress: bool,
                 valid_scores: Callable[[Transformer], dict[str, float]] | None,
                 command: str) -> None:
        self.plan, self.context, self.cfg = plan, context, plan.train
        self.main = context.is_main
        self.run_dir = plan.run_dir
        self.precision = resolve_precision(self.cfg.precision, context.device, training=True)
        self.train_data = load_split(plan.data_dir, "train")
        if len(self.train_data) == 0:
            raise UserError(f"{plan.data_dir}: the train split has no pairs")
        self.valid_data = (load_split(plan.data_dir, "valid")
                           if "valid" in read_manifest(plan.data_dir)["splits"] else None)
        self.vocab = Vocab.load(plan.data_dir / SPM_MODEL)
        self.vocab_bytes = self.vocab.to_bytes()

        seed = self.cfg.seed
        torch.manual_seed(seed)
        np.random.seed(seed)
        model = Transformer(plan.model, len(self.vocab), self.vocab.pad_id)
        # Dropout streams differ per process (else every rank would drop the same units)
        # and are independent of the stream that initialized the weights.
        dropout_seed = np.random.SeedSequence([seed, 1, context.rank]).generate_state(1)[0]
        torch.manual_seed(int(dropout_seed))

        checkpoint = self._read_checkpoint()
        if checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
        elif self.cfg.init_from:
            model.load_state_dict(self._read_init_weights()["model"])
        self.trainer = Trainer(model, self.cfg, context, self.precision, self.cfg.compile)
        self.batch = plan_batch(self.cfg.batch_tokens, self.cfg.max_tokens,
                                self.cfg.update_freq, context.world_size)
        self.sampler = TokenBatchSampler(
            self.train_data.src_lengths, self.train_data.tgt_lengths,
            self.batch.per_batch_tokens, seed=seed, rank=context.rank,
            world_size=context.world_size)
        self.progress_state = ProgressState()
        if checkpoint is not None:
            self._restore(checkpoint)
        self.resume_step = None if checkpoint is None else self.trainer.step
        if self.valid_data is None and (self.cfg.patience or self.cfg.valid_metric != "loss"):
            raise UserError(f"{plan.data_dir} has no valid split, which valid_metric "
                            f"{self.cfg.valid_metric!r} and patience need; prepare the data "
                            "with valid files or a held-out --valid-size")
        self.valid_scores = None
        if self.cfg.valid_bleu or self.cfg.valid_metric != "loss":
            self.valid_scores = valid_scores or (lambda m: translation_scores(
                m, self.valid_data, self.vocab, self.batch.per_batch_tokens, context.device,
                self.precision, self.cfg.valid_beam, self.cfg.valid_sentences))
        self.last_validation: dict[str, Any] | None = None
        self.command = command
        self.show_progress = progress and self.main
        self.last_saved: Path | None = None
        self.last_saved_step = -1

    def _read_checkpoint(self) -> dict[str, Any] | None:
        """Rank 0 reads the checkpoint to resume from and hands it to every process, so
        that only rank 0 needs to see the run directory."""
        checkpoint, error = None, None
        if self.main and self.plan.resume_from is not None:
            try:
                checkpoint = self._newest_readable_checkpoint()
                check_checkpoint(checkpoint, self.plan, len(self.vocab))
            except UserError as caught:
                error = caught
        checkpoint, error = self.context.broadcast((checkpoint, error))
        if error is not None:
            raise error
        return checkpoint

    def _read_init_weights(self) -> dict[str, Any]:
        """Rank 0 reads the model a fine-tuning run starts from and hands it to every
        process (a run resumed from its own checkpoints never reads it again)."""
        payload, error = None, None
        if self.main:
            try:
                payload = read_init_weights(Path(self.cfg.init_from),
                                            self.plan.record.get("init_from"),
                                            self.plan.model, self.plan.data_dir)
            except UserError as caught:
                error = caught
        payload, error = self.context.broadcast((payload, error))
        if error is not None:
            raise error
        return payload

    def _newest_readable_checkpoint(self) -> dict[str, Any]:
        """The newest checkpoint of the run that can be read, saying which damaged ones
        were skipped and why; the error of the newest if none can be read."""
        candidates = resume_candidates(self.plan.run_dir)
        first_error = None
        for path in candidates:
            try:
                checkpoint = read_model_file(path)
            except UserError as error:
                first_error = first_error or error
                tqdm.write(f"skipping {path}: {error}", file=sys.stderr)
                continue
            if path != candidates[0]:
                tqdm.write(f"resuming from {path}, the newest checkpoint that could be read",
                           file=sys.stderr)
            return checkpoint
        raise first_error

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        """Continue the optimizer, batch order, random streams and counters."""
        self.trainer.load_state_dict(checkpoint["trainer"])
        self.sampler.load_state_dict(checkpoint["sampler"])
        self.progress_state = ProgressState.from_dict(checkpoint["progress"])
        states, world_size = checkpoint["rng"], self.context.world_size
        if len(states) == world_size:
            set_rng_states(states[self.context.rank])
        changes = []
        if len(states) != world_size:
            changes.append(f"{len(states)} processes before, {world_size} now: dropout "
                           "draws new random numbers")
        before, now = checkpoint["sampler"]["max_tokens"], self.batch.per_batch_tokens
        if before != now:
            changes.append(f"batches of {before} tokens before, {now} now: the epoch goes on "
                           "from the same fraction of batches cut anew")
        if changes and self.main:
            warnings.warn(f"resuming with {'; and '.join(changes)}; the result differs from "
                          "an uninterrupted run", stacklevel=2)

    @property
    def epoch(self) -> float:
        """Passes over the training data, fractional (batches of every process counted)."""
        return self.sampler.epoch + self.sampler.consumed / max(self.sampler.num_batches, 1)

    def _limit(self, wall: float) -> str | None:
        """The limit that ends training now, if any."""
        cfg = self.cfg
        if self.trainer.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs and self.sampler.epoch >= cfg.max_epochs:
            return "max_epochs"
        if cfg.max_time and wall >= cfg.max_time:
            return "max_time"
        if cfg.patience and self.progress_state.bad_validations >= cfg.patience:
            return "patience"
        return None

    def _next_batches(self, iterator: Iterator[list[int]]) -> list[Batch | None]:
        """The next update_freq batches of this epoch (fewer at its end); [] are None."""
        batches: list[Batch | None] = []
        limit = self.plan.model.max_positions
        while (len(batches) < self.batch.update_freq
               and self.sampler.position < len(self.sampler)):
            indices = next(iterator)
            batches.append(collate(self.train_data, indices, max_len=limit) if indices else None)
        return batches

    def _payload(self) -> dict[str, Any]:
        """A full training checkpoint (collective: every process must call it)."""
        states = self.context.gather(rng_states())
        data = self.plan.record["data"]
        payload = model_payload(self.trainer.raw_model, self.vocab_bytes,
                                (data["src_lang"], data["tgt_lang"]))
        payload.update(
            step=self.trainer.step, epoch=self.epoch, preset=self.plan.preset,
            train_config=self.plan.record["train"], data_digest=self.plan.data_digest,
            world_size=self.context.world_size, trainer=self.trainer.state_dict(),
            sampler=self.sampler.state_dict(), rng=states,
            progress=self.progress_state.to_dict(),
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

    def _validate(self, log: MetricsLog | None, wall: float) -> bool:
        """Validate, log, and return whether the run's valid_metric improved."""
        started = time.perf_counter()
        cfg, state, step = self.cfg, self.progress_state, self.trainer.step
        result = self.trainer.evaluate(validation_batches(
            self.valid_data, self.batch.per_batch_tokens, self.plan.model.max_positions,
            seed=cfg.seed, rank=self.context.rank, world_size=self.context.world_size))
        scores: dict[str, float] = {}
        if self.valid_scores is not None:
            scores = self.valid_scores(self.trainer.raw_model) if self.main else None
            scores = self.context.broadcast(scores)
        if better("loss", result["nll"], state.best_valid_nll):
            state.best_valid_nll = result["nll"]
        value = result["nll"] if cfg.valid_metric == "loss" else scores[cfg.valid_metric]
        improved = better(cfg.valid_metric, value, state.best_valid)
        if improved:
            state.best_valid, state.best_valid_step, state.bad_validations = value, step, 0
        else:
            state.bad_validations += 1
        self.last_validation = {"step": step, "metric": cfg.valid_metric, "value": value,
                                "nll": result["nll"], "bleu": scores.get("bleu"),
                                "chrf": scores.get("chrf")}
        if log is not None:
            log.write("valid", step, wall, epoch=round(self.epoch, 4),
                      loss=result["loss"], nll=result["nll"], ppl=result["ppl"],
                      tokens=result["tokens"], bleu=scores.get("bleu"), chrf=scores.get("chrf"),
                      metric=cfg.valid_metric, best=improved,
                      bad_validations=state.bad_validations,
                      seconds=round(time.perf_counter() - started, 3))
            text = (f"valid step {step}: loss {result['loss']:.3f} nll "
                    f"{result['nll']:.3f} ppl {result['ppl']:.2f}"
                    + "".join(f" {name} {scores[name]:.2f}" for name in ("bleu", "chrf")
                              if name in scores)
                    + (" (best)" if improved else
                       f" (best {cfg.valid_metric} {state.best_valid:.3f} at step "
                       f"{state.best_valid_step}; {state.bad_validations} without improvement"
                       + (f" of patience {cfg.patience})" if cfg.patience else ")")))
            tqdm.write(text, file=sys.stderr)
        return improved

    def run(self) -> TrainSummary:
        """The loop, from the restored state to a limit or a signal."""
        wall_before = self.progress_state.wall
        finished = self._limit(wall_before)
        if finished is not None:
            return self._summary("finished", 0.0, finished_already=finished)
        log = None
        if self.main:
            self.plan.record["sessions"].append(session_record(
                from_step=self.trainer.step, command=self.command,
                world_size=self.context.world_size, device=str(self.context.device),
                precision=self.precision, batch=self.batch._asdict()))
            write_run_config(self.run_dir, self.plan.record)
            tqdm.write(describe_batch(self.batch, self.context.world_size), file=sys.stderr)
            if self.resume_step is None and self.cfg.init_from:
                tqdm.write(f"fine-tuning from the weights of {self.cfg.init_from}: fresh "
                           f"optimizer, {self.cfg.warmup_steps} warm-up steps to a peak rate "
                           f"of {self.trainer.schedule.peak:.3g}", file=sys.stderr)
            log = MetricsLog(self.run_dir, self.resume_step)
        peak = PeakFlops(self.context.device, DTYPES[self.precision])
        try:
            with StopSignals() as signals:
                stopped_by = self._loop(log, signals, wall_before, peak)
        finally:
            if log is not None:
                log.close()
        return self._summary(stopped_by, peak.value)

    def _loop(self, log: MetricsLog | None, signals: StopSignals, wall_before: float,
              peak: PeakFlops) -> str:
        cfg, trainer, state = self.cfg, self.trainer, self.progress_state
        session_start = time.perf_counter()
        last_save_time = session_start
        interval = Interval()
        # Under a time limit the step limit is usually far away: a bar towards it would
        # promise an ETA of days, so the bar counts steps and the postfix says the time left.
        bar = tqdm(total=None if cfg.max_time else cfg.max_steps, initial=trainer.step,
                   unit="step", dynamic_ncols=True, disable=not self.show_progress,
                   file=sys.stderr)
        iterator = iter(self.sampler)
        stopped_by = None
        last_update: StepResult | None = None
        try:
            while stopped_by is None:
                batches = self._next_batches(iterator)
                result = trainer.train_step(batches)
                if self.sampler.position >= len(self.sampler):
                    self.sampler.set_epoch(self.sampler.epoch + 1)
                    iterator = iter(self.sampler)
                wall = wall_before + time.perf_counter() - session_start
                state.wall = wall
                seconds = interval.seconds()
                if result.updated:
                    last_update = result
                    state.add(result)
                    interval.add(result)
                    bar.set_postfix_str(
                        f"loss {result.loss / result.tgt_tokens:.3f} "
                        f"ppl {perplexity(result.nll / result.tgt_tokens):.1f} "
                        f"lr {result.lr:.2e} {interval.tgt / seconds:.0f} tgt tok/s "
                        f"mfu {interval.mfu(seconds, peak.value, self.context.world_size):.1%}"
                        + (f" {format_duration(max(cfg.max_time - wall, 0))} left"
                           if cfg.max_time else ""), refresh=False)
                    bar.update(1)
                else:
                    self._report_skip(result, log, wall)

                signalled, time_up, save_due = self.context.any(
                    signals.received is not None,
                    bool(cfg.max_time) and wall >= cfg.max_time,
                    bool(cfg.save_every_minutes)
                    and time.perf_counter() - last_save_time >= 60 * cfg.save_every_minutes)
                stopped_by = self._limit(wall) or ((signals.received or "signal") if signalled
                                                   else None)
                # Step-numbered events happen once per step number, on its update.
                step = trainer.step if result.updated else None
                if log is not None and interval.steps and (
                        (step and step % cfg.log_every == 0) or stopped_by):
                    log.write("train", trainer.step, wall, epoch=round(self.epoch, 4),
                              **interval.record(seconds, last_update, peak.value,
                                                self.context.world_size),
                              tokens_seen=state.tgt_tokens, skipped=trainer.skipped_total)
                    interval.reset()
                validate = self.valid_data is not None and not signalled and (
                    (step and cfg.valid_every and step % cfg.valid_every == 0)
                    or stopped_by is not None)
                improved = False
                pause_start = time.perf_counter()
                if validate:
                    improved = self._validate(log, wall)
                    stopped_by = stopped_by or self._limit(wall)
                if (save_due or stopped_by is not None
                        or (step and cfg.save_every and step % cfg.save_every == 0)):
                    self._save(best=improved)
                    last_save_time = time.perf_counter()
                elif improved:
                    self._save(best=True, numbered=False)
                if validate or save_due:
                    # Pauses re-measure MFU's denominator: a start-up measurement taken
                    # while the cores were shared would inflate every MFU of the run.
                    peak.refresh()
                interval.started += time.perf_counter() - pause_start
        finally:
            bar.close()
        return stopped_by

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

    def _summary(self, stopped_by: str, peak: float, finished_already: str | None = None
                 ) -> TrainSummary:
        state = self.progress_state
        summary = TrainSummary(
            self.run_dir, self.trainer.step, self.epoch, state.tgt_tokens, state.src_tokens,
            state.wall, state.flops, peak, self.context.world_size,
            "finished" if finished_already else stopped_by, state.best_valid_nll,
            self.cfg.valid_metric, state.best_valid, state.best_valid_step, self.last_saved)
        if self.main:
            summary.lines = (finished_lines(summary, finished_already) if finished_already
                             else report_lines(summary, self.context.device.type,
                                               self.precision, getattr(self.cfg, stopped_by, None)))
        return summary


def train(*, out: str | Path | None = None, resume: str | Path | None = None,
          data: str | Path | None = None, preset: str | None = None,
          config_file: str | Path | None = None, overrides: Iterable[tuple[str, Any]] = (),
          init_from: str | Path | None = None, device: str | None = None, command: str = "",
          progress: bool = True,
          valid_scores: Callable[[Transformer], dict[str, float]] | None = None
          ) -> TrainSummary:
    """`nmt train`: start, resume or refuse the run in `out` (or `resume`), then train.

    overrides: (field, value) pairs of ModelConfig/TrainConfig fields, applied in order
    over the preset and config file; values may be strings, as typed on a command line.
    init_from: a model file or checkpoint whose weights start a new run (fine-tuning; see
    training/init_from.py for its defaults and checks).
    device: 'cpu', 'cuda', 'cuda:N', or None for CUDA when present. Under torchrun every
    process calls this; only rank 0 writes files. valid_scores: a function of the model
    returning its validation {'bleu', 'chrf'} (default: `translation_scores` of the
    validation split with the run's valid_beam and valid_sentences), called when
    cfg.valid_bleu or a valid_metric other than 'loss' asks for them.
    Returns the summary, whose `lines` the main process should print.
    """
    context = init_distributed(device)
    lock = None
    try:
        plan, error = None, None
        if context.is_main:
            try:
                run_dir = resume if resume is not None else out
                # Held before the run directory is read, until training ends: a second
                # training into the same directory would interleave its checkpoints.
                if run_dir is not None and may_hold_run(Path(run_dir)):
                    lock = RunLock(run_dir)
                plan = plan_run(out=out, resume=resume, data=data, preset=preset,
                                config_file=config_file, overrides=list(overrides),
                                init_from=init_from)
            except UserError as caught:
                error = caught
        plan, error = context.broadcast((plan, error))
        if error is not None:
            raise error
        session = _Session(plan, context, progress, valid_scores, command)
        return session.run()
    finally:
        if lock is not None:
            lock.release()
        shutdown(context)
