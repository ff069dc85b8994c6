"""`nmt score`: how likely a model finds given translations of given sources."""

from __future__ import annotations

import argparse
import sys

from transformer_nmt.cli.common import add_errors_argument
from transformer_nmt.cli.flags import add_fields
from transformer_nmt.config import DECODE_PRECISIONS, DecodeConfig


def add_score_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score",
        help="log-probabilities of given translations under a model (reranking, filtering)",
        description="Score each line of --tgt as a translation of the same line of --src: "
        "log P(target | source) under the model, end-of-sentence token included, the "
        "number beam search maximizes. Both sides are raw text, normalized and split into "
        "subwords with the model's vocabulary. By default the score is length-normalized "
        "as beam search reports it: log P / ((5 + |Y|) / 6)^alpha, |Y| counting the "
        "subword tokens and the end of sentence; --raw gives log P itself.",
        epilog="output: one line per pair, SCORE, and with --per-token ' ||| ' and the "
        "log-probability of each subword token, end of sentence last; with --format json "
        "one object per pair {\"score\", \"log_prob\", \"tokens\" (subword pieces), "
        "\"token_scores\"}. example: nmt score --model model.pt --src test.en --tgt "
        "test.de --per-token > scores.txt",
    )
    parser.add_argument("--model", required=True, nargs="+", metavar="MODEL.pt",
                        help="model file; several score as an ensemble (the mean of their "
                        "log-probabilities, renormalized, as `nmt translate` decodes)")
    parser.add_argument("--src", required=True, metavar="FILE", help="source sentences")
    parser.add_argument("--tgt", required=True, metavar="FILE",
                        help="their translations, one per source line")
    parser.add_argument("--output", metavar="FILE",
                        help="write the scores here, complete or not at all (default: stdout)")
    parser.add_argument("--per-token", action="store_true",
                        help="also give the log-probability of each subword token")
    parser.add_argument("--raw", action="store_true",
                        help="SCORE is log P, not length-normalized")
    add_fields(parser, DecodeConfig, ["alpha"])
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="output format (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N",
                        help="sentence pairs scored together, sorted by length "
                        "(default %(default)s)")
    parser.add_argument("--precision", choices=DECODE_PRECISIONS, default="fp32",
                        help="as in `nmt translate`, but fp32 by default: scores are "
                        "numbers to compare, the same on every machine")
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        help="where to run (default: cuda if available, else cpu)")
    add_errors_argument(parser)
    parser.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> None:
    import json
    import logging
    from contextlib import nullcontext

    from transformer_nmt.data.text import LineWriter, read_lines
    from transformer_nmt.decode.text.scoring import score_lines
    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

    logging.basicConfig(format="nmt score: warning: %(message)s", level=logging.WARNING)
    options = TranslatorOptions(decode=DecodeConfig(alpha=args.alpha), device=args.device,
                                precision=args.precision, batch_size=args.batch_size,
                                workers=1)
    translator = Translator.from_files(args.model, options)
    scores = score_lines(translator, read_lines(args.src, args.errors),
                         read_lines(args.tgt, args.errors), args.src, args.tgt)
    writer = LineWriter(args.output) if args.output is not None else nullcontext()
    with writer:
        for pair in scores:
            score = pair.log_prob if args.raw else pair.score
            if args.format == "json":
                line = json.dumps({
                    "score": round(score, 4), "log_prob": round(pair.log_prob, 4),
                    "tokens": [translator.vocab.piece(token) for token in pair.tokens],
                    "token_scores": [round(value, 4) for value in pair.token_scores]},
                    ensure_ascii=False)
            else:
                line = f"{score:.4f}"
                if args.per_token:
                    line += " ||| " + " ".join(f"{value:.4f}" for value in pair.token_scores)
            if args.output is not None:
                writer.write(line)  # type: ignore[union-attr]
            else:
                sys.stdout.write(line + "\n")
