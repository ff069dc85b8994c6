"""Configurations (config/settings.py): every field range-checked when a configuration is
made, so that a bad value is refused before anything is written; the marks that group
fields; and the one way differences are named."""

import math

import pytest

from transformer_nmt.config.settings import (ALPHA_RANGE, BATCH_SPLIT, CHANGEABLE_ON_RESUME,
                                             MAX_BEAM, NOT_ARCHITECTURE, DecodeConfig,
                                             ModelConfig, TrainConfig, config_from_dict,
                                             differences)
from transformer_nmt.errors import UserError


@pytest.mark.parametrize("config, field, value, message", [
    (ModelConfig, "dropout", -0.5, r"dropout must be in \[0, 1\), not -0.5"),
    (ModelConfig, "dropout", 1.5, r"dropout must be in \[0, 1\), not 1.5"),
    (ModelConfig, "attention_dropout", -0.1, r"attention_dropout must be in \[0, 1\)"),
    (ModelConfig, "heads", 0, "heads must be at least 1, not 0"),
    (ModelConfig, "positional", "rotary", "positional must be one of 'sinusoidal', 'learned'"),
    (ModelConfig, "activation", "tanh", "activation must be one of 'relu', 'swish', 'gelu', "
                                        "not 'tanh'"),
    (ModelConfig, "logits_bias", "yes", "logits_bias must be one of False, True"),
    (TrainConfig, "label_smoothing", 1.0, r"label_smoothing must be in \[0, 1\)"),
    (TrainConfig, "warmup_steps", 0, "warmup_steps must be at least 1"),
    (TrainConfig, "batch_tokens", 0, "batch_tokens must be at least 1"),
    (TrainConfig, "max_tokens", -1, "max_tokens must be a number >= 0"),
    (TrainConfig, "lr_scale", 0.0, "lr_scale must be a positive number"),
    (TrainConfig, "lr_scale", math.inf, "lr_scale must be a positive number"),
    (TrainConfig, "clip_norm", math.nan, "clip_norm must be a number >= 0"),
    (TrainConfig, "precision", "fp8", "precision must be one of 'auto'"),
    (TrainConfig, "compile", "yes", "compile must be one of False, True"),
    (DecodeConfig, "beam", 0, "beam must be at least 1"),
    (DecodeConfig, "beam", MAX_BEAM + 1, f"beam must be at most {MAX_BEAM}"),
    (DecodeConfig, "alpha", math.nan, "alpha must be a finite number"),
    (DecodeConfig, "alpha", math.inf, "alpha must be a finite number"),
    (DecodeConfig, "max_len_b", -1, "max_len_b must be a number >= 0"),
    (DecodeConfig, "no_repeat_ngram", -1, "no_repeat_ngram must be a number >= 0"),
    (DecodeConfig, "topk", 2.5, "topk must be a whole number"),
    (DecodeConfig, "topp", 1.5, "topp must be a probability"),
    (DecodeConfig, "topp", 0, "topp must be a positive number"),
    (DecodeConfig, "temperature", 0, "temperature must be a positive number"),
    (DecodeConfig, "seed", 2 ** 31, "seed must be at most 2147483647"),
])
def test_out_of_range_fields_are_refused_with_their_range(config, field, value, message):
    with pytest.raises(UserError, match=message):
        config(**{field: value})


def test_nbest_is_bounded_by_the_beam():
    assert DecodeConfig(beam=4, nbest=4).nbest == 4
    with pytest.raises(UserError, match=r"nbest must be between 1 and the beam size \(4\)"):
        DecodeConfig(beam=4, nbest=5)
    assert DecodeConfig(beam=4, nbest=8, sampling=True).nbest == 8  # samples, not beams


def test_differences_name_every_changed_leaf_and_skip_what_is_allowed():
    old, new = TrainConfig(), TrainConfig(warmup_steps=10, max_steps=5)
    assert differences(old, new) == ["max_steps: 100000 -> 5", "warmup_steps: 4000 -> 10"]
    assert differences(old, new, skip=frozenset({"max_steps"})) == ["warmup_steps: 4000 -> 10"]
    assert differences({"a": {"b": 1}}, {"a": {"b": 2, "c": 3}}) == ["a.b: 1 -> 2",
                                                                     "a.c: None -> 3"]


def test_groups_are_marks_on_the_fields():
    """Which fields a fine-tuning run or a resumed run may change is declared on the
    fields themselves; training/run.py and training/init_from.py read these sets."""
    assert NOT_ARCHITECTURE == {"dropout", "attention_dropout", "activation_dropout"}
    assert "max_positions" not in NOT_ARCHITECTURE
    assert BATCH_SPLIT == {"max_tokens", "update_freq"}
    assert {"max_steps", "patience", "precision", "log_every"} <= CHANGEABLE_ON_RESUME
    assert not {"valid_metric", "valid_beam", "seed", "batch_tokens"} & CHANGEABLE_ON_RESUME


@pytest.mark.parametrize("config, field, value", [
    (ModelConfig, "heads", 8.0), (ModelConfig, "encoder_layers", True),
    (TrainConfig, "max_steps", 1e5), (TrainConfig, "compile", 1),
    (DecodeConfig, "beam", 4.0), (DecodeConfig, "max_len_b", 50.0),
])
def test_integer_and_boolean_fields_refuse_other_types(config, field, value):
    with pytest.raises(UserError, match=f"^{field} must be "):
        config(**{field: value})


def test_max_bad_steps_zero_is_refused_not_read_as_one():
    assert TrainConfig(max_bad_steps=1).max_bad_steps == 1
    with pytest.raises(UserError, match="max_bad_steps must be at least 1, not 0"):
        TrainConfig(max_bad_steps=0)


def test_alpha_has_one_range():
    low, high = ALPHA_RANGE
    assert DecodeConfig(alpha=low).alpha == low and DecodeConfig(alpha=high).alpha == high
    for value in (low - 0.5, high + 0.5):
        with pytest.raises(UserError, match="alpha must be a finite number between"):
            DecodeConfig(alpha=value)


def test_a_configuration_from_a_dict_refuses_unknown_keys_by_name():
    assert config_from_dict(DecodeConfig, {"beam": 2}) == DecodeConfig(beam=2)
    with pytest.raises(UserError, match="unknown DecodeConfig field.s. beem, size; known: "
                                        "alpha, beam"):
        config_from_dict(DecodeConfig, {"beem": 2, "size": 1})


@pytest.mark.parametrize("setting", [{"topk": 5}, {"topp": 0.9}, {"temperature": 0.7}])
def test_a_sampling_setting_without_sampling_is_refused_naming_it(setting):
    (name,) = setting
    with pytest.raises(UserError, match=f"^{name} applies only with sampling: add --sampling"):
        DecodeConfig(**setting)
    assert getattr(DecodeConfig(sampling=True, **setting), name) == setting[name]
    assert DecodeConfig(seed=3).seed == 3  # harmless without sampling, kept in settings files
