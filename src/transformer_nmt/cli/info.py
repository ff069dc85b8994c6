"""`nmt presets`, `nmt params` and `nmt info`: what the named architectures are and how
big, and what a model file holds."""

from __future__ import annotations

import argparse


def add_presets_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "presets",
        help="list the model presets (base, big, Table 3 rows, tiny, small)",
        description="Print every named preset with its N, d_model, d_ff, h, d_k, d_v, "
        "P_drop, label smoothing and positional encoding.",
    )
    parser.set_defaults(func=run_presets)


def run_presets(args: argparse.Namespace) -> None:
    from transformer_nmt.config import presets_table

    print(presets_table())


def add_params_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "params",
        help="count a preset's parameters",
        description="Build a preset and print its exact number of trainable parameters; "
        "the integer alone is the last line.",
    )
    parser.add_argument("--preset", default="base", help="preset name (see `nmt presets`)")
    parser.add_argument(
        "--vocab-size", type=int, default=37000,
        help="shared vocabulary size (the paper's WMT14 en-de BPE: 37000)",
    )
    parser.set_defaults(func=run_params)


def run_params(args: argparse.Namespace) -> None:
    from transformer_nmt.config import get_preset
    from transformer_nmt.model_file import count_parameters

    preset = get_preset(args.preset)
    count = count_parameters(preset.model, args.vocab_size)
    print(f"preset {preset.name}: {count / 1e6:.1f}M parameters at vocabulary {args.vocab_size}")
    print(count)


def add_info_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "info",
        help="show what a model file holds and verify its checksum",
        description="Read a model file (a checkpoint of `nmt train`, the output of `nmt "
        "average`, or a directory of `nmt export --to safetensors`) as every command reads "
        "it, and print its format and version, architecture, vocabulary size, languages, "
        "training steps, parameters and the SHA-256 checksum of its weights, which is "
        "verified: a damaged file is refused in one line, as translate and export refuse "
        "it. Files written before model files recorded a checksum say that they have none.",
        epilog="example: nmt info run/model.pt",
    )
    parser.add_argument("model", metavar="MODEL", help="the model file or safetensors "
                        "directory to describe")
    parser.set_defaults(func=run_info)


def run_info(args: argparse.Namespace) -> None:
    from transformer_nmt.model_file import describe_model

    rows = describe_model(args.model)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")
