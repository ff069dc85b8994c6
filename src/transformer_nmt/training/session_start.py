"""What a session of `nmt train` starts from: the precision it trains in, the data and
vocabulary it reads, the batch shapes it pads to, its freshly initialized model, and the
checkpoint it resumes from or the weights it fine-tunes from.

Each is read or decided on rank 0 for every process where it depends on files or on a
measurement, so that only rank 0 needs to see the run directory and a measurement cannot
split the processes (training/distributed.py's `main_reads`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from transformer_nmt.config import TrainConfig
from transformer_nmt.data.binarize import ParallelData, load_split
from transformer_nmt.data.bpe_vocab import BpeVocab
from transformer_nmt.data.manifest import read_manifest
from transformer_nmt.data.shapes import BatchShapes
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.data.vocab_source import load_data_vocab
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.runtime import resolve_precision
from transformer_nmt.training.checkpoint import check_resumable, read_newest_checkpoint
from transformer_nmt.training.distributed import Distributed
from transformer_nmt.training.init_from import read_init_weights
from transformer_nmt.training.run import RunPlan


def decide_precision(plan: RunPlan, device: torch.device, per_batch_tokens: int
                     ) -> tuple[str, str | None]:
    """The precision to train in and, for 'auto', why. 'auto' times the feed-forward
    product at this run's batch rows (at most 4096: the rate is flat beyond)."""
    said: list[str] = []
    model = plan.model
    shape = (min(per_batch_tokens, 4096), model.d_model, model.d_ff)
    precision = resolve_precision(plan.train.precision, device, training=True,
                                  log=said.append, shape=shape)
    return precision, (said[0] if said else None)


def read_data(plan: RunPlan) -> tuple[ParallelData, ParallelData | None,
                                         Vocab | BpeVocab]:
    """The train split, the valid split if there is one, and the vocabulary."""
    data_dir, cfg = plan.data_dir, plan.train
    train_data = load_split(data_dir, "train")
    if len(train_data) == 0:
        raise UserError(f"{data_dir}: the train split has no pairs")
    valid_data = (load_split(data_dir, "valid")
                  if "valid" in read_manifest(data_dir)["splits"] else None)
    if valid_data is None and (cfg.patience or cfg.valid_metric != "loss"):
        raise UserError(f"{data_dir} has no valid split, which valid_metric "
                        f"{cfg.valid_metric!r} and patience need; prepare the data "
                        "with valid files or a held-out --valid-size")
    return train_data, valid_data, load_data_vocab(data_dir)


def batch_shapes(cfg: TrainConfig, train_data: ParallelData, per_batch_tokens: int
                 ) -> BatchShapes | None:
    """The fixed batch shapes of this process's batches, if the run asks for them."""
    if not cfg.shape_buckets:
        return None
    # The longest side of any pair, + a special.
    longest = int(max(train_data.src_lengths.max(), train_data.tgt_lengths.max())) + 1
    return BatchShapes.for_lengths(longest, per_batch_tokens)


def fresh_model(plan: RunPlan, vocab: Vocab | BpeVocab, rank: int) -> Transformer:
    """The run's model initialized from its seed, then torch's stream set for dropout."""
    seed = plan.train.seed
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = Transformer(plan.model, len(vocab), vocab.pad_id)
    # Dropout streams differ per process (else every rank would drop the same units)
    # and are independent of the stream that initialized the weights.
    dropout_seed = np.random.SeedSequence([seed, 1, rank]).generate_state(1)[0]
    torch.manual_seed(int(dropout_seed))
    return model


def read_checkpoint(plan: RunPlan, context: Distributed, vocab_size: int
                    ) -> dict[str, Any] | None:
    """The checkpoint to resume from (None for a new run), read by rank 0 and handed to
    every process."""
    if plan.resume_from is None:
        return None

    def read() -> dict[str, Any]:
        checkpoint = read_newest_checkpoint(plan.run_dir)
        check_resumable(checkpoint, plan.resume_from, plan.data_digest,
                        plan.record["model"], vocab_size)
        return checkpoint
    return context.main_reads(read)


def read_start_weights(plan: RunPlan, context: Distributed) -> dict[str, Any]:
    """The model a fine-tuning run starts from, read by rank 0 and handed to every
    process (a run resumed from its own checkpoints never reads it again)."""
    return context.main_reads(lambda: read_init_weights(
        Path(plan.train.init_from), plan.record.get("init_from"), plan.model,
        plan.data_dir))
