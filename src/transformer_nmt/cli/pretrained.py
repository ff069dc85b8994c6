"""`nmt import`."""

from __future__ import annotations

import argparse

from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held

SOURCES = ("huggingface", "marian")
"""What --from takes (transformer_nmt.pretrained.write.SOURCES, named here so that
`nmt --help` imports no torch)."""


def add_import_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import",
        help="import a pretrained model of another toolkit (OPUS-MT's, from Hugging Face or "
        "Marian)",
        description="Write a pretrained translation model of another toolkit as a model "
        "file of this project, which translate, evaluate, score, attention, serve, "
        "calibrate, train --init-from (fine-tuning) and export then take as they take "
        "their own. huggingface: a MarianMTModel directory, as OPUS-MT's models are "
        "published on the Hugging Face Hub (config.json, model.safetensors or "
        "pytorch_model.bin, source.spm, target.spm, vocab.json; tokenizer_config.json "
        "gives the languages, README.md the licence): download one with `git clone "
        "https://huggingface.co/Helsinki-NLP/opus-mt-en-de` or `huggingface-cli download`. "
        "The weights are read by transformers (`pip install 'transformer-nmt[pretrained]'`), "
        "which the imported model no longer needs. marian: Marian's own format, a zip "
        "release of OPUS-MT or the Tatoeba-Challenge unzipped (decoder.yml, the .npz "
        "weights, the .vocab.yml id map with source.spm and target.spm, or .spm "
        "vocabularies; LICENSE or README.md gives the licence), read with numpy and PyYAML "
        "(in the same extra). What this project's Transformer "
        "cannot represent (separate source and target vocabularies, multilingual "
        "target-language tokens) is refused in one line, never imported wrong.",
        epilog="example: nmt import --from huggingface opus-mt-en-de --out en-de.pt && "
        "nmt serve --model en-de.pt",
    )
    parser.add_argument("--from", dest="source", required=True, choices=SOURCES,
                        help="the toolkit the model comes from")
    parser.add_argument("path", metavar="DIR", help="the model's directory")
    parser.add_argument("--out", required=True, metavar="MODEL.pt",
                        help="the model file to write")
    parser.add_argument("--src-lang", metavar="LANG",
                        help="the source language (default: what the model records)")
    parser.add_argument("--tgt-lang", metavar="LANG",
                        help="the target language (default: what the model records)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.set_defaults(func=run_import)


@sigterm_unwinds()
def run_import(args: argparse.Namespace) -> None:
    with stop_signals_held():
        from transformer_nmt.model_file import describe_model
        from transformer_nmt.pretrained.write import import_model

    payload = import_model(args.source, args.path, args.out, args.force,
                           (args.src_lang, args.tgt_lang))
    languages = "-".join(filter(None, (payload.get("src_lang"), payload.get("tgt_lang"))))
    print(f"wrote {args.out}{f' ({languages})' if languages else ''}; translate with "
          f"nmt translate --model {args.out}, serve with nmt serve --model {args.out}")
    for label, value in describe_model(args.out):
        print(f"  {label}: {value}")
