"""Every setting is declared once, in its dataclass: each command-line flag is a field's
(cli/flags.py derives it), with the field's default and choices, and a value of the
wrong type is a one-line error wherever it comes from."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import pytest

from transformer_nmt.cli import build_parser, main
from transformer_nmt.cli.flags import add_fields, field_values, flag_of
from transformer_nmt.config import DecodeConfig, ModelConfig, Quantization, TrainConfig
from transformer_nmt.data.prepare_options import PrepareOptions
from transformer_nmt.decode.text.translator import TranslatorOptions
from transformer_nmt.distill.options import DistillOptions
from transformer_nmt.errors import UserError
from transformer_nmt.fields import setting
from transformer_nmt.quickstart import QuickstartOptions
from transformer_nmt.serve.settings import ServeSettings

DECODING = (DecodeConfig, TranslatorOptions)
SETTINGS = {
    "translate": DECODING, "translate-corpus": DECODING, "evaluate": DECODING, "serve": (ServeSettings, *DECODING),
    "attention": (DecodeConfig,), "score": DECODING, "train": (TrainConfig,),
    "prepare": (PrepareOptions,), "quickstart": (QuickstartOptions,),
    "calibrate": (TranslatorOptions,), "distill": (DistillOptions,),
}
"""The dataclasses whose fields each subcommand's flags set."""
NOT_SETTINGS = {
    "translate": {"--model", "--input", "--output", "--prefix", "--constraints", "--format",
                  "--interactive", "--errors", "--file", "--target-language"},
    "translate-corpus": {"--model", "--input", "--out", "--shard", "--merge", "--shard-lines",
                         "--report", "--format", "--errors", "--backend", "--ray-address"},
    "evaluate": {"--model", "--data", "--split", "--output", "--hyp", "--ref", "--src-lang",
                 "--tgt-lang", "--json", "--errors"},
    "serve": {"--model", "--models"},
    "calibrate": {"--model", "--data", "--split", "--out", "--threshold"},
    "attention": {"--model", "--src", "--tgt", "--out", "--layer"},
    # score batches sentence pairs, not searches: its own default batch size; its
    # log-probabilities are numbers to compare, so fp32 unless asked, not 'auto'.
    "score": {"--model", "--src", "--tgt", "--output", "--per-token", "--raw", "--format",
              "--errors", "--batch-size", "--precision"},
    # plan_run's own arguments: where the run is, what it starts from, how it is composed.
    # How long a process of a torchrun run waits for the others: the launch's, not the run's.
    "train": {"--data", "--out", "--resume", "--init-from", "--preset", "--config", "--set",
              "--device", "--collective-timeout"},
    # The vocabulary is given by where to read it, the files one flag each.
    "prepare": {"--vocab"} | {f"--{split}-{kind}" for split in ("train", "valid", "test")
                              for kind in ("src", "tgt", "tsv")},
    "quickstart": {"--set"},
    "distill": {"--teacher", "--data", "--mono", "--out", "--set", "--export", "--device"},
    "export": {"--model", "--to", "out", "--quantization", "--force", "--from-code",
               "--to-code", "--package-version", "--shortlist"},
    "shortlist": {"--model", "--data", "--split", "--best", "--frequent"},
    "average": {"inputs", "--last", "--best", "--out"},
    "plot": {"run", "--out", "--x"},
    "params": {"--preset", "--vocab-size"},
    "presets": set(),
    "info": {"model"},
    "import": {"--from", "path", "--out", "--src-lang", "--tgt-lang", "--dict-dir", "--bpe",
               "--bpe-model", "--bpe-codes", "--force"},
}
"""Flags that set no field of a settings dataclass."""


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    actions = build_parser()._subparsers._group_actions  # type: ignore[union-attr]
    return dict(actions[0].choices)


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {(action.option_strings or [action.dest])[0]: action for action in parser._actions
            if not isinstance(action, argparse._HelpAction)}


def _field_of(flag: str, classes: tuple[type, ...]) -> tuple[type, dataclasses.Field] | None:
    for cls in classes:
        for field in dataclasses.fields(cls):
            if flag_of(field) == flag:
                return cls, field
    return None


def _default(field: dataclasses.Field):
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def test_every_flag_of_every_subcommand_is_a_field_with_its_default():
    subcommands = _subcommands()
    assert set(subcommands) == set(NOT_SETTINGS)
    for name, parser in subcommands.items():
        for flag, action in _flags(parser).items():
            if flag in NOT_SETTINGS[name]:
                continue
            found = _field_of(flag, SETTINGS.get(name, ()))
            assert found is not None, f"nmt {name} {flag} sets no field"
            cls, field = found
            assert action.help, f"nmt {name} {flag} has no help (a docstring under the field)"
            if name in ("train", "serve") and cls in (TrainConfig, ServeSettings):
                # Given only, over the preset's or the environment's value.
                assert action.default in (None, []), (name, flag)
                continue
            default = action.default
            if isinstance(_default(field), Path) and default is not None:
                default = Path(default)
            if isinstance(default, list):
                default = tuple(default)  # a repeatable flag's list, as field_values gives it
            assert default == _default(field), (name, flag, default, _default(field))


def test_the_export_quantization_defaults_to_the_exporters_own():
    import inspect

    from transformer_nmt.export.argos import export_argos
    from transformer_nmt.export.ctranslate2 import export_ctranslate2

    flag = _flags(_subcommands()["export"])["--quantization"]
    for export in (export_ctranslate2, export_argos):
        assert inspect.signature(export).parameters["quantization"].default == flag.default


def test_unset_server_and_training_flags_leave_the_defaults():
    args = build_parser().parse_args(["serve", "--model", "m.pt"])
    assert ServeSettings.from_environment(
        {}, **field_values(args, ServeSettings, given_only=True)) == ServeSettings()
    args = build_parser().parse_args(["train", "--out", "run"])
    assert field_values(args, TrainConfig, exclude=("init_from",), given_only=True) == {}


def test_choices_are_the_literal_types():
    flags = {name: _flags(parser) for name, parser in _subcommands().items()}
    assert tuple(flags["export"]["--quantization"].choices) == get_args(Quantization)
    assert tuple(flags["train"]["--precision"].choices) == ("auto", "fp32", "bf16", "fp16")
    assert tuple(flags["train"]["--valid-metric"].choices) == ("loss", "bleu", "chrf")
    for name in ("translate", "evaluate", "score", "serve"):
        assert tuple(flags[name]["--precision"].choices) == ("auto", "fp32", "bf16", "int8")
    for name in ("translate", "evaluate", "score", "prepare"):
        assert tuple(flags[name]["--errors"].choices) == ("strict", "replace")


@dataclass(frozen=True)
class Made:
    """A made-up settings dataclass, as a newcomer would add a field."""

    width: int = 3
    """How wide."""
    ratio: float = setting(0.5, metavar="R")
    """How much."""
    mode: Literal["fast", "exact"] = "exact"
    """Which way."""
    loud: bool = False
    """Say more."""
    tags: tuple[str, ...] = setting((), flag="--tag")
    """Labels (repeatable)."""
    name: str | None = None
    """A name."""


def test_a_field_added_to_a_dataclass_becomes_a_flag():
    parser = argparse.ArgumentParser()
    add_fields(parser, Made)
    flags = _flags(parser)
    assert set(flags) == {"--width", "--ratio", "--mode", "--loud", "--tag", "--name"}
    assert flags["--mode"].choices == ("fast", "exact")
    assert "how wide (default: 3)" == flags["--width"].help
    args = parser.parse_args(["--width", "5", "--mode", "fast", "--loud", "--tag", "a",
                              "--tag", "b"])
    assert Made(**field_values(args, Made)) == Made(5, 0.5, "fast", True, ("a", "b"), None)
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "slow"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--width", "2.5"])


def test_a_tuple_of_a_literals_values_is_a_repeatable_flag_with_its_choices():
    @dataclass(frozen=True)
    class Formats:
        """Formats to write."""

        formats: tuple[Literal["a", "b"], ...] = setting((), flag="--format")
        """A format (repeatable)."""

    parser = argparse.ArgumentParser()
    add_fields(parser, Formats)
    assert parser.parse_args(["--format", "b", "--format", "a"]).format == ["b", "a"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "c"])


def test_the_decode_flags_follow_decode_config():
    """Adding a DecodeConfig field is the one edit: translate takes every field."""
    flags = _flags(_subcommands()["translate"])
    for field in dataclasses.fields(DecodeConfig):
        assert flag_of(field) in flags


@pytest.mark.parametrize("config, values, message", [
    (ModelConfig, {"heads": 8.0}, "heads must be a whole number, not 8.0"),
    (ModelConfig, {"d_model": True}, "d_model must be a whole number, not True"),
    (ModelConfig, {"positional": "rotary"},
     "positional must be one of 'sinusoidal', 'learned', 'sinusoidal-halves', "
     "'sinusoidal-fairseq', not 'rotary'"),
    (TrainConfig, {"max_bad_steps": 0}, "max_bad_steps must be at least 1, not 0"),
    (TrainConfig, {"valid_metric": "ter"}, "valid_metric must be one of 'loss'"),
    (TrainConfig, {"lr_scale": "2"}, "lr_scale must be a number, not '2'"),
    (DecodeConfig, {"alpha": 11.0}, "alpha must be a finite number between -10 and 10"),
    (ServeSettings, {"log_level": "loud"}, "log_level must be one of 'critical'"),
])
def test_values_of_the_wrong_type_or_choice_are_refused(config, values, message):
    with pytest.raises(UserError, match="^" + message):
        config(**values)


def test_a_config_file_with_a_float_for_an_int_is_a_one_line_error(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": {"heads": 8.0}}))
    assert main(["train", "--out", str(tmp_path / "run"), "--config", str(config)]) == 2
    assert capsys.readouterr().err == ("nmt train: error: heads must be a whole number, "
                                       "not 8.0\n")


def test_a_set_outside_the_choices_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), "--set", "positional=rotary"]) == 2
    assert capsys.readouterr().err == (
        "nmt train: error: positional must be one of 'sinusoidal', 'learned', "
        "'sinusoidal-halves', 'sinusoidal-fairseq', not 'rotary'\n")
