"""Whether bf16 or fp32 decoding gives each sentence the same translation whatever shares
its batch, and what batch-invariant decoding costs against the plain way.

A random model of the `small` preset (vocabulary --vocab) decodes --sentences random
sentences (2 to 40 tokens, each output stopped at 20 tokens), in --precision (bf16 or
fp32) on the CPU, two ways: as prepared by default (products packed, their rows padded
to a few sizes) and batch-invariant
(prepare_model(batch_invariant=True)). For each, it counts the sentences whose tokens,
or whose tokens or scores, differ between decoding alone and in shuffled batches of
--batch sentences, and times the sentences alone and in sorted batches, --repeats
times alternating the two ways (the best of each). Prints one JSON line per way.

    python bench/batch_invariance.py [--precision bf16] [--sentences 32] [--batch 16]
        [--beam 4] [--vocab 8000] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import replace

import torch

from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.search.searches import search
from transformer_nmt.model.transformer import Transformer

PAD, EOS = 0, 3


def source(batch: list[list[int]]) -> torch.Tensor:
    """(len(batch), longest + 1): ids, EOS, PAD."""
    src = torch.full((len(batch), max(map(len, batch)) + 1), PAD, dtype=torch.long)
    for row, ids in enumerate(batch):
        src[row, : len(ids)] = torch.tensor(ids)
        src[row, len(ids)] = EOS
    return src


def batched(model, sentences, cfg, order, size):
    """(tokens, score) of every sentence, decoded in batches of `size` taken in `order`."""
    found = {}
    for start in range(0, len(order), size):
        rows = order[start: start + size]
        for row, hyps in zip(rows, search(model, source([sentences[i] for i in rows]), cfg)):
            found[row] = (tuple(hyps[0].tokens), hyps[0].score)
    return [found[i] for i in range(len(sentences))]


def differ(got, alone) -> tuple[int, int]:
    """(sentences whose tokens differ, whose tokens or score differ)."""
    return (sum(g[0] != a[0] for g, a in zip(got, alone)), sum(g != a for g, a in zip(got, alone)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = Transformer(replace(get_preset("small").model, dropout=0.0), args.vocab).eval()
    rng = random.Random(1)
    sentences = [[rng.randrange(4, args.vocab) for _ in range(rng.randrange(2, 41))]
                 for _ in range(args.sentences)]
    cfg = DecodeConfig(beam=args.beam, nbest=1, max_len_a=0.0, max_len_b=20)
    by_length = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    shuffled = list(range(len(sentences)))
    random.Random(2).shuffle(shuffled)
    ways = {way: prepare_model(_copy(base), "cpu", args.precision,
                               batch_invariant=way == "invariant")
            for way in ("today", "invariant")}
    report = {way: {"seconds": {}} for way in ways}
    for repeat in range(args.repeats):
        for way, model in ways.items():
            seconds = report[way]["seconds"]
            start = time.perf_counter()
            alone = batched(model, sentences, cfg, list(range(len(sentences))), 1)
            _best(seconds, "alone", time.perf_counter() - start)
            start = time.perf_counter()
            batched(model, sentences, cfg, by_length, args.batch)
            _best(seconds, "sorted_batches", time.perf_counter() - start)
            if repeat == 0:
                report[way]["differ_in_batches"] = differ(
                    batched(model, sentences, cfg, shuffled, args.batch), alone)
    for way, found in report.items():
        print(json.dumps({"way": way, "precision": args.precision,
                          "sentences": args.sentences, "batch": args.batch,
                          "beam": args.beam, "threads": args.threads, **found}))


def _copy(model: Transformer) -> Transformer:
    copy = Transformer(model.cfg, model.vocab_size).eval()
    copy.load_state_dict(model.state_dict())
    return copy


def _best(seconds: dict, name: str, value: float) -> None:
    seconds[name] = round(min(seconds.get(name, value), value), 3)


if __name__ == "__main__":
    main()
