"""`nmt import`."""

from __future__ import annotations

import argparse

from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held

SOURCES = ("huggingface", "marian", "fairseq")
"""What --from takes (transformer_nmt.pretrained.write.SOURCES, named here so that
`nmt --help` imports no torch)."""
BPES = ("sentencepiece", "subword_nmt", "fastbpe")
"""What --bpe takes (transformer_nmt.pretrained.fairseq.BPES)."""
DESCRIPTION = (
    "Write a pretrained translation model of another toolkit as a model "
    "file of this project, which translate, evaluate, score, attention, serve, "
    "calibrate, train --init-from (fine-tuning) and export then take as they take "
    "their own. huggingface: a MarianMTModel directory, as OPUS-MT's models are "
    "published on the Hugging Face Hub (config.json, model.safetensors or "
    "pytorch_model.bin, source.spm, target.spm, vocab.json, and target_vocab.json "
    "where the sides have separate vocabularies; tokenizer_config.json "
    "gives the languages, README.md the licence): download one with `git clone "
    "https://huggingface.co/Helsinki-NLP/opus-mt-en-de` or `huggingface-cli download`. "
    "The weights are read by transformers (`pip install 'transformer-nmt[pretrained]'`), "
    "which the imported model no longer needs. marian: Marian's own format, a zip "
    "release of OPUS-MT or the Tatoeba-Challenge unzipped (decoder.yml, the .npz "
    "weights, the .vocab.yml id map (or one per side) with source.spm and "
    "target.spm, or .spm "
    "vocabularies; LICENSE or README.md gives the licence), read with numpy and PyYAML "
    "(in the same extra). fairseq: a checkpoint of fairseq's "
    "Transformer (checkpoint_best.pt of --arch transformer, transformer_wmt_en_de, "
    "transformer_vaswani_wmt_en_de_big, ...), read as data without running it, with "
    "the dict.SRC.txt and dict.TGT.txt of its data (--dict-dir) and the sentencepiece "
    "model its pieces come from (--bpe sentencepiece --bpe-model), or, as fairseq's "
    "WMT models, the BPE codes of Moses tokens (--bpe subword_nmt or fastbpe "
    "--bpe-codes; `pip install 'transformer-nmt[pretrained]'` brings subword-nmt); "
    "separate dictionaries, and Moses, need --src-lang and --tgt-lang where the "
    "checkpoint names no languages. What this "
    "project's Transformer cannot represent (fairseq's layernorm_embedding, say) is "
    "refused in one line, never "
    "imported wrong. A multilingual OPUS-MT model's sources start with the "
    "target-language token, as with Marian: '>>fra<< Hello'.")
"""`nmt import --help`'s description: every source, what it reads and what it refuses."""


def add_import_parser(subparsers: argparse._SubParsersAction) -> None:
    """`nmt import` and its arguments."""
    parser = subparsers.add_parser(
        "import",
        help="import a pretrained model of another toolkit (OPUS-MT's, from Hugging Face or "
        "Marian; fairseq checkpoints)",
        description=DESCRIPTION,
        epilog="examples: nmt import --from huggingface opus-mt-en-de --out en-de.pt && "
        "nmt serve --model en-de.pt; nmt import --from marian opus-2020-02-26 --out "
        "en-de.pt; nmt import --from fairseq checkpoints/checkpoint_best.pt "
        "--dict-dir data-bin --bpe sentencepiece --bpe-model spm.model --out en-de.pt",
    )
    parser.add_argument("--from", dest="source", required=True, choices=SOURCES,
                        help="the toolkit the model comes from")
    parser.add_argument("path", metavar="PATH", help="the model's directory (huggingface, "
                        "marian) or checkpoint file (fairseq)")
    parser.add_argument("--out", required=True, metavar="MODEL.pt",
                        help="the model file to write")
    parser.add_argument("--src-lang", metavar="LANG",
                        help="the source language (default: what the model records)")
    parser.add_argument("--tgt-lang", metavar="LANG",
                        help="the target language (default: what the model records)")
    _add_fairseq_arguments(parser)
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.set_defaults(func=run_import)


def _add_fairseq_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments only a fairseq checkpoint needs: its dictionaries and its pieces."""
    parser.add_argument("--dict-dir", metavar="DIR",
                        help="fairseq: the directory of the checkpoint's dict.SRC.txt and "
                        "dict.TGT.txt (fairseq-preprocess's --destdir; default: the "
                        "checkpoint's directory)")
    parser.add_argument("--bpe", choices=BPES, default="sentencepiece",
                        help="fairseq: how the dictionaries' pieces were made: a "
                        "sentencepiece model (--bpe-model), or Moses tokens cut by BPE codes "
                        "of subword_nmt or fastbpe (--bpe-codes; the Moses languages are "
                        "the checkpoint's, or --src-lang and --tgt-lang) (default: "
                        "%(default)s)")
    parser.add_argument("--bpe-model", metavar="FILE.model",
                        help="fairseq: the sentencepiece model of the dictionaries' pieces")
    parser.add_argument("--bpe-codes", metavar="FILE",
                        help="fairseq: the BPE codes of the dictionaries' pieces (--bpe "
                        "subword_nmt or fastbpe; bpecodes in fairseq's WMT releases)")


@sigterm_unwinds()
def run_import(args: argparse.Namespace) -> None:
    with stop_signals_held():
        from transformer_nmt.model_file import describe_model
        from transformer_nmt.pretrained.write import import_model

    payload = import_model(args.source, args.path, args.out, args.force,
                           (args.src_lang, args.tgt_lang), dict_dir=args.dict_dir,
                           bpe=args.bpe, bpe_model=args.bpe_model, bpe_codes=args.bpe_codes)
    languages = "-".join(filter(None, (payload.get("src_lang"), payload.get("tgt_lang"))))
    print(f"wrote {args.out}{f' ({languages})' if languages else ''}; translate with "
          f"nmt translate --model {args.out}, serve with nmt serve --model {args.out}")
    for label, value in describe_model(args.out):
        print(f"  {label}: {value}")
