"""Speed and peak memory of decoding with more or fewer sentences per batch.

The matrix products of a decoding step are faster per row with more rows, and memory
grows with the sentences of a batch (each keeps its encoder-decoder keys and values) and
with its rows. This measures, for each search and each number of sentences per worker,
two workers of one thread each (`nmt translate`'s layout on 2 cores) decoding the same
sentences, each case in a fresh process so that its peak RSS is its own. Prints one JSON
line per case: sentences/s, tokens/s (EOS included), peak RSS.

Without --model: the random base-shape model of bench/translate_speed.py, each sentence
stopped at its own realistic length, on the first --sentences of newstest2014; with
--model and --src, a trained model until its own EOS.

    python bench/batch_sentences.py [--model M.pt --src FILE] [--sentences 500]
        [--cases greedy:16,greedy:32,greedy:48,greedy:64,beam2:16,beam2:32,beam4:16]
        [--precision fp32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from process_memory import peak_rss_mb


def measure(args: argparse.Namespace) -> None:
    """One case, in this process."""
    import torch

    import translate_speed
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.decode.runtime.precision import prepare_model
    from transformer_nmt.decode.search.base import SpecialIds

    torch.set_num_threads(1)
    model, vocab = translate_speed.model_and_vocab(args.model, args.spm)
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    search, per_worker = args.case.split(":")
    beam = 1 if search == "greedy" else int(search.removeprefix("beam"))
    model = prepare_model(model, "cpu", args.precision)
    ids = vocab.encode_batch(translate_speed.read_sentences(args.src, args.sentences))
    sources = translate_speed.batches(ids, int(per_worker), special.pad, special.eos)
    cfg = DecodeConfig(beam=beam)
    translate_speed.run(model, sources[-2:], cfg, special, workers=2)  # warm-up, short ones
    seconds, others, sentences, tokens = translate_speed.run(model, sources, cfg, special,
                                                             workers=2)
    print(json.dumps(dict(
        figure="batch_sentences", search=search, sentences_per_worker=int(per_worker),
        workers=2, precision=args.precision, sentences_per_s=round(sentences / seconds, 2),
        tokens_per_s=round(tokens / seconds, 1), others_cores=round(others, 2),
        peak_rss_mb=peak_rss_mb())), flush=True)


def main() -> None:
    import translate_speed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    translate_speed.add_model_arguments(parser)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--cases", default="greedy:16,greedy:32,greedy:48,greedy:64,"
                        "beam2:16,beam2:32,beam4:16",
                        help="SEARCH:SENTENCES_PER_WORKER, comma-separated")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # in a child
    parser.add_argument("--spm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    translate_speed.require_source(parser, args)
    if args.case:
        measure(args)
        return
    with tempfile.TemporaryDirectory() as workdir:
        spm = [] if args.model else ["--spm", str(translate_speed.learn_vocab(8000,
                                                                              Path(workdir)))]
        for case in args.cases.split(","):
            model = ["--model", args.model] if args.model else []
            child = subprocess.run(
                [sys.executable, __file__, "--case", case, "--src", str(args.src),
                 "--sentences", str(args.sentences), "--precision", args.precision,
                 *model, *spm], capture_output=True, text=True, check=True)
            print(child.stdout, end="", flush=True)


if __name__ == "__main__":
    main()
