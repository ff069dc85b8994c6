"""Every setting of model, training and decoding, declared once, and the paper's presets.

The settings dataclasses, their types and limits are config/settings.py's; the named
architectures are config/presets.py's. Both are imported from here, as
`from transformer_nmt.config import DecodeConfig, get_preset`.
"""

from transformer_nmt.config.presets import (BASE, PRESETS, Preset, get_preset,
                                            preset_of_architecture, presets_table)
from transformer_nmt.config.settings import (ALPHA_RANGE, BATCH_SPLIT, CHANGEABLE_ON_RESUME,
                                             DECODE_ENGINES, DECODE_PRECISIONS,
                                             DEFAULT_SHARD_LINES, MAX_BEAM,
                                             NOT_ARCHITECTURE, TRAIN_PRECISIONS, VALID_METRICS,
                                             Activation, DecodeConfig, DecodeEngine,
                                             DecodePrecision,
                                             ModelConfig, Positional, Quantization,
                                             TieEmbeddings, TrainConfig, TrainPrecision,
                                             Utf8Errors, ValidMetric, config_from_dict,
                                             differences)

__all__ = [
    "ALPHA_RANGE", "BASE", "BATCH_SPLIT", "CHANGEABLE_ON_RESUME", "DECODE_ENGINES",
    "DECODE_PRECISIONS",
    "DEFAULT_SHARD_LINES", "MAX_BEAM", "NOT_ARCHITECTURE", "PRESETS", "TRAIN_PRECISIONS",
    "VALID_METRICS", "Activation", "DecodeConfig", "DecodeEngine",
    "DecodePrecision", "ModelConfig",
    "Positional", "Preset", "Quantization", "TieEmbeddings", "TrainConfig", "TrainPrecision",
    "Utf8Errors", "ValidMetric", "config_from_dict", "differences", "get_preset",
    "preset_of_architecture", "presets_table",
]
