"""`nmt shortlist`: a model's lexical shortlist, counted on its training data."""

from __future__ import annotations

import argparse

from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held

DEFAULT_BEST = 20
DEFAULT_FREQUENT = 50
"""transformer_nmt.data.shortlist's defaults (importing it here would slow `nmt --help`;
tests/test_cli_shortlist.py holds them equal)."""


def add_shortlist_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "shortlist",
        help="build a model's lexical shortlist, which makes CTranslate2 decoding faster",
        description="Count, on the training split of the data directory the model was "
        "trained on, which target pieces go with each source piece, and write the model's "
        "shortlist beside it (MODEL.shortlist.npz; in a safetensors directory, "
        "shortlist.npz): per source piece the --best target pieces that co-occur with it "
        "most beyond chance (Dunning's log-likelihood ratio), the --frequent most frequent "
        "target pieces for every sentence, and whatever else makes every reference piece of "
        "the training data a candidate of its sentence (given to the rarest source piece "
        "of the sentence that goes with it). Decoding on CTranslate2 (translate, "
        "evaluate, serve, translate-corpus) then scores only a batch's candidates at each "
        "step, unless given --no-shortlist; `nmt export --to ctranslate2` writes it into the "
        "export as vmap.txt (load the export and pass use_vmap=True to translate_batch). "
        "The shortlist records the model's checksum: after the model changes (trained "
        "further, averaged, calibrated), decoding refuses it until it is built again.",
        epilog="example: nmt shortlist --model run/average.pt --data data/wmt14-en-de",
    )
    parser.add_argument("--model", required=True, metavar="MODEL.pt",
                        help="the model file (or safetensors directory) to build it for")
    parser.add_argument("--data", required=True, metavar="DATA_DIR",
                        help="the data directory of `nmt prepare` the model was trained on "
                        "(encoded with its vocabulary)")
    parser.add_argument("--split", default="train",
                        help="the split to count (default %(default)s)")
    parser.add_argument("--best", type=int, default=DEFAULT_BEST, metavar="K",
                        help="target pieces kept per source piece by association; more "
                        "keeps more of the model's choices, fewer decodes faster "
                        "(default %(default)s)")
    parser.add_argument("--frequent", type=int, default=DEFAULT_FREQUENT, metavar="N",
                        help="the N most frequent target pieces, candidates of every "
                        "sentence (default %(default)s)")
    parser.set_defaults(func=run_shortlist)


@sigterm_unwinds()
def run_shortlist(args: argparse.Namespace) -> None:
    with stop_signals_held():
        from transformer_nmt.decode.runtime.vmap import make_shortlist

    path, stats = make_shortlist(args.model, args.data, args.split, args.best, args.frequent,
                                 progress=True)
    print(f"wrote the shortlist {path}: counted on {stats.pairs} pairs of {args.data} "
          f"{args.split}, {stats.added} entries added to cover every reference piece; a "
          f"sentence's candidates: {stats.mean_candidates:.0f} of the {stats.vocab_size} "
          "pieces on average")
