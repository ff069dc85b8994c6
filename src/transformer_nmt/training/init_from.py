"""Starting a run from a trained model's weights (`nmt train --init-from MODEL.pt`).

Fine-tuning keeps the weights and nothing else: the optimizer's moments, the step
counter, the schedule and the batch order start afresh. Since Adam's second moments
start at zero, a short warm-up lets them settle before the full rate; the rate then
decays with the inverse square root of the step, the pre-training schedule's shape, at a
modest peak that adapts the model without washing out what it learned (fairseq's
fine-tuning recipes use inverse_sqrt with a few hundred to a few thousand warm-up
updates at 1e-4 to 5e-4; OpenNMT-py users restart from a model with the optimizer reset
at a reduced rate). The embeddings index the model's vocabulary, so the new data must be
encoded with it (`nmt prepare --vocab MODEL.pt`); another vocabulary or architecture is
refused before anything is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_nmt.config import (NOT_ARCHITECTURE, ModelConfig, TrainConfig, config_from_dict,
                                    differences)
from transformer_nmt.data.vocab_source import data_vocab_digest, vocab_digest
from transformer_nmt.errors import UserError
from transformer_nmt.files import file_sha256
from transformer_nmt.model_file import model_training_steps, read_model_file

FINETUNE_WARMUP = 500
"""Warm-up steps of a fine-tuning run unless set: enough updates for fresh Adam moments
to settle, short next to pre-training's 4000."""
FINETUNE_LR_PEAK = 1e-4
"""Peak learning rate of a fine-tuning run unless set: about a seventh of the base
model's pre-training peak (7e-4) and a tenth of the small preset's (1e-3)."""


@dataclass(frozen=True)
class InitModel:
    """What a run needs to know of the model it starts from (its weights are read again
    when training starts, so that the plan stays small)."""

    path: Path
    sha256: str
    """SHA-256 of the file, so that the run records exactly which model it started from."""
    step: int | None
    """The training steps behind it, where the file says (an average: its newest input's)."""
    preset: str | None
    model_config: dict[str, Any]
    train_config: dict[str, Any] | None
    """The regime it was trained with (checkpoints and averages of them record one)."""
    vocab_sha256: str

    def record(self) -> dict[str, Any]:
        """config.json's and every checkpoint's note of the starting model."""
        return {"file": str(self.path), "sha256": self.sha256, "step": self.step,
                "preset": self.preset, "vocab_sha256": self.vocab_sha256}

    def model(self) -> ModelConfig:
        """Its architecture."""
        return config_from_dict(ModelConfig, self.model_config)

    def train(self) -> TrainConfig | None:
        """The regime it was trained with, fields this release does not know left out."""
        if self.train_config is None:
            return None
        known = {field.name for field in dataclasses.fields(TrainConfig)}
        return config_from_dict(TrainConfig, {key: value for key, value in
                                              self.train_config.items() if key in known})


def read_init_model(path: str | Path) -> InitModel:
    """Read a model file or checkpoint to start from; UserError if it is not one."""
    path = Path(path).resolve()
    payload = read_model_file(path)
    return InitModel(path, file_sha256(path), model_training_steps(payload),
                     payload.get("preset"),
                     dict(payload["model_config"]), payload.get("train_config"),
                     vocab_digest(payload["vocab"], payload.get("target_vocab")))


def check_init_vocab(path: Path, vocab_sha256: str, data_dir: Path) -> None:
    """UserError naming both unless `data_dir` was encoded with the vocabulary of the
    model at `path` (whose SHA-256 is `vocab_sha256`)."""
    data_vocab = data_vocab_digest(data_dir)
    if data_vocab != vocab_sha256:
        raise UserError(f"{data_dir} was encoded with another vocabulary than {path} "
                        f"(SHA-256 {data_vocab[:12]}, the model's {vocab_sha256[:12]}); "
                        f"prepare the data with `nmt prepare ... --vocab {path}`")


def check_init_architecture(path: Path, model_config: dict[str, Any], model: ModelConfig
                            ) -> None:
    """UserError naming the model file at `path` (architecture `model_config`) unless
    `model` has that architecture (dropout rates may differ)."""
    changes = differences(model_config, dataclasses.asdict(model), skip=NOT_ARCHITECTURE)
    if changes:
        raise UserError(f"{path} has another architecture than this run's settings "
                        f"({'; '.join(changes)}); leave out --preset, --config and --set of "
                        "architecture fields to train with the model's own")


def read_init_weights(path: Path, recorded: dict[str, Any] | None, model: ModelConfig,
                      data_dir: Path) -> dict[str, Any]:
    """The payload of the model a run starts from, checked again now that its weights
    are read: the same file the run recorded (`recorded`, config.json's init_from), the
    run's architecture and the data's vocabulary."""
    if recorded is not None and file_sha256(path) != recorded["sha256"]:
        raise UserError(f"{path} changed since the run in this directory started from it; "
                        "restore it, or train into a new run directory")
    payload = read_model_file(path)
    check_init_architecture(path, payload["model_config"], model)
    check_init_vocab(path, vocab_digest(payload["vocab"], payload.get("target_vocab")), data_dir)
    return payload
