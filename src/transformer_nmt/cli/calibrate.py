"""`nmt calibrate`: fit a model's confidence on a held-out split and store it in the model."""

from __future__ import annotations

import argparse


def add_calibrate_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="fit the confidence of a model's translations and store it in the model file",
        description="Translate a held-out split of a data directory (validation by default), "
        "label each translation acceptable when its sentence chrF2 against the reference "
        "reaches a threshold (by default the split's median), and fit a logistic "
        "regression from what the model knows of each translation (token log-probabilities, "
        "entropy, length against the source, cross-attention coverage, repetition, copying) "
        "to that label. The fit is written into the model file, which then gives every "
        "translation a confidence: the estimated probability that it is acceptable in that "
        "sense, a proxy for a bilingual reader's judgement. `nmt translate --format json`, "
        "`nmt serve` and `nmt evaluate` show it.",
        epilog="example: nmt calibrate --model run/average.pt --data data/wmt14; then nmt "
        "evaluate --model run/average.pt --data data/wmt14 reports how well it ranks the "
        "test sentences",
    )
    parser.add_argument("--model", required=True, metavar="MODEL.pt",
                        help="model file to calibrate (rewritten in place, atomically, "
                        "unless --out is given)")
    parser.add_argument("--data", required=True, metavar="DATA_DIR",
                        help="data directory of `nmt prepare` that the model was trained on")
    parser.add_argument("--split", default="valid",
                        help="split to fit on, never the test split you report (default %(default)s)")
    parser.add_argument("--out", metavar="FILE",
                        help="write the calibrated model here instead (default: --model)")
    parser.add_argument("--threshold", type=float, metavar="CHRF",
                        help="sentence chrF2 (0-100) a translation must reach to count as "
                        "acceptable (default: the split's median, i.e. at least as good as "
                        "the model's typical sentence)")
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        help="where to run (default: cuda if available, else cpu)")
    parser.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> None:
    from transformer_nmt.calibrate import calibrate
    from transformer_nmt.decode.text.translator import TranslatorOptions
    from transformer_nmt.errors import UserError

    if args.threshold is not None and not 0 <= args.threshold <= 100:
        raise UserError(f"--threshold is a chrF2 score from 0 to 100, not {args.threshold:g}")
    calibrate(args.model, args.data, args.split, args.out, args.threshold,
              TranslatorOptions(device=args.device))
