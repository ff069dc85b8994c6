"""`nmt export`: a model file in the formats other runtimes load."""

from __future__ import annotations

import argparse
from typing import get_args

from transformer_nmt.config import Quantization
from transformer_nmt.errors import UserError
from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held

FORMATS = ("ctranslate2", "argos", "safetensors")
QUANTIZATIONS = get_args(Quantization)
"""CTranslate2's weight types, as config.Quantization declares them."""


def add_export_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a model to CTranslate2, an Argos Translate package, or safetensors",
        description="Write a model file in a format another runtime loads. ctranslate2: a "
        "CTranslate2 model directory (ctranslate2.Translator(OUT) loads it; the shared "
        "sentencepiece vocabulary goes in as its vocabulary, and the pieces are given to "
        "it without the end-of-sentence token, which it adds; the model's shortlist, where "
        "`nmt shortlist` made one, goes in as vmap.txt). argos: an Argos Translate "
        "package OUT.argosmodel (the CTranslate2 model, the sentencepiece model, "
        "metadata.json) that `argospm install` and LibreTranslate take. safetensors: a "
        "directory with the weights (model.safetensors), config.json and the "
        "sentencepiece model, which `nmt translate --model OUT` reads back. Every export "
        "records the model's preset, training steps and languages (CTranslate2: "
        "transformer_nmt.json; argos: metadata.json; safetensors: config.json). OUT is "
        "built aside and appears complete or not at all; an existing OUT is replaced only "
        "with --force. A model the runtime cannot run (CTranslate2: attention heads whose "
        "d_v differs from d_k) is refused in one line. ctranslate2 and argos need `pip install "
        "'transformer-nmt[ctranslate2]'`, safetensors `[safetensors]`.",
        epilog="examples: nmt export --model run/model.pt --to ctranslate2 model-ct2; "
        "nmt export --model run/model.pt --to ctranslate2 model-int8 --quantization int8; "
        "nmt export --model run/model.pt --to argos en_de.argosmodel; "
        "nmt export --model run/model.pt --to safetensors model-st",
    )
    parser.add_argument("--model", required=True, metavar="MODEL.pt",
                        help="model file: a checkpoint of `nmt train`, the output of "
                        "`nmt average`, or a safetensors export")
    parser.add_argument("--to", required=True, choices=FORMATS, help="the format to write")
    parser.add_argument("out", metavar="OUT", help="the directory (argos: the .argosmodel "
                        "file) to write")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                        help="ctranslate2 and argos: how CTranslate2 stores the weights "
                        "(default float32; int8 is about 4x smaller and faster on CPUs, and "
                        "may change a few words; int8_7bit is int8 whose products cannot "
                        "saturate on an x86 CPU without VNNI, such as an AVX2-only AMD "
                        "one, where int8 drifts from float32: choose it when you do not "
                        "know the CPU); CTranslate2 can also quantize on load "
                        "(compute_type)")
    parser.add_argument("--shortlist", action=argparse.BooleanOptionalAction, default=True,
                        help="ctranslate2: include the model's shortlist (made by `nmt "
                        "shortlist`), where it has one, as the export's vmap.txt, which "
                        "translate_batch(..., use_vmap=True) uses (default: on)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing OUT (only once the new one is complete)")
    argos = parser.add_argument_group("argos")
    argos.add_argument("--from-code", metavar="LANG",
                       help="the package's source language code (default: the model's)")
    argos.add_argument("--to-code", metavar="LANG",
                       help="the package's target language code (default: the model's)")
    argos.add_argument("--package-version", default="1.0", metavar="VERSION",
                       help="the package's version, as argospm compares them "
                       "(default %(default)s)")
    parser.set_defaults(func=run_export)


# SIGTERM, as Ctrl-C, removes the export being built (see export/output.py); neither
# cuts the import of torch and the runtime short (interrupts.stop_signals_held).
@sigterm_unwinds()
def run_export(args: argparse.Namespace) -> None:
    if args.to != "argos" and (args.from_code or args.to_code):
        raise UserError("--from-code and --to-code are for --to argos")
    if args.to != "ctranslate2" and not args.shortlist:
        raise UserError("--no-shortlist is for --to ctranslate2, whose export alone "
                        "includes the model's shortlist")
    if args.to == "safetensors" and args.quantization != "float32":
        raise UserError("--quantization is for --to ctranslate2 and --to argos; "
                        "safetensors exports keep the model's weights as they are")
    if args.to == "ctranslate2":
        with stop_signals_held():
            from transformer_nmt.export.ctranslate2 import export_ctranslate2

        out = export_ctranslate2(args.model, args.out, args.quantization, args.force,
                                 args.shortlist)
        vmap = ("; its shortlist: translate_batch(..., use_vmap=True)"
                if (out / "vmap.txt").exists() else "")
        print(f"wrote the CTranslate2 model {out} ({args.quantization} weights); load it "
              f"with ctranslate2.Translator({str(out)!r}){vmap}")
    elif args.to == "argos":
        with stop_signals_held():
            from transformer_nmt.export.argos import export_argos

        out = export_argos(args.model, args.out, args.quantization, args.force,
                           from_code=args.from_code, to_code=args.to_code,
                           package_version=args.package_version)
        print(f"wrote the Argos Translate package {out}; install it with "
              f"argostranslate.package.install_from_path or `argospm install`")
    else:
        with stop_signals_held():
            from transformer_nmt.export.safetensors import export_safetensors

        out = export_safetensors(args.model, args.out, args.force)
        print(f"wrote {out}; translate with it: nmt translate --model {out}")
