"""Label-smoothed cross entropy (section 5.4 of the paper).

The smoothed target distribution is q' = (1 - eps) * one_hot(y) + eps / V over the whole
vocabulary V (Szegedy et al., 2016; the same as `F.cross_entropy(label_smoothing=eps)`).
Both losses come back as sums over the non-padding target tokens: the trainer divides by
the number of target tokens of the whole optimizer step, summed over accumulated batches
and over processes, so that gradient accumulation and data parallelism compute exactly
the gradient of one big batch.

Per position, with z the logits and lse = log sum_k exp(z_k):
    nll  = lse - z_y
    loss = (1 - eps) * nll + eps * (lse - mean_k z_k)
    d loss / d z = softmax(z) - (1 - eps) * one_hot(y) - eps / V
The forward never materializes the log-probabilities and the backward writes that
gradient in one (batch, tgt_len, vocab) buffer, where autograd through log_softmax would
keep the log-probabilities alive and add up three such buffers, the largest of a
training step, and the difference shows in a CPU training step's time.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


class _LabelSmoothedNLL(torch.autograd.Function):
    """Summed smoothed loss and NLL with a hand-written, single-buffer backward."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float,
                pad_id: int) -> tuple[Tensor, Tensor]:
        real = target.ne(pad_id)  # (batch, tgt_len)
        z = logits.float()  # (batch, tgt_len, vocab)
        lse = torch.logsumexp(z, dim=-1)  # (batch, tgt_len)
        nll = (lse - z.gather(-1, target.unsqueeze(-1)).squeeze(-1)).masked_fill(~real, 0.0)
        uniform = (lse - z.mean(dim=-1)).masked_fill(~real, 0.0)
        ctx.save_for_backward(logits, target, real, lse)
        ctx.epsilon = epsilon
        nll = nll.sum()
        return (1.0 - epsilon) * nll + epsilon * uniform.sum(), nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        # grad_nll is zero: the NLL is reported, never differentiated.
        logits, target, real, lse = ctx.saved_tensors
        epsilon = ctx.epsilon
        # softmax(z), (batch, tgt_len, vocab), in a new float32 buffer
        grad = logits.to(torch.float32, copy=True).sub_(lse.unsqueeze(-1)).exp_()
        grad.sub_(epsilon / logits.size(-1))
        grad.scatter_add_(-1, target.unsqueeze(-1),
                          torch.full_like(lse, epsilon - 1.0).unsqueeze(-1))
        grad.mul_((real * grad_loss).unsqueeze(-1))
        return grad.to(logits.dtype), None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float,
                       pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Summed smoothed loss and summed negative log-likelihood of `target` under `logits`.

    logits: (batch, tgt_len, vocab) in any float dtype; the softmax runs in float32.
    target: (batch, tgt_len) token ids; positions equal to pad_id count for nothing.
    Returns (loss, nll), two float32 scalars in nats, summed over the real tokens; the
    gradient flows through `loss`, `nll` is for reporting.
    """
    loss, nll = _LabelSmoothedNLL.apply(logits, target, epsilon, pad_id)
    return loss, nll.detach()


class _ProjectedLabelSmoothedNLL(torch.autograd.Function):
    """The pre-softmax projection and the smoothed loss of a chunk of tokens at a time.

    The forward computes, chunk by chunk, the logits, both sums and (when a gradient is
    wanted) the gradients of the loss with respect to the decoder states and the projection
    weight, which need the same logits; the backward only scales them by the incoming
    gradient (the loss is linear in it). No (tokens, vocab) tensor outlives its chunk, and
    padding positions are never projected.
    """

    @staticmethod
    def forward(ctx, states: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                epsilon: float, pad_id: int, dtype: torch.dtype, want_grad: bool
                ) -> tuple[Tensor, Tensor]:
        # states (tokens, d_model); weight (vocab, d_model); bias (vocab,) or None;
        # target (tokens,)
        vocab = weight.size(0)
        real = target.ne(pad_id).nonzero().squeeze(1)  # (real,) positions that count
        hidden = states.index_select(0, real).to(dtype)  # (real, d_model)
        labels = target.index_select(0, real).unsqueeze(1)  # (real, 1)
        projection = weight.to(dtype)  # (vocab, d_model)
        bias = None if bias is None else bias.to(dtype)  # (vocab,), never trained
        if want_grad:
            grad_states = torch.zeros(states.shape, dtype=torch.float32, device=states.device)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        nll = states.new_zeros((), dtype=torch.float32)
        uniform = states.new_zeros((), dtype=torch.float32)
        rows = _chunk_rows(vocab, hidden.size(0), hidden.device)
        for start in range(0, hidden.size(0), rows):
            chunk, chunk_labels = hidden[start: start + rows], labels[start: start + rows]
            count = chunk.size(0)
            # Only the last chunk is short: its products run on up to CHUNK_ROW_MULTIPLE
            # rows of zeros more, so that they meet a few shapes rather than one per batch.
            chunk = _pad_rows(chunk, count + -count % CHUNK_ROW_MULTIPLE)
            z = (chunk @ projection.t() if bias is None
                 else torch.addmm(bias, chunk, projection.t())).float()[:count]  # (count, vocab)
            lse = torch.logsumexp(z, dim=-1, keepdim=True)  # (count, 1)
            nll += (lse - z.gather(1, chunk_labels)).sum()
            uniform += (lse - z.mean(dim=-1, keepdim=True)).sum()
            if not want_grad:
                continue
            # d loss / d z = softmax(z) - (1 - eps) * one_hot(y) - eps / V, in z's buffer
            grad = z.sub_(lse).exp_().sub_(epsilon / vocab)
            grad.scatter_add_(1, chunk_labels, torch.full_like(lse, epsilon - 1.0))
            grad = _pad_rows(grad.to(dtype), chunk.size(0))  # zero rows past count
            grad_states.index_copy_(0, real[start: start + rows],
                                    (grad @ projection).float()[:count])
            grad_weight += (grad.t() @ chunk).float()  # (vocab, d_model)
        if want_grad:
            ctx.save_for_backward(grad_states, grad_weight)
            ctx.dtypes = states.dtype, weight.dtype
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        # grad_nll is zero: the NLL is reported, never differentiated.
        grad_states, grad_weight = ctx.saved_tensors
        states_dtype, weight_dtype = ctx.dtypes
        return ((grad_states * grad_loss).to(states_dtype),
                (grad_weight * grad_loss).to(weight_dtype), None, None, None, None, None, None)


CHUNK_ROW_MULTIPLE = 64
"""The rows of every chunk's products are a multiple of this (padded with zeros): a
product of a new shape costs, in bf16 on a CPU, a kernel compiled and kept (runtime.py)."""

CHUNK_LOGITS = 2 ** 23
"""Logits per chunk of projected_label_smoothed_nll: 1024 tokens at a vocabulary of 8000
(1048 rounded down to CHUNK_ROW_MULTIPLE), a quarter of a 4000-token batch's."""


def _chunk_rows(vocab: int, tokens: int, device: torch.device) -> int:
    """Rows per chunk of `tokens` rows on `device`: on a CPU, CHUNK_LOGITS' worth, a
    multiple of CHUNK_ROW_MULTIPLE where that many fit, so that only the last chunk needs
    padding. On a GPU all of them in one chunk: its memory holds a batch's logits, and
    each chunk costs a dozen kernel launches, which bound a GPU's step, not its products.
    """
    if device.type != "cpu":
        return max(tokens, 1)
    rows = max(1, CHUNK_LOGITS // vocab)
    return rows - rows % CHUNK_ROW_MULTIPLE if rows >= CHUNK_ROW_MULTIPLE else rows


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    """`x` (n, d) with rows of zeros appended up to `rows`; `x` itself when n == rows."""
    return x if x.size(0) == rows else F.pad(x, (0, 0, 0, rows - x.size(0)))


def projected_label_smoothed_nll(states: Tensor, weight: Tensor, target: Tensor,
                                 epsilon: float, pad_id: int = 0, bias: Tensor | None = None
                                 ) -> tuple[Tensor, Tensor]:
    """label_smoothed_nll(states @ weight.T + bias, ...) without ever holding all the logits.

    states: (batch, tgt_len, d_model) the decoder's output; weight: (vocab, d_model) the
    pre-softmax projection (the target embedding when they are tied); bias: (vocab,) the
    logits bias, which gets no gradient (Transformer.logits_bias), or None; target as
    in label_smoothed_nll. Under autocast the products run in the autocast dtype, as
    F.linear's would; the softmax and the sums run in float32. The whole-batch logits,
    their gradient and logsumexp's temporary, three (tokens, vocab) float32 tensors, are
    the largest of a training step; this keeps one chunk's instead, and computes the
    same products.
    """
    device = states.device.type
    dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
             else states.dtype)
    # Decided here: inside forward grad mode is off, and ctx.needs_input_grad says True
    # for the weight (a parameter) even under no_grad, as in validation.
    want_grad = torch.is_grad_enabled() and (states.requires_grad or weight.requires_grad)
    with torch.autocast(device, enabled=False):
        loss, nll = _ProjectedLabelSmoothedNLL.apply(
            states.reshape(-1, states.size(-1)), weight, bias, target.reshape(-1), epsilon,
            pad_id, dtype, want_grad)
    return loss, nll.detach()


def perplexity(loss_per_token: float) -> float:
    """exp(loss) for a per-token loss in nats, inf instead of an overflow."""
    try:
        return math.exp(loss_per_token)
    except OverflowError:
        return math.inf
