"""fp32 CPU decoding with and without this round's changes, alternating in one process.

The changes: the linear layers' matrices as decoding prepares them (stored transposed
when this was written; packed once for oneDNN since issue 51, transformer_nmt.decode.
device.layout) and the searches' top-k and row maxima taken over blocks (transformer_nmt.decode.
selection). Four variants decode the same batches in turn, --rounds times: `current`
(both), `linear_layout` (nn.Linear's own layout), `torch_selection` (torch.topk and
torch.max) and `before` (neither). Prints one JSON line per variant and search: median
tokens/s (EOS included) and its ratio to `before`, and how many sentences' outputs
differ from `before`'s. First, the operations themselves on one thread (`kernel`).

With --model, a trained model decodes --src until its own EOS; without, the random
base-shape model of bench/translate_speed.py with its realistic forced lengths, on
newstest2014.

    python bench/cpu_decoding_changes.py [--model M.pt --src FILE] [--sentences 389]
        [--batch-size 16] [--workers 1] [--rounds 4]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch

import translate_speed
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search import searches as search
from transformer_nmt.decode.device.layout import PackedLinear, padded_rows
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.decode.device.threads import decoding_threads, torch_threads
from transformer_nmt.model.transformer import Transformer

VARIANTS = ("current", "linear_layout", "torch_selection", "before")


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


@contextmanager
def torch_selection(enabled: bool):
    """Searches select with torch.topk and torch.max while enabled."""
    saved = search.top_k, search.row_max
    if enabled:
        search.top_k = lambda scores, k: scores.topk(k, dim=1)
        search.row_max = lambda scores: scores.max(dim=1)
    try:
        yield
    finally:
        search.top_k, search.row_max = saved


def best_microseconds(fn, repeats: int = 100) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return round(best * 1e6, 1)


def kernels(d_model: int, vocab: int) -> None:
    """The operations themselves, one thread: selection at a beam step's and a greedy
    step's shapes, and the pre-softmax projection in both layouts."""
    generator = torch.Generator().manual_seed(0)
    with torch_threads(1):
        for rows, width, k in ((16, 4 * vocab, 8), (16, vocab, 1), (64, vocab, 8)):
            x = torch.randn(rows, width, generator=generator)
            figure(figure="kernel", op=f"top {k} of ({rows}, {width})",
                   torch_us=best_microseconds(lambda: x.topk(k, dim=1) if k > 1 else x.max(dim=1)),
                   blocked_us=best_microseconds(lambda: search.top_k(x, k) if k > 1
                                                else search.row_max(x)))
        weight = torch.randn(vocab, d_model, generator=generator)
        prepared = PackedLinear(weight, None, 4)
        for rows in (16, 64):
            assert padded_rows(rows, 4) == rows  # no padding in the prepared layer's figure
            x = torch.randn(rows, d_model, generator=generator)
            figure(figure="kernel", op=f"projection ({rows}, {d_model}) x ({d_model}, {vocab})",
                   linear_us=best_microseconds(lambda: torch.nn.functional.linear(x, weight)),
                   prepared_us=best_microseconds(lambda: prepared(x)))


def decode(model, sources, beam: int, special: SpecialIds, workers: int):
    """Per sentence its best output tokens, and the tokens generated (EOS included)."""
    cfg = DecodeConfig(beam=beam)

    def one(src):
        if beam == 1:
            return [hyp.tokens for hyp in greedy_search(model, src, cfg, special)]
        return [best[0].tokens for best in beam_search(model, src, cfg, special)]

    with ThreadPoolExecutor(workers) as pool:
        outputs = [tokens for batch in pool.map(one, sources) for tokens in batch]
    return outputs, sum(len(tokens) + 1 for tokens in outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    translate_speed.add_model_arguments(parser)
    parser.add_argument("--sentences", type=int, default=389)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    translate_speed.require_source(parser, args)
    with tempfile.TemporaryDirectory() as workdir:
        spm = None if args.model else translate_speed.learn_vocab(8000, Path(workdir))
        model, vocab = translate_speed.model_and_vocab(args.model, spm)
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    ids = vocab.encode_batch(translate_speed.read_sentences(args.src, args.sentences))
    sources = translate_speed.batches(ids, args.batch_size, special.pad, special.eos)
    plain = copy.deepcopy(model).eval()  # as decoding prepared an fp32 model before
    transposed = prepare_model(model, "cpu", "fp32")
    figure(figure="setup", model=args.model or "random base model, forced lengths",
           source=str(args.src), sentences=len(ids), batch_size=args.batch_size,
           workers=args.workers, threads_per_worker=decoding_threads(args.workers, "cpu"))
    transformer = next(m for m in transposed.modules() if isinstance(m, Transformer))
    kernels(transformer.cfg.d_model, transformer.vocab_size)
    with torch_threads(decoding_threads(args.workers, "cpu")):
        for beam in (1, 4):
            speeds = {name: [] for name in VARIANTS}
            outputs = {}
            for round_ in range(args.rounds + 1):  # round 0 warms up
                for name in VARIANTS:
                    model_of = transposed if name in ("current", "torch_selection") else plain
                    with torch_selection(name in ("torch_selection", "before")):
                        start = time.perf_counter()
                        outputs[name], tokens = decode(model_of, sources, beam, special,
                                                       args.workers)
                        if round_:
                            speeds[name].append(tokens / (time.perf_counter() - start))
            before = statistics.median(speeds["before"])
            for name in VARIANTS:
                figure(figure="decode", search="greedy" if beam == 1 else f"beam{beam}",
                       variant=name, tokens_per_s=round(statistics.median(speeds[name]), 1),
                       ratio_to_before=round(statistics.median(speeds[name]) / before, 3),
                       outputs_differing_from_before=sum(
                           a != b for a, b in zip(outputs[name], outputs["before"])))


if __name__ == "__main__":
    main()
