"""The training loop: mixed precision, gradient accumulation, DDP, validation, checkpoints.

`Trainer` owns one model's optimizer, schedule and precision and knows how to take one
optimizer step from a list of batches; it touches no files. `train` is the whole of
`nmt train`: it decides the run (see train/run.py), reads the data, builds or restores
the model, loops until a limit or a signal, logs, validates and checkpoints.

One optimizer step sums the loss over every target token of its batches (update_freq of
them per process) and divides the gradient by the number of target tokens of the whole
step over all processes, so accumulation and data parallelism compute the gradient of
one big batch: 2 processes with update_freq 1 train the same model as 1 process with
update_freq 2 (the tests hold them equal to float tolerance).

Precision 'auto' is bf16 autocast where the device has native bf16 (GPUs from Ampere on,
CPUs with AVX-512 BF16 or AMX) and fp32 elsewhere: on the 2-core AVX-512 BF16 EPYC that
this was measured on, bf16 trains the base model at 4000 tokens a batch about 1.9x as
fast as fp32 (bench/train_throughput.py; bench/RESULTS.md). The loss, the gradients, the
weights and Adam's moments stay float32 in every precision.

torch.compile is off unless asked for: on the CPU every new batch shape recompiles (a
tiny run spent over a minute compiling), and no gain was measured on this machine.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from transformer_nmt import __version__
from transformer_nmt.config import DecodeConfig, TrainConfig
from transformer_nmt.data.batching import Batch, TokenBatchSampler, collate
from transformer_nmt.data.binarize import ParallelData, load_split
from transformer_nmt.data.manifest import SPM_MODEL, read_manifest
from transformer_nmt.data.vocab import BOS_ID, EOS_ID, Vocab
from transformer_nmt.decode.search import SpecialIds, greedy_search
from transformer_nmt.errors import UserError
from transformer_nmt.evaluate import read_text, score
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.files import atomic_link
from transformer_nmt.model_file import model_payload, read_model_file, save_model_file
from transformer_nmt.train.checkpoint import BEST, rng_states, save_numbered, set_rng_states
from transformer_nmt.train.distributed import Distributed, init_distributed, shutdown
from transformer_nmt.train.loss import perplexity, projected_label_smoothed_nll
from transformer_nmt.model.flops import train_step_flops
from transformer_nmt.train.metrics import MetricsLog, PeakFlops, format_count, format_duration
from transformer_nmt.runtime import resolve_precision
from transformer_nmt.train.run import RunPlan, plan_run, write_run_config
from transformer_nmt.train.schedule import InverseSqrtSchedule

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The autocast context of `precision` (nothing for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


MATH_ATTENTION_MAX_LEN = 128
"""Longest batch (tokens per sentence) for which CPU bf16 training uses SDPA's math kernel."""


def attention_kernels(device: torch.device, precision: str,
                      length: int) -> contextlib.AbstractContextManager:
    """The SDPA kernel choice for a batch whose longer side is `length` tokens long.

    On CPUs in bf16, the fused flash-attention kernel's backward is slow for the short
    sentences of translation: fwd+bwd of 160 x 8 heads x 25 tokens x 64 takes 105 ms
    with flash and 37-50 ms with the math kernel, 320 x 12 tokens 182 ms against 33-51
    ms (1 thread of the EPYC this was measured on); flash wins from ~250 tokens on. That
    is ~20% of a base-model step at 4000 tokens. Elsewhere PyTorch's own choice stands.
    """
    if device.type == "cpu" and precision == "bf16" and length <= MATH_ATTENTION_MAX_LEN:
        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()


@dataclass
class StepResult:
    """One optimizer step, summed over its batches and over every process."""

    loss: float
    """Smoothed loss summed over target tokens (nats)."""
    nll: float
    """Negative log-likelihood summed over target tokens (nats)."""
    tgt_tokens: int
    src_tokens: int
    sentences: int
    flops: float
    """Analytic training FLOPs of the padded batches."""
    grad_norm: float
    """L2 norm of the normalized gradient before clipping (nan if not computed)."""
    lr: float
    updated: bool
    """False when the update was skipped; `skipped` says why."""
    skipped: str | None = None


class Trainer:
    """One model's optimizer, schedule, precision and data parallelism; no files.

    model: a Transformer (moved to context.device here); it is wrapped in DDP when there
    are several processes and compiled when `compile` is set, while `raw_model` stays
    the plain module for validation and checkpoints.
    """

    def __init__(self, model: Transformer, cfg: TrainConfig, context: Distributed,
                 precision: str, compile: bool = False) -> None:
        self.cfg, self.context, self.precision = cfg, context, precision
        self.device = context.device
        self.raw_model = model.to(self.device)
        self.schedule = InverseSqrtSchedule(model.cfg.d_model, cfg.warmup_steps, cfg.lr_scale)
        # Fused Adam: one kernel over all parameters; on the CPU it is ~5x faster than the
        # foreach implementation (33 against 155 ms for the base model's parameters).
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=self.schedule(1), betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps, fused=True)
        # The scaler of the trainer's own device: a CUDA scaler without a GPU disables
        # itself and would then apply overflowed gradients.
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        network: torch.nn.Module = model
        if context.enabled:
            network = DistributedDataParallel(
                model, device_ids=[self.device] if self.device.type == "cuda" else None)
        self.model = torch.compile(network, dynamic=True) if compile else network
        self.step = 0
        """Optimizer updates taken."""
        self.bad_steps = 0
        """Updates skipped in a row for a non-finite loss or gradient."""
        self.skipped_total = 0
        """Updates skipped for any reason since the run began."""
        self.skip_out_of_memory = self.device.type == "cuda"
        """Skip, rather than raise, a step whose batch runs out of memory: only a GPU's out
        of memory is recoverable; on a CPU it means the machine itself is out of memory."""
        # A one-token batch of zero weight for a process whose share of an epoch has run
        # out or whose step ran out of memory: it must still run forward and backward so
        # that DDP's gradient sync matches.
        one = torch.tensor([[EOS_ID]])
        self._dummy = Batch(one, torch.tensor([[BOS_ID]]), one, 0, 0, [])

    @property
    def parameters(self) -> list[torch.nn.Parameter]:
        """The trained parameters (shared embeddings once)."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _forward_backward(self, batch: Batch, weight: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Backpropagate weight * the batch's summed loss; return (loss, nll) sums."""
        batch = batch.to(self.device, non_blocking=True)
        length = max(batch.src.size(1), batch.tgt_in.size(1))
        with autocast(self.device, self.precision), \
                attention_kernels(self.device, self.precision, length):
            states = self.model(batch.src, batch.tgt_in, project=False)  # (batch, tgt_len, d_model)
            loss, nll = projected_label_smoothed_nll(
                states, self.raw_model.projection_weight, batch.tgt_out,
                self.cfg.label_smoothing, self.raw_model.pad_id)
        scaled = loss * weight
        (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach() * weight, nll * weight

    def train_step(self, batches: list[Batch | None]) -> StepResult:
        """Accumulate the gradients of `batches` (None: this process's share ran out) and
        take one optimizer step, unless the loss or gradient is not finite or a batch ran
        out of GPU memory; then the update is skipped and the reason returned."""
        self.raw_model.train()
        sums = torch.zeros(2, dtype=torch.float32, device=self.device)  # loss, nll
        tgt_tokens = src_tokens = sentences = 0
        flops = 0.0
        out_of_memory = False
        for i, batch in enumerate(batches):
            # Gradients are all-reduced in the backward of the last batch only.
            sync = i == len(batches) - 1 or not self.context.enabled
            with contextlib.nullcontext() if sync else self.model.no_sync():
                real = batch is not None and not out_of_memory
                failed = False
                try:
                    loss, nll = self._forward_backward(batch if real else self._dummy,
                                                       1.0 if real else 0.0)
                except torch.OutOfMemoryError:
                    if not self.skip_out_of_memory:
                        raise
                    failed = out_of_memory = True
                # Recovery waits until the except clause is left: until then the exception's
                # traceback holds the failed batch's frames, and with them its activations.
                if failed:
                    self.optimizer.zero_grad(set_to_none=True)
                    torch.cuda.empty_cache()
                    if sync and self.context.enabled:
                        self._forward_backward(self._dummy, 0.0)
                    continue
            if real:
                sums += torch.stack([loss, nll])
                tgt_tokens += batch.tgt_tokens
                src_tokens += batch.src_tokens
                sentences += len(batch)
                flops += train_step_flops(self.raw_model.cfg, self.raw_model.vocab_size,
                                          batch.src.size(1), batch.tgt_out.size(1), len(batch))
        totals = torch.cat([sums.double(), torch.tensor(
            [tgt_tokens, src_tokens, sentences, flops, out_of_memory], dtype=torch.float64,
            device=self.device)])
        loss_sum, nll_sum, tgt, src, sents, flops, ooms = \
            self.context.all_reduce_sum(totals).tolist()
        result = StepResult(loss_sum, nll_sum, int(tgt), int(src), int(sents), flops,
                            math.nan, self.schedule(self.step + 1), updated=False)
        if ooms:
            result.skipped = "out of GPU memory"
        elif tgt == 0:
            result.skipped = "no target tokens"
        elif not math.isfinite(loss_sum):
            result.skipped = "non-finite loss"
        else:
            self._update(result, tgt)
        self.optimizer.zero_grad(set_to_none=True)
        if result.updated:
            self.step += 1
            self.bad_steps = 0
        else:
            self.skipped_total += 1
            if result.skipped.startswith("non-finite"):
                self.bad_steps += 1
        return result

    def _update(self, result: StepResult, tgt_tokens: float) -> None:
        """Normalize, clip and apply the accumulated gradients, filling in `result`."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.parameters if p.grad is not None]
        # DDP averaged the processes' gradient sums; undo the mean, divide by all tokens.
        torch._foreach_mul_(grads, self.context.world_size / tgt_tokens)
        norm = torch.nn.utils.get_total_norm(grads)
        result.grad_norm = float(norm)
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.parameters, self.cfg.clip_norm, norm)
        self.schedule.apply(self.optimizer, self.step + 1)
        if self.scaler is not None:
            # fp16 overflows are routine while the scaler finds its scale: skipped, but
            # not counted as bad steps.
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            result.updated = self.scaler.get_scale() >= scale
            result.skipped = None if result.updated else "fp16 overflow"
        elif not math.isfinite(result.grad_norm):
            result.skipped = "non-finite gradient"
        else:
            self.optimizer.step()
            result.updated = True

    @torch.no_grad()
    def evaluate(self, batches: Iterable[Batch | None]) -> dict[str, float]:
        """Loss, NLL and perplexity per target token over `batches` and every process."""
        model = self.raw_model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, nll, tokens
        for batch in batches:
            if batch is None:
                continue
            batch = batch.to(self.device)
            length = max(batch.src.size(1), batch.tgt_in.size(1))
            with autocast(self.device, self.precision), \
                    attention_kernels(self.device, self.precision, length):
                states = model(batch.src, batch.tgt_in, project=False)  # (batch, tgt_len, d_model)
                loss, nll = projected_label_smoothed_nll(
                    states, model.projection_weight, batch.tgt_out, self.cfg.label_smoothing,
                    model.pad_id)
            sums += torch.stack([loss.double(), nll.double(),
                                 torch.tensor(batch.tgt_tokens, dtype=torch.float64,
                                              device=self.device)])
        model.train()
        loss, nll, tokens = self.context.all_reduce_sum(sums).tolist()
        tokens = max(tokens, 1.0)
        return {"loss": loss / tokens, "nll": nll / tokens, "ppl": perplexity(nll / tokens),
                "tokens": int(tokens)}

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, gradient scaler, schedule and step counters."""
        return {"optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "scheduler": {"step": self.step, "d_model": self.schedule.d_model,
                              "warmup_steps": self.schedule.warmup_steps,
                              "lr_scale": self.schedule.lr_scale},
                "step": self.step, "bad_steps": self.bad_steps,
                "skipped_total": self.skipped_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()`'s output."""
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.bad_steps = state["step"], state["bad_steps"]
        self.skipped_total = state["skipped_total"]


def greedy_bleu(model: Transformer, data: ParallelData, vocab: Vocab, max_tokens: int,
                device: torch.device, precision: str) -> float:
    """sacreBLEU of greedy translations of a split against its reference text."""
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    limit = model.cfg.max_positions
    hypotheses = [""] * len(data)
    sampler = TokenBatchSampler(data.src_lengths, data.tgt_lengths, max_tokens, seed=0,
                                shuffle=False)
    was_training = model.training
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        for indices in sampler:
            batch = collate(data, indices, max_len=limit)
            found = greedy_search(model, batch.src.to(device), DecodeConfig(beam=1), special,
                                  max_len_limit=limit - 1)
            for index, hypothesis in zip(indices, found):
                hypotheses[index] = vocab.decode(hypothesis.tokens)
    model.train(was_training)
    return score(hypotheses, read_text(data.tgt_text_path))["bleu"]


@dataclass
class TrainSummary:
    """What a `train` call did."""

    run_dir: Path
    step: int
    """Optimizer steps of the run, earlier sessions included."""
    epoch: float
    """Passes over the training data (fractional)."""
    tgt_tokens: int
    """Target tokens trained on, earlier sessions included."""
    src_tokens: int
    wall: float
    """Training seconds, earlier sessions included."""
    flops: float
    """Analytic training FLOPs, all processes, earlier sessions included."""
    peak_flops: float
    """Measured matmul FLOP/s of one device in the training precision."""
    world_size: int
    stopped_by: str
    """'max_steps', 'max_epochs', 'max_time', 'SIGINT', 'SIGTERM' or 'finished' (nothing to do)."""
    best_valid_nll: float | None = None
    checkpoint: Path | None = None
    """The last checkpoint written (None if none was)."""
    lines: list[str] = field(default_factory=list)
    """The closing report, as printed."""


class _SignalFlag:
    """Turns the first SIGINT/SIGTERM into a request to stop after the current step; a
    second one stops at once, the default way."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_SignalFlag":
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, number: int, frame: Any) -> None:
        if self.received is not None:
            signal.signal(number, self._previous[number])
            signal.raise_signal(number)
            return
        self.received = signal.Signals(number).name
        tqdm.write(f"{self.received} received: finishing this step and writing a checkpoint "
                   "(send it again to stop at once)", file=sys.stderr)

    def __exit__(self, *exc: Any) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


class _Session:
    """The state of one `train` call: the loop, its bookkeeping and its files."""

    def __init__(self, plan: RunPlan, context: Distributed, progress: bool,
                 valid_bleu: Callable[[Transformer], float] | None, command: str) -> None:
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
        self.trainer = Trainer(model, self.cfg, context, self.precision, self.cfg.compile)
        self.sampler = TokenBatchSampler(
            self.train_data.src_lengths, self.train_data.tgt_lengths, self.cfg.max_tokens,
            seed=seed, rank=context.rank, world_size=context.world_size)
        self.progress_state = {"wall": 0.0, "tgt_tokens": 0, "src_tokens": 0, "flops": 0.0,
                               "best_valid_nll": None}
        if checkpoint is not None:
            self._restore(checkpoint)
        self.resume_step = None if checkpoint is None else self.trainer.step
        self.valid_bleu = valid_bleu
        if valid_bleu is None and self.cfg.valid_bleu and self.valid_data is not None:
            self.valid_bleu = lambda m: greedy_bleu(m, self.valid_data, self.vocab,
                                                    self.cfg.max_tokens, context.device,
                                                    self.precision)
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
                checkpoint = read_model_file(self.plan.resume_from)
                self._check_checkpoint(checkpoint)
            except UserError as caught:
                error = caught
        checkpoint, error = self.context.broadcast((checkpoint, error))
        if error is not None:
            raise error
        return checkpoint

    def _check_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """UserError if the checkpoint does not belong to this run's model and data."""
        where = self.plan.resume_from
        if "trainer" not in checkpoint:
            raise UserError(f"{where} is a model file without training state; it cannot be resumed")
        if checkpoint.get("data_digest") != self.plan.data_digest:
            raise UserError(f"{where} was trained on other data (digest "
                            f"{str(checkpoint.get('data_digest'))[:12]}, now "
                            f"{self.plan.data_digest[:12]}); resume with the same prepared data")
        model_cfg = self.plan.record["model"]
        for key, value in checkpoint["model_config"].items():
            if model_cfg.get(key) != value:
                raise UserError(f"{where} holds another architecture ({key} {value!r}, the run "
                                f"config says {model_cfg.get(key)!r})")
        if checkpoint["vocab_size"] != len(self.vocab):
            raise UserError(f"{where} has a vocabulary of {checkpoint['vocab_size']}, the data "
                            f"{len(self.vocab)}; resume with the same prepared data")

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        """Continue the optimizer, batch order, random streams and counters."""
        self.trainer.load_state_dict(checkpoint["trainer"])
        self.sampler.load_state_dict(checkpoint["sampler"])
        self.progress_state = dict(checkpoint["progress"])
        states = checkpoint["rng"]
        if len(states) == self.context.world_size:
            set_rng_states(states[self.context.rank])
        elif self.main:
            warnings.warn(f"resuming a run of {len(states)} processes with "
                          f"{self.context.world_size}: the batch order continues, but dropout "
                          "draws new random numbers, so the result differs from an "
                          "uninterrupted run", stacklevel=2)

    @property
    def epoch(self) -> float:
        """Passes over the training data, fractional (batches of every process counted)."""
        batches = max(self.sampler.num_batches, 1)
        done = min(self.sampler.position * self.context.world_size, batches)
        return self.sampler.epoch + done / batches

    def _limit(self, wall: float) -> str | None:
        """The limit that ends training now, if any."""
        cfg = self.cfg
        if self.trainer.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs and self.sampler.epoch >= cfg.max_epochs:
            return "max_epochs"
        if cfg.max_time and wall >= cfg.max_time:
            return "max_time"
        return None

    def _next_batches(self, iterator: Iterator[list[int]]) -> list[Batch | None]:
        """The next update_freq batches of this epoch (fewer at its end); [] are None."""
        batches: list[Batch | None] = []
        limit = self.plan.model.max_positions
        while len(batches) < self.cfg.update_freq and self.sampler.position < len(self.sampler):
            indices = next(iterator)
            batches.append(collate(self.train_data, indices, max_len=limit) if indices else None)
        return batches

    def _valid_batches(self) -> Iterator[Batch | None]:
        sampler = TokenBatchSampler(self.valid_data.src_lengths, self.valid_data.tgt_lengths,
                                    self.cfg.max_tokens, seed=self.cfg.seed, shuffle=False,
                                    rank=self.context.rank, world_size=self.context.world_size)
        limit = self.plan.model.max_positions
        for indices in sampler:
            yield collate(self.valid_data, indices, max_len=limit) if indices else None

    def _payload(self) -> dict[str, Any]:
        """A full training checkpoint (collective: every process must call it)."""
        states = self.context.gather(rng_states())
        payload = model_payload(self.trainer.raw_model, self.vocab_bytes)
        payload.update(
            step=self.trainer.step, epoch=self.epoch, preset=self.plan.preset,
            train_config=self.plan.record["train"], data_digest=self.plan.data_digest,
            world_size=self.context.world_size, trainer=self.trainer.state_dict(),
            sampler=self.sampler.state_dict(), rng=states, progress=dict(self.progress_state),
        )
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

    def _validate(self, log: MetricsLog | None, wall: float) -> float:
        """Validate, log, and return the validation NLL per token."""
        started = time.perf_counter()
        result = self.trainer.evaluate(self._valid_batches())
        bleu = None
        if self.valid_bleu is not None:
            bleu = self.valid_bleu(self.trainer.raw_model) if self.main else None
            bleu = self.context.broadcast(bleu)
        best_before = self.progress_state["best_valid_nll"]
        improved = best_before is None or result["nll"] < best_before
        if improved:
            self.progress_state["best_valid_nll"] = result["nll"]
        if log is not None:
            log.write("valid", self.trainer.step, wall, epoch=round(self.epoch, 4),
                      loss=result["loss"], nll=result["nll"], ppl=result["ppl"],
                      tokens=result["tokens"], bleu=bleu, best=improved,
                      seconds=round(time.perf_counter() - started, 3))
            text = (f"valid step {self.trainer.step}: loss {result['loss']:.3f} nll "
                    f"{result['nll']:.3f} ppl {result['ppl']:.2f}"
                    + (f" BLEU {bleu:.2f}" if bleu is not None else "")
                    + (" (best)" if improved else ""))
            tqdm.write(text, file=sys.stderr)
        return result["nll"]

    def run(self) -> TrainSummary:
        """The loop, from the restored state to a limit or a signal."""
        wall_before = self.progress_state["wall"]
        finished = self._limit(wall_before)
        if finished is not None:
            return self._summary("finished", 0.0, finished_already=finished)
        log = None
        if self.main:
            self.plan.record["sessions"].append({
                "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                "from_step": self.trainer.step, "command": self.command,
                "world_size": self.context.world_size, "device": str(self.context.device),
                "precision": self.precision, "transformer_nmt": __version__,
                "torch": torch.__version__})
            write_run_config(self.run_dir, self.plan.record)
            log = MetricsLog(self.run_dir, self.resume_step)
        peak = PeakFlops(self.context.device, DTYPES[self.precision])
        try:
            with _SignalFlag() as signals:
                stopped_by = self._loop(log, signals, wall_before, peak)
        finally:
            if log is not None:
                log.close()
        return self._summary(stopped_by, peak.value)

    def _loop(self, log: MetricsLog | None, signals: _SignalFlag, wall_before: float,
              peak: PeakFlops) -> str:
        cfg, trainer, state = self.cfg, self.trainer, self.progress_state
        session_start = time.perf_counter()
        last_save_time = session_start
        interval = dict.fromkeys(("loss", "nll", "tgt", "src", "flops", "steps"), 0)
        interval_start = time.perf_counter()
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
                state["wall"] = wall
                seconds = time.perf_counter() - interval_start
                if result.updated:
                    last_update = result
                    state["tgt_tokens"] += result.tgt_tokens
                    state["src_tokens"] += result.src_tokens
                    state["flops"] += result.flops
                    for key, value in (("loss", result.loss), ("nll", result.nll),
                                       ("tgt", result.tgt_tokens), ("src", result.src_tokens),
                                       ("flops", result.flops), ("steps", 1)):
                        interval[key] += value
                    rate = interval["tgt"] / max(seconds, 1e-9)
                    mfu = (interval["flops"] / max(seconds, 1e-9)
                           / (peak.value * self.context.world_size))
                    bar.set_postfix_str(
                        f"loss {result.loss / result.tgt_tokens:.3f} "
                        f"ppl {perplexity(result.nll / result.tgt_tokens):.1f} "
                        f"lr {result.lr:.2e} {rate:.0f} tgt tok/s mfu {mfu:.1%}"
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
                if log is not None and interval["steps"] and (
                        (step and step % cfg.log_every == 0) or stopped_by):
                    self._log_train(log, interval, seconds, last_update, wall, peak.value)
                    interval = dict.fromkeys(interval, 0)
                    interval_start = time.perf_counter()
                validate = self.valid_data is not None and not signalled and (
                    (step and cfg.valid_every and step % cfg.valid_every == 0)
                    or stopped_by is not None)
                improved = False
                pause_start = time.perf_counter()
                if validate:
                    before = state["best_valid_nll"]
                    nll = self._validate(log, wall)
                    improved = before is None or nll < before
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
                # Validating and saving stay out of the speed: the interval's clock skips them.
                interval_start += time.perf_counter() - pause_start
        finally:
            bar.close()
        return stopped_by

    def _log_train(self, log: MetricsLog, interval: dict[str, float], seconds: float,
                   result: StepResult, wall: float, peak: float) -> None:
        tokens = max(interval["tgt"], 1)
        steps = max(interval["steps"], 1)
        seconds = max(seconds, 1e-9)
        log.write("train", self.trainer.step, wall, epoch=round(self.epoch, 4),
                  loss=interval["loss"] / tokens, nll=interval["nll"] / tokens,
                  ppl=perplexity(interval["nll"] / tokens),
                  smoothed_ppl=perplexity(interval["loss"] / tokens), lr=result.lr,
                  grad_norm=result.grad_norm, step_tgt_tokens=interval["tgt"] / steps,
                  step_src_tokens=interval["src"] / steps,
                  tgt_tok_s=interval["tgt"] / seconds,
                  tok_s=(interval["tgt"] + interval["src"]) / seconds,
                  mfu=interval["flops"] / seconds / (peak * self.context.world_size),
                  tokens_seen=self.progress_state["tgt_tokens"],
                  skipped=self.trainer.skipped_total)

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
                f"loss or gradient after step {trainer.step}{where}; try a smaller --lr-scale, "
                "a longer --warmup, --precision fp32 or --set clip_norm=1")

    def _summary(self, stopped_by: str, peak: float, finished_already: str | None = None
                 ) -> TrainSummary:
        state = self.progress_state
        summary = TrainSummary(
            self.run_dir, self.trainer.step, self.epoch, state["tgt_tokens"], state["src_tokens"],
            state["wall"], state["flops"], peak, self.context.world_size,
            "finished" if finished_already else stopped_by, state["best_valid_nll"],
            self.last_saved)
        lines = summary.lines
        if not self.main:
            return summary
        if finished_already:
            lines.append(f"{self.run_dir} has finished training ({finished_already} reached at "
                         f"step {self.trainer.step}); nothing to do. Raise --max-steps, "
                         "--max-epochs or --max-time to train further, or train into a new --out")
            return summary
        cfg = self.cfg
        lines.append(
            f"trained {summary.step} steps ({summary.epoch:.2f} epochs, "
            f"{format_count(summary.tgt_tokens)} target + {format_count(summary.src_tokens)} "
            f"source tokens) in {format_duration(summary.wall)} on {summary.world_size} "
            f"{self.context.device.type} process(es), {self.precision}")
        sustained = summary.wall * summary.world_size * peak
        lines.append(
            f"training cost: {summary.flops:.3g} FLOPs analytic (6 x weights x tokens + "
            f"attention); {sustained:.3g} FLOPs as the paper's Table 2 counts it "
            f"({format_duration(summary.wall)} x {summary.world_size} device(s) x "
            f"{peak / 1e9:.0f} GFLOP/s sustained matmul rate)")
        if summary.best_valid_nll is not None:
            lines.append(f"best validation NLL {summary.best_valid_nll:.3f} (ppl "
                         f"{perplexity(summary.best_valid_nll):.2f}); checkpoints in "
                         f"{self.run_dir}")
        if stopped_by in ("SIGINT", "SIGTERM", "signal"):
            lines.append(f"stopped by {stopped_by} at step {summary.step}; checkpoint "
                         f"{self.last_saved}; continue with: nmt train --resume {self.run_dir}")
        elif stopped_by is not None:
            lines.append(f"stopped by {stopped_by} ({getattr(cfg, stopped_by)}); "
                         f"last checkpoint {self.last_saved}")
        return summary


def train(*, out: str | Path | None = None, resume: str | Path | None = None,
          data: str | Path | None = None, preset: str | None = None,
          config_file: str | Path | None = None, overrides: Iterable[tuple[str, Any]] = (),
          device: str | None = None, command: str = "", progress: bool = True,
          valid_bleu: Callable[[Transformer], float] | None = None) -> TrainSummary:
    """`nmt train`: start, resume or refuse the run in `out` (or `resume`), then train.

    overrides: (field, value) pairs of ModelConfig/TrainConfig fields, applied in order
    over the preset and config file; values may be strings, as typed on a command line.
    device: 'cpu', 'cuda', 'cuda:N', or None for CUDA when present. Under torchrun every
    process calls this; only rank 0 writes files. valid_bleu: a function of the model
    returning a validation score to log (default: greedy BLEU when cfg.valid_bleu).
    Returns the summary, whose `lines` the main process should print.
    """
    context = init_distributed(device)
    try:
        plan, error = None, None
        if context.is_main:
            try:
                plan = plan_run(out=out, resume=resume, data=data, preset=preset,
                                config_file=config_file, overrides=list(overrides))
            except UserError as caught:
                error = caught
        plan, error = context.broadcast((plan, error))
        if error is not None:
            raise error
        session = _Session(plan, context, progress, valid_bleu, command)
        return session.run()
    finally:
        shutdown(context)
