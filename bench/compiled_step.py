"""One incremental decoder step of a trained model at a lone sentence's shape, eager
against compiled (issue 51: "a step as one call").

The step is bench/compiled_decoding.py's `decoder_step` (the same arithmetic as
Transformer.decode with a cache, one position): --rows rows (a lone sentence's beam),
--length positions already cached, a source of --source-length tokens, in --precision.
Four ways, each timed over --steps calls after warming up:

- `eager_prepared`: the model as `nmt translate` prepares it (matrices packed once);
- `eager_plain`: the same model with nn.Linear's own products;
- `compiled`: torch.compile (Inductor) of the plain model's step, freezing on (it packs
  the weights for oneDNN itself), static shapes, Python wrapper;
- `compiled_cpp`: the same with Inductor's C++ wrapper, which calls the kernels from
  C++ rather than from Python.

Prints one JSON line per way: microseconds per step, the first call's seconds (the
compilation), and the largest difference from `eager_plain`'s logits.

With --source FILE, then the whole search: beam search (beam 4, α 0.6) of --sentences
lines of FILE, each alone, with the model as decoding prepares it and with
bench/compiled_decoding.py's CompiledDecoder (every step after the first compiled, rows
fixed, positions and source length dynamic, the C++ wrapper), 3 lines to warm up (the
compilation) then timed: ms per sentence (median) and how many outputs are identical.
Nothing here is used by `nmt` yet.

    python bench/compiled_step.py --model MODEL.pt [--precision bf16] [--rows 4]
        [--source test.en --sentences 40]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from compiled_decoding import CompiledDecoder, decoder_step
from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import normalize
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import beam_search
from transformer_nmt.model_file import load_for_inference


def step_inputs(model, rows: int, length: int, source_length: int, dtype: torch.dtype):
    """decoder_step's arguments after `length` cached positions (random keys and values,
    which the timing does not depend on)."""
    cfg = model.cfg
    generator = torch.Generator().manual_seed(0)

    def keys(batch: int, positions: int) -> torch.Tensor:
        return torch.randn(batch, cfg.heads, positions, cfg.d_k, generator=generator).to(dtype)

    self_keys = [keys(rows, length + 1) for _ in range(cfg.decoder_layers)]
    self_values = [keys(rows, length + 1) for _ in range(cfg.decoder_layers)]
    cross_keys = [keys(1, source_length) for _ in range(cfg.decoder_layers)]
    cross_values = [keys(1, source_length) for _ in range(cfg.decoder_layers)]
    mask = torch.ones(1, 1, 1, source_length, dtype=torch.bool)
    tokens = torch.randint(4, 100, (rows, 1), generator=generator)
    positional = model._positional(length, 1, model.positions).clone()
    return (tokens, torch.tensor([length]), positional, self_keys, self_values, cross_keys,
            cross_values, mask)


def timed(step, model, inputs, steps: int) -> tuple[float, float, torch.Tensor]:
    """(seconds of the first call, microseconds per later call, the logits)."""
    with torch.inference_mode():
        start = time.perf_counter()
        logits = step(model, *inputs)
        first = time.perf_counter() - start
        for _ in range(10):
            step(model, *inputs)
        start = time.perf_counter()
        for _ in range(steps):
            step(model, *inputs)
        return first, (time.perf_counter() - start) / steps * 1e6, logits


def lone_searches(model, sources: list[torch.Tensor], special: SpecialIds
                  ) -> tuple[list[float], list[list[int]]]:
    """Each source searched alone: (seconds per source, best tokens per source)."""
    cfg = DecodeConfig(beam=4, alpha=0.6)
    seconds, outputs = [], []
    with torch.inference_mode():
        for src in sources:
            start = time.perf_counter()
            best = beam_search(model, src, cfg, special)[0][0]
            seconds.append(time.perf_counter() - start)
            outputs.append(best.tokens)
    return seconds, outputs


def measure_search(args: argparse.Namespace, plain, prepared, vocab) -> None:
    """Lone sentences: the prepared model against the compiled step."""
    import statistics

    import torch._inductor.config as inductor

    lines = args.source.read_text(encoding="utf-8").splitlines()[: args.sentences + 3]
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    sources = [torch.tensor([ids + [special.eos]])
               for ids in vocab.encode_batch([normalize(line) for line in lines])]
    torch._dynamo.reset()
    inductor.cpp_wrapper = True
    compiled = CompiledDecoder(plain, fixed_rows=True)
    results = {}
    for name, model in (("eager_prepared", prepared), ("compiled_cpp", compiled)):
        start = time.perf_counter()
        lone_searches(model, sources[:3], special)
        warm_up = time.perf_counter() - start
        results[name] = (warm_up, *lone_searches(model, sources[3:], special))
    reference = results["eager_prepared"][2]
    for name, (warm_up, seconds, outputs) in results.items():
        print(json.dumps(dict(
            figure="lone_search", way=name, precision=args.precision,
            sentences=len(seconds), warm_up_s=round(warm_up, 1),
            p50_ms=round(statistics.median(seconds) * 1000, 1),
            mean_ms=round(statistics.mean(seconds) * 1000, 1),
            identical=sum(a == b for a, b in zip(outputs, reference)))), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--source", type=Path, help="also time lone searches of its lines")
    parser.add_argument("--sentences", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.precision == "fp32" else torch.bfloat16
    loaded = load_for_inference(args.model, "cpu")
    plain = loaded.model.to(dtype).eval()
    prepared = prepare_model(copy.deepcopy(plain), "cpu", args.precision)
    inputs = step_inputs(plain, args.rows, args.length, args.source_length, dtype)
    import torch._inductor.config as inductor

    inductor.freezing = True
    ways = {"eager_plain": (decoder_step, plain), "eager_prepared": (decoder_step, prepared),
            "compiled": (torch.compile(decoder_step, dynamic=False), plain)}
    results = {}
    for name, (step, model) in ways.items():
        results[name] = timed(step, model, inputs, args.steps)
    torch._dynamo.reset()
    inductor.cpp_wrapper = True
    results["compiled_cpp"] = timed(torch.compile(decoder_step, dynamic=False), plain, inputs,
                                    args.steps)
    reference = results["eager_plain"][2].float()
    for name, (first, microseconds, logits) in results.items():
        print(json.dumps(dict(
            figure="decoder_step", way=name, precision=args.precision, rows=args.rows,
            length=args.length, threads=args.threads, us_per_step=round(microseconds),
            first_call_s=round(first, 2),
            max_abs_diff=round(float((logits.float() - reference).abs().max()), 4))),
            flush=True)
    if args.source is not None:
        measure_search(args, plain, prepared, loaded.vocab)


if __name__ == "__main__":
    main()
