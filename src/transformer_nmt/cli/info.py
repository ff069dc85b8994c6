"""`nmt presets` and `nmt params`: what the named architectures are and how big."""

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
    from transformer_nmt.model.transformer import count_parameters

    preset = get_preset(args.preset)
    count = count_parameters(preset.model, args.vocab_size)
    print(f"preset {preset.name}: {count / 1e6:.1f}M parameters at vocabulary {args.vocab_size}")
    print(count)
