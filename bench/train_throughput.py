"""Training throughput of the base model on this machine, against a plain PyTorch loop.

Trains the base preset (vocabulary 8000 unless --vocab says otherwise, random tokens) on
batches of 4000 target (and 4000 source) tokens for a few optimizer steps through
`Trainer.train_step`, in fp32 and in bf16 autocast, and times a reference of the same
shape: shared embeddings + positional
encodings + torch.nn.Transformer + tied output projection + the same label-smoothed loss
+ torch.optim.Adam with the paper's settings, the loop a PyTorch user would write. The
batches cycle through three shapes (200x20, 160x25, 125x32 tokens per side) so that
shape-specialised kernels cannot flatter either side.

Each case runs in its own process, so that its peak RSS is its own. Prints one JSON line
per case (target tokens/s, source+target tokens/s, seconds per step, peak RSS, MFU
against the matmul peak measured in that process) and one per precision with the
ours/reference ratios. The 2 cores may be shared with other work: compare the ratios of
one run, not absolute numbers across runs.

    python bench/train_throughput.py [--steps 3] [--precisions fp32,bf16] [--repeats 1]
                                     [--threads N] [--vocab 8000]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time

import torch
from torch import Tensor, nn

from process_memory import peak_rss_mb

from transformer_nmt.config import get_preset
from transformer_nmt.data.collate import Batch
from transformer_nmt.model.transformer import Transformer, sinusoidal_encodings
from transformer_nmt.training.distributed import init_distributed
from transformer_nmt.training.loss import label_smoothed_nll
from transformer_nmt.model.flops import train_step_flops
from transformer_nmt.training.metrics import measure_peak_flops
from transformer_nmt.training.precision import DTYPES, autocast
from transformer_nmt.training.trainer import Trainer

VOCAB = 8000
SHAPES = [(200, 20), (160, 25), (125, 32)]
"""(sentences, tokens per sentence and side): 4000 target tokens each, no padding."""


def make_batches(seed: int = 0) -> list[Batch]:
    """One random batch of each shape; every sentence ends with EOS (3), BOS is 2."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for rows, length in SHAPES:
        src = torch.randint(4, VOCAB, (rows, length), generator=generator)
        tgt = torch.randint(4, VOCAB, (rows, length + 1), generator=generator)
        src[:, -1] = 3
        tgt[:, 0], tgt[:, -1] = 2, 3
        batches.append(Batch(src, tgt[:, :-1], tgt[:, 1:], rows * length, rows * length, []))
    return batches


class ReferenceTransformer(nn.Module):
    """The base shape built from torch.nn.Transformer, as a PyTorch user would."""

    def __init__(self, d_model: int = 512, heads: int = 8, layers: int = 6, d_ff: int = 2048,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        self.register_buffer("positions", sinusoidal_encodings(1024, d_model), persistent=False)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout,
                                          batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.scale = math.sqrt(d_model)

    def _embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.embed(tokens) * self.scale + self.positions[: tokens.size(1)])

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        # Boolean like the padding masks (True: may not attend), as nn.Transformer prefers.
        causal = torch.ones(tgt_in.size(1), tgt_in.size(1), dtype=torch.bool).triu(1)
        hidden = self.transformer(
            self._embed(src), self._embed(tgt_in), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src.eq(0), memory_key_padding_mask=src.eq(0),
            tgt_key_padding_mask=tgt_in.eq(0))
        return hidden @ self.embed.weight.t()  # (batch, tgt_len, vocab), tied projection


def reference_step_function(precision: str):
    """A training step of the reference loop: forward, loss / tokens, backward, Adam."""
    model = ReferenceTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(batch: Batch) -> None:
        with autocast(torch.device("cpu"), precision):
            logits = model(batch.src, batch.tgt_in)
        loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
        (loss / batch.tgt_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def ours_step_function(precision: str):
    """A training step of transformer_nmt's Trainer on the base preset."""
    preset = get_preset("base")
    trainer = Trainer(Transformer(preset.model, VOCAB), preset.train, init_distributed("cpu"),
                      precision)
    return lambda batch: trainer.train_step([batch])


def run_case(impl: str, precision: str, steps: int) -> dict:
    """Time `steps` optimizer steps after one warm-up step per batch shape."""
    torch.manual_seed(1)
    batches = make_batches()
    step = (ours_step_function if impl == "ours" else reference_step_function)(precision)
    for batch in batches:
        step(batch)
    start = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    seconds = time.perf_counter() - start
    timed = [batches[i % len(batches)] for i in range(steps)]
    tgt = sum(batch.tgt_tokens for batch in timed)
    src = sum(batch.src_tokens for batch in timed)
    cfg = get_preset("base").model
    flops = sum(train_step_flops(cfg, VOCAB, batch.src.size(1), batch.tgt_out.size(1), len(batch))
                for batch in timed)
    peak = measure_peak_flops(torch.device("cpu"), DTYPES[precision])
    return {"bench": "train_throughput", "impl": impl, "precision": precision, "steps": steps,
            "vocab": VOCAB,
            "threads": torch.get_num_threads(), "tgt_tokens_per_step": tgt // steps,
            "tgt_tok_s": round(tgt / seconds, 1), "src_tgt_tok_s": round((tgt + src) / seconds, 1),
            "step_s": round(seconds / steps, 3),
            "peak_rss_gb": round(peak_rss_mb() / 1024, 3),
            "mfu": round(flops / seconds / peak, 4), "matmul_peak_gflops": round(peak / 1e9, 1)}


def main() -> None:
    global VOCAB  # --vocab sets the vocabulary of every case
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per case (default 3)")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every case this many times, interleaved; best counts")
    parser.add_argument("--threads", type=int,
                        help="torch threads (default: one per core); 1 gives steadier ratios "
                        "when other jobs share the cores")
    parser.add_argument("--vocab", type=int, default=VOCAB,
                        help=f"vocabulary size (default {VOCAB}; the paper's English-German "
                        "models had about 37000)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # IMPL:PRECISION, in a child
    args = parser.parse_args()
    VOCAB = args.vocab
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.case:
        impl, precision = args.case.split(":")
        print(json.dumps(run_case(impl, precision, args.steps)), flush=True)
        return
    best: dict[tuple[str, str], dict] = {}
    for _ in range(args.repeats):
        for precision in args.precisions.split(","):
            for impl in ("ours", "reference"):
                child = subprocess.run(
                    [sys.executable, __file__, "--case", f"{impl}:{precision}",
                     "--steps", str(args.steps), "--threads", str(torch.get_num_threads()),
                     "--vocab", str(args.vocab)],
                    capture_output=True, text=True, check=True)
                result = json.loads(child.stdout.strip().splitlines()[-1])
                print(json.dumps(result), flush=True)
                key = (impl, precision)
                if key not in best or result["tgt_tok_s"] > best[key]["tgt_tok_s"]:
                    best[key] = result
    for precision in args.precisions.split(","):
        ours, reference = best[("ours", precision)], best[("reference", precision)]
        print(json.dumps({"bench": "train_throughput", "ratio": "ours/reference",
                          "precision": precision,
                          "tgt_tok_s": round(ours["tgt_tok_s"] / reference["tgt_tok_s"], 3),
                          "peak_rss": round(ours["peak_rss_gb"] / reference["peak_rss_gb"], 3)}))
    if "fp32" in args.precisions and "bf16" in args.precisions:
        print(json.dumps({"bench": "train_throughput",
                          "ratio": "ours bf16 / reference fp32",
                          "tgt_tok_s": round(best[("ours", "bf16")]["tgt_tok_s"]
                                             / best[("reference", "fp32")]["tgt_tok_s"], 3)}))


if __name__ == "__main__":
    main()
