"""`nmt translate`, `nmt evaluate` and `nmt attention`: what a model file does with text,
and the search, batching and precision arguments the first two share."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from transformer_nmt.cli.common import add_errors_argument
from transformer_nmt.cli.flags import add_fields, field_values
from transformer_nmt.config import DECODE_ENGINES, DECODE_PRECISIONS, DecodeConfig
from transformer_nmt.errors import UserError
from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held

if TYPE_CHECKING:
    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions


def _add_decode_arguments(parser: argparse.ArgumentParser, *, nbest: bool = False,
                          max_tokens: bool = True) -> None:
    """Search, sampling, batching and precision options shared by translate, evaluate and
    serve; the search and sampling ones are DecodeConfig's fields (nbest only if asked),
    --max-tokens only if asked (a server's token budget is its queue's)."""
    groups = {
        "search": parser.add_argument_group(
            "search", "the defaults are the paper's settings (section 6.1), and the search "
            "stops early when no open hypothesis can still win"),
        "sampling": parser.add_argument_group(
            "sampling", "draw each token at random instead of searching, e.g. to "
            "back-translate (Edunov et al. 2018): --beam is then unused and --nbest K draws "
            "K samples per line"),
    }
    add_fields(parser, DecodeConfig, exclude=() if nbest else ("nbest",), groups=groups)
    _add_speed_arguments(parser, max_tokens=max_tokens)


def _add_speed_arguments(parser: argparse.ArgumentParser, *, max_tokens: bool = True) -> None:
    """How decoding runs: runtime, precision, batches (--max-tokens only if asked), threads
    and device."""
    speed = parser.add_argument_group(
        "speed", "how decoding runs: the defaults are the fastest on a CPU")
    speed.add_argument("--engine", choices=DECODE_ENGINES, default="auto",
                       help="the runtime that searches. auto (default): CTranslate2 when "
                       "it is installed and can run the model, device and precision, else "
                       "PyTorch, saying why once; ctranslate2: the model converted once for "
                       "CTranslate2 and kept in the cache directory, faster than PyTorch; "
                       "torch: the paper's search in PyTorch, the "
                       "reference, and the only one for --batch-invariant, terminology "
                       "constraints and sampling (which go to it whatever this says)")
    speed.add_argument("--shortlist", action=argparse.BooleanOptionalAction, default=True,
                       help="CTranslate2: cut each batch's output layer to the target pieces "
                       "its sources' pieces go with, by the model's lexical shortlist "
                       "(MODEL.shortlist.npz beside the model file, made by `nmt shortlist`), "
                       "where it has one: faster, and may change a few words. --no-shortlist "
                       "scores every piece. PyTorch ignores it (default: on)")
    speed.add_argument("--batch-size", type=int, metavar="N",
                       help="sentences translated together, sorted by length (default: "
                       "enough to keep the cores busy, fewer for a wider beam)")
    if max_tokens:
        speed.add_argument("--max-tokens", type=int, metavar="N",
                           help="also limit a batch to N source tokens, padding included "
                           "(default: no limit)")
    speed.add_argument("--precision", choices=DECODE_PRECISIONS, default="auto",
                       help="auto (default): on CTranslate2, int8 on a CPU (faster, and as "
                       "good as fp32), its fastest type on a GPU; on PyTorch, "
                       "bf16 where this CPU's or GPU's bf16 products measured faster than "
                       "fp32's, else fp32. fp32: the reference output; bf16: PyTorch on a "
                       "CPU with AVX-512 BF16 or AMX, or a GPU; int8: int8 weights, CPU "
                       "only. Reduced precision may change a few words")
    speed.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction,
                       help="give every sentence exactly the translation and score it gets "
                       "alone, whatever shares its batch: decodes with PyTorch in fp32 or "
                       "bf16, products in fixed tiles, at about half its speed "
                       "(default: off)")
    speed.add_argument("--threads", type=int, metavar="N",
                       help="cores decoding uses in all, shared among the batches decoded "
                       "at once (default: every core; on CTranslate2 a batch decoded "
                       "alone takes one core where a short timed search finds it faster)")
    speed.add_argument("--workers", type=int, metavar="N",
                       help="translate N batches at once, each on its share of the cores "
                       "(default: two on a CPU with two cores or more, one with "
                       "--interactive)")
    speed.add_argument("--device", choices=["cpu", "cuda"],
                       help="where to run (default: cuda if a GPU is available and the "
                       "precision is not int8, else cpu)")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """--alignments, --format and --token-scores: what each output line holds, for
    translate and translate-corpus."""
    parser.add_argument("--alignments", action="store_true",
                        help="append word alignments taken from the encoder-decoder attention "
                        "of the penultimate decoder layer")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="text (default): the formats below; json: one JSON object per "
                        "input line, {\"text\", \"tokens\" (subword pieces), "
                        "\"token_scores\" (log P of each token, end of sentence last), "
                        "\"score\", \"alignment\" (with --alignments, [source word, target "
                        "word] pairs)}, or with --nbest {\"nbest\": [such objects, best "
                        "first]}")
    parser.add_argument("--token-scores", action="store_true",
                        help="text format: append ' ||| ' and the log-probability of each "
                        "subword token, end of sentence last, to each line (json always "
                        "has them)")


def _translator_options(args: argparse.Namespace, **fields) -> TranslatorOptions:
    """The TranslatorOptions the decode arguments describe, with `fields` set as well;
    also routes the library's warnings (a line cut to fit the model) to stderr as
    `nmt COMMAND: warning:`."""
    import logging

    logging.basicConfig(format=f"nmt {args.command}: warning: %(message)s", level=logging.WARNING)

    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

    decode = DecodeConfig(**field_values(args, DecodeConfig,
                                         exclude=() if "nbest" in args else ("nbest",)))
    return TranslatorOptions(decode=decode, engine=args.engine, device=args.device,
                             precision=args.precision, batch_size=args.batch_size,
                             max_tokens=args.max_tokens,
                             workers=args.workers, threads=args.threads,
                             batch_invariant=args.batch_invariant, shortlist=args.shortlist,
                             **fields)

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
    parser.add_argument("--model", required=True, nargs="+", metavar="MODEL.pt",
                        help="model file: a checkpoint of `nmt train` or the output of "
                        "`nmt average`, or a directory of `nmt export --to safetensors`; "
                        "several make an ensemble, averaging their log-probabilities at "
                        "every step (they must share a vocabulary)")
    parser.add_argument("--input", metavar="FILE",
                        help="text to translate, UTF-8, optionally gzipped (default: stdin)")
    parser.add_argument("--output", metavar="FILE",
                        help="write translations here, with a progress bar; the file appears "
                        "complete or not at all (default: stdout)")
    parser.add_argument("--file", metavar="IN",
                        help="translate a whole document into --output, in its own format, "
                        "its structure and formatting kept: .txt, .html, .md, .srt, .vtt, "
                        ".docx, .pptx or .odt (recognised by content as well as name; not "
                        "PDF). Needs the files extra: pip install 'transformer-nmt[files]'")
    _add_output_arguments(parser)
    parser.add_argument("--prefix", metavar="FILE",
                        help="a target prefix per input line, raw text: each translation "
                        "starts with it (its subword pieces are forced, then the search goes "
                        "on); an empty prefix line leaves its translation free, an empty "
                        "input line stays empty")
    parser.add_argument("--constraints", metavar="FILE",
                        help="terminology: per input line, tab-separated phrases of raw "
                        "target text that its translation must contain (an empty line: "
                        "none); lexically constrained beam search with dynamic beam "
                        "allocation (Post & Vilar 2018) over the phrases' subword pieces. "
                        "Phrases that cannot fit in the longest output give a warning. "
                        "Use a beam of 4 or more; not with --sampling")
    parser.add_argument("--interactive", action="store_true",
                        help="translate each line of standard input as soon as it is typed")
    parser.add_argument("--target-language", metavar="LANG",
                        help="a multilingual model (such as OPUS-MT's en-ROMANCE): the "
                        "language to translate into, as a two-letter code (fr), the code of "
                        "the model's token (fra) or the token (>>fra<<), put before each "
                        "line; refused, with the languages the model has, when it has none "
                        "for LANG (default: each line may start with its own token)")
    add_errors_argument(parser)
    _add_decode_arguments(parser, nbest=True)
    parser.set_defaults(func=run_translate)


# SIGTERM, as Ctrl-C, removes the --output file being written. Neither cuts the import of
# torch and the loading of the model short: raised inside their C++ code, the exception
# could abort the process ("terminate called ...") rather than end it with one line.
@sigterm_unwinds()
def run_translate(args: argparse.Namespace) -> None:
    if args.interactive and args.input is not None:
        raise UserError("--interactive reads standard input; leave out --input")
    if args.file is not None:
        _translate_whole_file(args)
        return
    with stop_signals_held():
        from transformer_nmt.data.text import count_lines, iter_lines, read_lines
        from transformer_nmt.decode.text.output import requests, translate_file, translate_stream
        from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

        translator = Translator.from_files(args.model, _translator_options(
            args, alignments=args.alignments,
            buffer_size=1 if args.interactive else TranslatorOptions.buffer_size,
            token_scores=args.token_scores or args.format == "json",
            confidence=args.format == "json"))
    token = _language_token(translator, args.target_language)
    lines = (read_lines(args.input, args.errors) if args.input is not None
             else iter_lines(sys.stdin.buffer, "<stdin>", args.errors))
    if args.prefix is not None or args.constraints is not None:
        lines = requests(
            lines, None if args.prefix is None else read_lines(args.prefix, args.errors),
            None if args.constraints is None else read_lines(args.constraints, args.errors),
            args.prefix, args.constraints)
    as_json = args.format == "json"
    try:
        if args.output is None:
            speed = translate_stream(translator, lines, sys.stdout, nbest=args.nbest > 1,
                                     flush_each=args.interactive, as_json=as_json,
                                     language_token=token)
        else:
            total = count_lines(args.input) if args.input is not None else None
            speed = translate_file(translator, lines, args.output, nbest=args.nbest > 1,
                                   total=total, as_json=as_json, language_token=token)
    finally:
        translator.close()
    if not args.interactive:
        print(speed.summary(args.output), file=sys.stderr)


def _language_token(translator: Translator, language: str | None) -> str | None:
    """The token of --target-language in the model's vocabulary, or None without it."""
    if language is None:
        return None
    from transformer_nmt.decode.text.target_language import language_token

    return language_token(translator.vocab, language)


def _translate_whole_file(args: argparse.Namespace) -> None:
    """`nmt translate --file IN --output OUT`: one document in its own format."""
    if args.output is None or args.input is not None or args.interactive:
        raise UserError("--file IN needs --output OUT (the translated document) and no "
                        "--input or --interactive")
    try:
        from transformer_nmt.documents.formats import read_file, translate_into
        from transformer_nmt.documents.sentences import translator_translate
    except ImportError as error:
        raise UserError(f"--file needs the files extra ({error.name} is missing): pip "
                        "install 'transformer-nmt[files]'") from None
    document = read_file(args.file)  # refused before the model is loaded
    with stop_signals_held():
        from transformer_nmt.decode.text.translator import Translator

        translator = Translator.from_files(args.model, _translator_options(args))
    count = translate_into(document, args.output, translator_translate(
        translator, _language_token(translator, args.target_language)))
    print(f"nmt translate: {count} paragraphs of {args.file} translated into {args.output}",
          file=sys.stderr)


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
        "sacreBLEU. A model calibrated by `nmt calibrate` also gets how well its confidence "
        "ranks the split's sentences: its correlation with sentence chrF2, and the BLEU of "
        "the 50, 80 and 90% most confident sentences against all.",
        epilog="examples: nmt evaluate --model run/average.pt --data data/wmt14 --split test; "
        "nmt evaluate --hyp out.de --ref newstest2014.de --tgt-lang de",
    )
    parser.add_argument("--model", nargs="+", metavar="MODEL.pt",
                        help="model file to translate with; several make an ensemble (see "
                        "`nmt translate --help`)")
    parser.add_argument("--data", metavar="DATA_DIR",
                        help="data directory of `nmt prepare` (languages from its manifest)")
    parser.add_argument("--split", default="test",
                        help="split to translate: DATA_DIR/SPLIT.SRC_LANG (default %(default)s)")
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
    add_errors_argument(parser)
    _add_decode_arguments(parser)
    parser.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> None:
    from transformer_nmt.evaluate import (evaluate_files, evaluate_model, format_confidence,
                                          format_table)

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
        result = evaluate_model(args.model, args.data, args.split, options,
                                src_lang=args.src_lang, tgt_lang=args.tgt_lang,
                                json_path=args.json, hyp_path=args.output)
        print(result["speed"], file=sys.stderr)
        print(f"{result['sentences']} sentences of {args.data} {args.split}, "
              f"{result['src_lang']}-{result['tgt_lang']}; translations in {result['hyp']}")
    print(format_table(result))
    if result.get("confidence"):
        print(format_confidence(result["confidence"]))
    if result.get("json"):
        print(f"scores written to {result['json']}")


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
                        help="layer of the overview figure, 1-based (default: the last "
                        "layer that both the encoder and the decoder have)")
    add_fields(parser, DecodeConfig, ["beam"])
    parser.set_defaults(func=run_attention)


def run_attention(args: argparse.Namespace) -> None:
    from transformer_nmt.attention_plot import draw_attention

    target, written = draw_attention(args.model, args.src, args.out, args.tgt, args.beam,
                                     args.layer - 1 if args.layer > 0 else -1)
    print(f"target: {target}")
    print(f"wrote {len(written)} pictures to {args.out}: "
          f"{', '.join(path.name for path in written)}")
