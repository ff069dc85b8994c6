"""One optimizer step of one model: mixed precision, gradient accumulation, data parallelism.

`Trainer` owns a model's optimizer, schedule, precision and DDP wrapper, and knows how to
take one optimizer step from a list of batches and how to evaluate; it touches no files.
A session of `nmt train` (the data, the loop over steps, checkpoints) is training/session.py.

One optimizer step sums the loss over every target token of its batches (update_freq of
them per process) and divides the gradient by the number of target tokens of the whole
step over all processes, so accumulation and data parallelism compute the gradient of
one big batch: 2 processes with update_freq 1 train the same model as 1 process with
update_freq 2 (the tests hold them equal to float tolerance).

The gradients accumulate in buffers of the trainer's own, allocated once beside the
weights: every parameter's `.grad` points at its buffer before the first backward of a
step, so that each backward adds its gradient into it in place, and the buffers are
zeroed after the step. A backward replayed as a CUDA graph returns its gradients in the
graphs' memory pool, which the next micro-batch's replay overwrites; added at once into
buffers outside the pool, they are consumed before that, and CUDA graphs work at any
number of micro-batches a step. A `.grad` left unset before the first backward would
instead take the pool's tensor itself. The buffers keep the gradients' memory between
steps too, one float32 copy of the weights, rather than freeing it after each.

torch.compile is off unless asked for: on the CPU every new batch shape recompiles, which
made a tiny run much slower, and no gain was measured on the CPU.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch.nn.parallel import DistributedDataParallel

from transformer_nmt.config import TrainConfig
from transformer_nmt.data.collate import Batch
from transformer_nmt.data.vocab import BOS_ID, EOS_ID
from transformer_nmt.memory import keep_freed_memory, kept_apart
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.runtime import compiles_per_shape
from transformer_nmt.training.distributed import Distributed
from transformer_nmt.training.flops import train_step_flops
from transformer_nmt.training.loss import perplexity, projected_label_smoothed_nll
from transformer_nmt.training.precision import attention_kernels, autocast
from transformer_nmt.training.schedule import InverseSqrtSchedule


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
        if self.device.type == "cpu":
            keep_freed_memory()
        self._shapes_seen: set[tuple[int, int, int]] | None = (
            set() if compiles_per_shape(self.device, precision) else None)
        """Where products compile a kernel per shape, the (sentences, source length, target
        length) of the batches trained on so far."""
        self.schedule = InverseSqrtSchedule(model.cfg.d_model, cfg.warmup_steps, cfg.lr_scale,
                                            cfg.lr_peak)
        # Fused Adam: one kernel over all parameters; on the CPU it is several times as fast
        # as the foreach implementation.
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
        # Batches of a few fixed shapes (cfg.shape_buckets) get one static graph each;
        # otherwise one graph with symbolic lengths rather than a recompilation per batch.
        self.model = (torch.compile(network, dynamic=not cfg.shape_buckets) if compile
                      else network)
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
        self._grads = [torch.zeros_like(p) for p in self.parameters]
        """The accumulation buffers: one per parameter, its shape, outside any graph pool."""

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
                self.cfg.label_smoothing, self.raw_model.pad_id, self.raw_model.logits_bias)
        scaled = loss * weight
        (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach() * weight, nll * weight

    def train_step(self, batches: list[Batch | None]) -> StepResult:
        """Accumulate the gradients of `batches` (None: this process's share ran out) and
        take one optimizer step, unless the loss or gradient is not finite or a batch ran
        out of GPU memory; then the update is skipped and the reason returned."""
        self.raw_model.train()
        self._point_grads_at_buffers()
        with kept_apart() if self._new_shapes(batches) else contextlib.nullcontext():
            sums = self._accumulate(batches)
        loss_sum, nll_sum, tgt, src, sents, flops, ooms = \
            self.context.all_reduce_sum(sums).tolist()
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
        torch._foreach_zero_(self._grads)
        self._count(result)
        return result

    def _point_grads_at_buffers(self) -> None:
        """Make every parameter's `.grad` its accumulation buffer (zero between steps),
        where something set it to None or to a tensor of its own."""
        for parameter, buffer in zip(self.parameters, self._grads):
            if parameter.grad is not buffer:
                parameter.grad = buffer

    def _new_shapes(self, batches: list[Batch | None]) -> bool:
        """Whether `batches` have a shape (sentences, source length, target length) no step
        has met, where that compiles new kernels; it is then met.

        The whole shape, not only the rows of the linear layers' products (sentences x
        length): attention's products are per sentence and head, so a batch of known row
        count but new lengths still compiles kernels (tens of MB in the quickstart's first
        epoch, outside `kept_apart` when only row counts were keyed).
        """
        if self._shapes_seen is None:
            return False
        shapes = {(batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1))
                  for batch in batches if batch is not None}
        new = shapes - self._shapes_seen
        self._shapes_seen |= new
        return bool(new)

    def _accumulate(self, batches: list[Batch | None]) -> torch.Tensor:
        """Backpropagate every batch of a step; return this process's sums (loss, nll,
        target tokens, source tokens, sentences, FLOPs, out of memory) as float64."""
        sums = torch.zeros(2, dtype=torch.float32, device=self.device)  # loss, nll
        tgt_tokens = src_tokens = sentences = 0
        flops = 0.0
        out_of_memory = False
        for i, batch in enumerate(batches):
            # Gradients are all-reduced in the backward of the last batch only.
            sync = i == len(batches) - 1 or not self.context.enabled
            real = batch is not None and not out_of_memory
            losses = self._backward_or_recover(batch if real else self._dummy,
                                               1.0 if real else 0.0, sync)
            if losses is None:
                out_of_memory = True
            elif real:
                sums += torch.stack(losses)
                tgt_tokens += batch.tgt_tokens
                src_tokens += batch.src_tokens
                sentences += len(batch)
                flops += train_step_flops(self.raw_model.cfg, self.raw_model.vocab_size,
                                          batch.src.size(1), batch.tgt_out.size(1), len(batch))
        return torch.cat([sums.double(), torch.tensor(
            [tgt_tokens, src_tokens, sentences, flops, out_of_memory], dtype=torch.float64,
            device=self.device)])

    def _backward_or_recover(self, batch: Batch, weight: float, sync: bool
                             ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """`_forward_backward` of one batch (gradients synced when `sync`); None if it ran
        out of GPU memory, after freeing what it held."""
        failed = False
        with contextlib.nullcontext() if sync else self.model.no_sync():
            try:
                return self._forward_backward(batch, weight)
            except torch.OutOfMemoryError:
                if not self.skip_out_of_memory:
                    raise
                failed = True
        # Recovery waits until the except clause is left: until then the exception's
        # traceback holds the failed batch's frames, and with them its activations.
        if failed:
            torch._foreach_zero_(self._grads)
            self._point_grads_at_buffers()
            torch.cuda.empty_cache()
            if sync and self.context.enabled:
                self._forward_backward(self._dummy, 0.0)
        return None

    def _count(self, result: StepResult) -> None:
        """Count an update, or a skipped one (and a bad one in a row if non-finite)."""
        if result.updated:
            self.step += 1
            self.bad_steps = 0
        else:
            self.skipped_total += 1
            if result.skipped.startswith("non-finite"):
                self.bad_steps += 1

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
    def evaluate(self, batches: Iterable[Batch | None], precision: str | None = None
                 ) -> dict[str, float]:
        """Loss, NLL and perplexity per target token over `batches` and every process, in
        `precision` (None: the training's); the model's training mode is left as it was
        found."""
        precision = precision or self.precision
        was_training = self.raw_model.training
        model = self.raw_model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, nll, tokens
        for batch in batches:
            if batch is None:
                continue
            batch = batch.to(self.device)
            length = max(batch.src.size(1), batch.tgt_in.size(1))
            with autocast(self.device, precision), \
                    attention_kernels(self.device, precision, length):
                states = model(batch.src, batch.tgt_in, project=False)  # (batch, tgt_len, d_model)
                loss, nll = projected_label_smoothed_nll(
                    states, model.projection_weight, batch.tgt_out, self.cfg.label_smoothing,
                    model.pad_id, model.logits_bias)
            sums += torch.stack([loss.double(), nll.double(),
                                 torch.tensor(batch.tgt_tokens, dtype=torch.float64,
                                              device=self.device)])
        model.train(was_training)
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
