"""How a Translator decodes: the search, the device and precision, how lines are
batched and by how many workers (`TranslatorOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from transformer_nmt.config import DECODE_ENGINES, DecodeConfig
from transformer_nmt.decode.device.policy import batch_size
from transformer_nmt.decode.device.threads import all_cores, default_workers
from transformer_nmt.errors import UserError
from transformer_nmt.runtime import DEFAULT_DEVICE, resolve_runtime

@dataclass(frozen=True)
class TranslatorOptions:
    """How a Translator decodes: the search, where and in which precision, and how lines
    are batched. Fields left None are decided by `resolved`."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    """The search settings of a call that gives none: beam, length penalty, longest
    output, n-best, sampling."""
    engine: str = "auto"
    """The runtime that searches: 'ctranslate2' (the model converted once and cached),
    'torch' (the paper's search, the reference), or 'auto': CTranslate2 where it can run
    the model, the device and the precision, and batch invariance is not asked for
    (transformer_nmt.decode.runtime.choice). Terminology constraints and sampling always
    run on torch."""
    device: str | torch.device | None = DEFAULT_DEVICE
    """'cpu', 'cuda', 'cuda:N', or None for CUDA when present (the CPU for int8), as
    transformer_nmt.runtime decides."""
    precision: str = "auto"
    """auto, fp32, bf16 or int8 (transformer_nmt.runtime.DECODE_PRECISIONS). On
    CTranslate2, 'auto' is its int8 on a CPU (transformer_nmt.decode.runtime.choice); on
    torch, bf16 where its products measured clearly faster than fp32's, else fp32
    (transformer_nmt.runtime.auto_decoding_precision)."""
    batch_size: int | None = None
    """Most sentences per batch, whatever a call's settings (None:
    transformer_nmt.decode.device.policy.batch_size of `decode` and the workers)."""
    max_tokens: int | None = None
    """Most source tokens per batch as well, padding included (None: no such limit)."""
    alignments: bool = False
    """Also align each translation's words with the source's (Translation.alignment),
    in a call that does not say."""
    token_scores: bool = False
    """Also score each translation's tokens (Translation.token_scores), in a call that
    does not say."""
    confidence: bool = True
    """Estimate each translation's confidence where the model is calibrated
    (Translation.confidence); off where nothing reads it, as it costs a teacher-forced
    pass of each output on a runtime that does not gather it while searching."""
    buffer_size: int = 1024
    """Lines read ahead and sorted by length into batches; 1 translates line by line, as
    interactive use needs."""
    threads: int | None = None
    """The cores decoding uses in all, shared among what decodes at once (None: every
    core this process may use)."""
    workers: int | None = None
    """Batches translated at once, by that many threads, each on its share of the cores
    (None: `default_workers`, or 1 with buffer_size 1; see
    transformer_nmt.decode.device.threads)."""
    batch_invariant: bool | None = None
    """fp32 and bf16 on a CPU: every sentence gets the tokens and scores it gets alone, bit
    for bit, whatever shares its batch (products in fixed tiles of rows, attention over
    each row's own number of keys, rounded up:
    transformer_nmt.decode.runtime.precision.make_batch_invariant). Only the torch search
    does it, at a cost in speed: fixed tiles cannot use the kernels' widest blocks. int8
    is left as it is. None: off."""

    shortlist: bool = True
    """On CTranslate2, cut each batch's output layer to the pieces its sources offer, by
    the model's lexical shortlist (MODEL.shortlist.npz, made by `nmt shortlist`;
    transformer_nmt.decode.runtime.vmap) where it has one: faster, and may change a few
    words where a piece the map lacks would have won. The torch search ignores it."""

    asked_precision: str | None = None
    """The precision asked for, 'auto' included, kept by `resolved` when it decides
    `precision` for the torch search: CTranslate2's compute type is chosen from it."""

    def __post_init__(self) -> None:
        if self.engine not in DECODE_ENGINES:
            raise UserError(f"engine must be one of {', '.join(DECODE_ENGINES)}, "
                            f"not {self.engine!r}")
        for name in ("batch_size", "max_tokens", "buffer_size", "workers", "threads"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise UserError(f"{name} must be at least 1, not {value!r}")

    def resolved(self) -> "TranslatorOptions":
        """These options with the device and precision decided (UserError for a device
        or precision that cannot run well there) and workers and batch_size filled in."""
        runtime = resolve_runtime(self.device, self.precision)
        device = runtime.device
        workers = self.workers or default_workers(device, line_by_line=self.buffer_size == 1)
        return replace(self, device=device, precision=runtime.precision, workers=workers,
                       asked_precision=self.asked_precision or self.precision,
                       threads=self.threads or all_cores(),
                       batch_size=self.batch_size or batch_size(self.decode, workers),
                       batch_invariant=bool(self.batch_invariant))
