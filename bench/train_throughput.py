"""Training throughput of the base model, against a plain PyTorch loop: on this CPU or on a GPU.

Trains the base preset (random tokens) for a few optimizer steps through
`Trainer.train_step`, and times a reference of the same shape: shared embeddings +
positional encodings + torch.nn.Transformer + tied output projection + the same
label-smoothed loss + torch.optim.Adam with the paper's settings, the loop a PyTorch user
would write. An optimizer step accumulates the gradients of --step-tokens target tokens
in micro-batches of --max-tokens (and as many source tokens), in both loops the same way.
The micro-batches cycle through three lengths (20, 25 and 32 tokens per side, as many
rows as --max-tokens allows: 200x20, 160x25, 125x32 at 4000) so that shape-specialised
kernels cannot flatter either side.

On the CPU (the default): vocabulary 8000, one micro-batch of 4000 target tokens per
step, fp32 and bf16 autocast, our loop and the reference. On a GPU (--device cuda): the
paper's step of about 25000 target tokens as two micro-batches of 12500, vocabulary
37000, bf16 autocast, and four cases: ours and the reference, each eager and under
torch.compile with dynamic shapes (Trainer's compile=True; torch.compile(model,
dynamic=True) for the reference), eager ones first. Warm-up steps run every shape (and so
every compilation) before the timed steps, and a compiled case counts the graphs compiled
while timed (0 unless the warm-up missed one); timing synchronizes the GPU. TF32 stays
off, PyTorch's default, so fp32 on a GPU is true fp32. The reference's Adam is PyTorch's
default (foreach on a GPU), as a user would write it; the Trainer's is fused.

Each case runs in its own process, so that its peak memory is its own. Prints one JSON
line per case (target tokens/s, source+target tokens/s, seconds per step, peak RSS, MFU
against the matmul peak measured in that process; on a GPU also the warm-up seconds, the
peak GPU memory allocated and reserved, and the matmul size that reached the peak: the
better of 4096^3 and 8192^3, as an H100 reaches its bf16 peak only at large sizes), and
one per ratio ours/reference as soon as both of its cases have run: eager against
eager, compiled against compiled, and the best of ours against the best of the
reference. A GPU run also prints a line when a case's warm-up (its compilation) ends,
so that a run stopped by a time limit still says how far it got; a case that fails
prints its error and the others run. The CPU may be shared with other work: compare the
ratios of one run, not absolute numbers across runs.

    python bench/train_throughput.py [--steps 3] [--precisions fp32,bf16] [--repeats 1]
                                     [--threads N] [--vocab 8000] [--max-tokens 4000]
    # a smoke run of every path in seconds (the compiled cases take minutes on a CPU)
    python bench/train_throughput.py --preset tiny --max-tokens 200 --step-tokens 400 \
        --vocab 100 --steps 1 --threads 1

On one GPU (an H100: the eager pair takes about 30 s; the compiled cases took longer
than 170 s each there, their compilation unfinished, so give them minutes of their own):

    python bench/train_throughput.py --device cuda
    python bench/train_throughput.py --device cuda --cases ours,reference
    python bench/train_throughput.py --device cuda --cases ours-compiled,reference-compiled
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from process_memory import peak_rss_mb

from transformer_nmt.config import ModelConfig, get_preset
from transformer_nmt.data.collate import Batch
from transformer_nmt.model.transformer import Transformer, sinusoidal_encodings
from transformer_nmt.runtime import matmul_rate
from transformer_nmt.training.distributed import init_distributed
from transformer_nmt.training.flops import train_step_flops
from transformer_nmt.training.loss import label_smoothed_nll
from transformer_nmt.training.metrics import measure_peak_flops
from transformer_nmt.training.precision import DTYPES, autocast
from transformer_nmt.training.trainer import Trainer

VOCAB = 8000
LENGTHS = (20, 25, 32)
"""Tokens per sentence and side of the micro-batches, which cycle through them."""
CASES = ("ours", "reference", "ours-compiled", "reference-compiled", "ours-static",
         "ours-graphs")
"""Every case, in the order they run: eager ones first, so that a time limit cuts the
compiled ones. ours-static is the Trainer as `shape_buckets` compiles it (one static graph
per shape, dynamic=False); ours-graphs the same graphs replayed as CUDA graphs
(torch.compile's mode="reduce-overhead")."""
COMPILED = {"ours-compiled", "reference-compiled", "ours-static", "ours-graphs"}
GRAPH_WARMUP_ROUNDS = 3
"""Warm-up rounds of every shape for CUDA graphs: the first call of a shape compiles, the
next records its graph, later ones replay it."""
GPU_PEAK_SIZE = 8192
"""The larger square product timed for a GPU's matmul peak, beside measure_peak_flops's
4096: an H100 reaches its bf16 peak (~800 TFLOP/s) only at sizes like this."""


@dataclass(frozen=True)
class Defaults:
    """What an option means when it is not given, on the CPU or on a GPU."""

    steps: int
    precisions: str
    vocab: int
    max_tokens: int
    step_tokens: int | None
    """None: one micro-batch per step."""
    cases: str


DEFAULTS = {"cpu": Defaults(3, "fp32,bf16", 8000, 4000, None, "ours,reference"),
            "cuda": Defaults(10, "bf16", 37000, 12500, 25000, ",".join(CASES))}


def make_batches(max_tokens: int = 4000, seed: int = 0) -> list[Batch]:
    """One random batch per length of LENGTHS, of max_tokens // length rows (no padding);
    every sentence ends with EOS (3), BOS is 2."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for length in LENGTHS:
        rows = max_tokens // length
        src = torch.randint(4, VOCAB, (rows, length), generator=generator)
        tgt = torch.randint(4, VOCAB, (rows, length + 1), generator=generator)
        src[:, -1] = 3
        tgt[:, 0], tgt[:, -1] = 2, 3
        batches.append(Batch(src, tgt[:, :-1], tgt[:, 1:], rows * length, rows * length, []))
    return batches


class ReferenceTransformer(nn.Module):
    """The model's shape built from torch.nn.Transformer, as a PyTorch user would."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d_model = cfg.d_model
        self.embed = nn.Embedding(VOCAB, d_model, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        self.register_buffer("positions", sinusoidal_encodings(1024, d_model), persistent=False)
        self.transformer = nn.Transformer(d_model, cfg.heads, cfg.encoder_layers,
                                          cfg.decoder_layers, cfg.d_ff, cfg.dropout,
                                          batch_first=True)
        self.dropout = nn.Dropout(cfg.dropout)
        self.scale = math.sqrt(d_model)

    def _embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.embed(tokens) * self.scale + self.positions[: tokens.size(1)])

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        # Boolean like the padding masks (True: may not attend), as nn.Transformer prefers.
        causal = torch.ones(tgt_in.size(1), tgt_in.size(1), dtype=torch.bool,
                            device=tgt_in.device).triu(1)
        hidden = self.transformer(
            self._embed(src), self._embed(tgt_in), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src.eq(0), memory_key_padding_mask=src.eq(0),
            tgt_key_padding_mask=tgt_in.eq(0))
        return hidden @ self.embed.weight.t()  # (batch, tgt_len, vocab), tied projection


StepFunction = Callable[[list[Batch]], None]
"""One optimizer step over a list of micro-batches."""


def reference_step_function(cfg: ModelConfig, precision: str, device: torch.device,
                            compiled: bool) -> StepFunction:
    """A training step of the reference loop: forward, loss / the step's target tokens
    and backward per micro-batch, then Adam."""
    model = ReferenceTransformer(cfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    network = torch.compile(model, dynamic=True) if compiled else model

    def step(batches: list[Batch]) -> None:
        tokens = sum(batch.tgt_tokens for batch in batches)
        for batch in batches:
            with autocast(device, precision):
                logits = network(batch.src, batch.tgt_in)
            loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
            (loss / tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


class GraphSteps(nn.Module):
    """A model compiled into CUDA graphs, told that each call begins a new step: a
    micro-batch's outputs are used up (its backward has run) before the next call, which
    may then overwrite the graphs' output memory."""

    def __init__(self, compiled: nn.Module) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, *args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled(*args, **kwargs)


def ours_step_function(preset: str, precision: str, device: torch.device,
                       case: str) -> StepFunction:
    """A training step of transformer_nmt's Trainer on the preset, as `case` compiles it."""
    chosen = get_preset(preset)
    static = case in ("ours-static", "ours-graphs")
    cfg = dataclasses.replace(chosen.train, shape_buckets=static)
    trainer = Trainer(Transformer(chosen.model, VOCAB), cfg, init_distributed(device.type),
                      precision, compile=case in ("ours-compiled", "ours-static"))
    if case == "ours-graphs":
        trainer.model = GraphSteps(torch.compile(trainer.model, dynamic=False,
                                                 mode="reduce-overhead"))

    def step(batches: list[Batch]) -> None:
        result = trainer.train_step(batches)
        # A step skipped (out of GPU memory, say) takes no time and would flatter us.
        if not result.updated and result.skipped != "fp16 overflow":
            raise RuntimeError(f"the trainer skipped an optimizer step: {result.skipped}")

    return step


def synchronize(device: torch.device) -> None:
    """Wait for the GPU's queued work; nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graphs_compiled() -> int:
    """Graphs torch.compile has compiled in this process so far, recompilations included."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def matmul_peak(device: torch.device, dtype: torch.dtype) -> tuple[float, int]:
    """The device's matmul peak in `dtype` (FLOP/s) and the square size that reached it:
    measure_peak_flops's, and on a GPU the better of it and GPU_PEAK_SIZE^3's."""
    peak = measure_peak_flops(device, dtype)
    if device.type != "cuda":
        return peak, 1024
    large = matmul_rate(device, dtype, (GPU_PEAK_SIZE,) * 3, repeats=10)
    return (large, GPU_PEAK_SIZE) if large > peak else (peak, 4096)


def run_case(case: str, precision: str, args: argparse.Namespace) -> dict:
    """Time args.steps optimizer steps after a warm-up that runs every micro-batch shape."""
    device = torch.device(args.device)
    torch.manual_seed(1)
    batches = [batch.to(device) for batch in make_batches(args.max_tokens)]
    per_step = max(round(args.step_tokens / args.max_tokens), 1) if args.step_tokens else 1

    def step_batches(i: int) -> list[Batch]:
        return [batches[(i * per_step + j) % len(batches)] for j in range(per_step)]

    cfg = get_preset(args.preset).model
    compiled = case in COMPILED
    step = (ours_step_function(args.preset, precision, device, case) if case.startswith("ours")
            else reference_step_function(cfg, precision, device, compiled))
    warmup_steps = len(batches) * (GRAPH_WARMUP_ROUNDS if case == "ours-graphs" else 1)
    warmup_step_s = []
    for i in range(warmup_steps):
        start = time.perf_counter()
        step(step_batches(i))
        synchronize(device)
        warmup_step_s.append(round(time.perf_counter() - start, 2))
    warmup = sum(warmup_step_s)
    graphs = graphs_compiled() if compiled else 0
    if device.type == "cuda":
        print(json.dumps({"bench": "train_throughput", "impl": case, "precision": precision,
                          "warmup_s": round(warmup, 1), "warmup_steps": warmup_steps,
                          "warmup_step_s": warmup_step_s}),
              flush=True)
    start = time.perf_counter()
    for i in range(args.steps):
        step(step_batches(i))
    synchronize(device)
    seconds = time.perf_counter() - start
    timed = [batch for i in range(args.steps) for batch in step_batches(i)]
    tgt = sum(batch.tgt_tokens for batch in timed)
    src = sum(batch.src_tokens for batch in timed)
    flops = sum(train_step_flops(cfg, VOCAB, batch.src.size(1), batch.tgt_out.size(1), len(batch))
                for batch in timed)
    gpu_memory = {}
    if device.type == "cuda":  # read before the peak's products add theirs
        gpu_memory = {
            "gpu_peak_allocated_gb": round(torch.cuda.max_memory_allocated(device) / 2**30, 3),
            "gpu_peak_reserved_gb": round(torch.cuda.max_memory_reserved(device) / 2**30, 3)}
    peak, size = matmul_peak(device, DTYPES[precision])
    result = {"bench": "train_throughput", "impl": case, "precision": precision,
              "steps": args.steps, "vocab": VOCAB,
              "threads": torch.get_num_threads(), "tgt_tokens_per_step": tgt // args.steps,
              "tgt_tok_s": round(tgt / seconds, 1), "src_tgt_tok_s": round((tgt + src) / seconds, 1),
              "step_s": round(seconds / args.steps, 3),
              "peak_rss_gb": round(peak_rss_mb() / 1024, 3),
              "mfu": round(flops / seconds / peak, 4), "matmul_peak_gflops": round(peak / 1e9, 1)}
    if args.preset != "base":
        result["preset"] = args.preset
    if compiled:
        # Graphs compiled while timed mean a shape the warm-up missed: the time is not
        # the compiled code's.
        result.update(graphs_compiled=graphs_compiled(),
                      graphs_compiled_while_timed=graphs_compiled() - graphs)
    if device.type == "cuda":
        result.update(gpu_memory, micro_batches=per_step, max_tokens=args.max_tokens,
                      warmup_s=round(warmup, 1), matmul_peak_size=size,
                      gpu=torch.cuda.get_device_name(device), torch=torch.__version__)
    return result


def run_child(case: str, precision: str, args: argparse.Namespace) -> dict | None:
    """Run one case in a fresh process, passing its JSON lines on as they come; its
    result, or None (after printing the error) if it failed."""
    command = [sys.executable, __file__, "--case", f"{case}:{precision}",
               "--device", args.device, "--steps", str(args.steps),
               "--threads", str(torch.get_num_threads()), "--vocab", str(args.vocab),
               "--max-tokens", str(args.max_tokens), "--preset", args.preset]
    if args.step_tokens:
        command += ["--step-tokens", str(args.step_tokens)]
    result = None
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        # stderr to a file: a pipe that nobody reads could fill with compiler warnings.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as child:
            for line in child.stdout:
                if line.startswith("{"):
                    print(line, end="", flush=True)
                    record = json.loads(line)
                    if "tgt_tok_s" in record:
                        result = record
        if child.returncode == 0 and result is not None:
            return result
        errors.seek(0)
        tail = errors.read().strip().splitlines()[-12:]
    print(json.dumps({"bench": "train_throughput", "impl": case, "precision": precision,
                      "error": f"exit status {child.returncode}", "stderr": tail}), flush=True)
    return None


@dataclass
class Ratio:
    """One ratio line: `ours` against `reference`, the best of each list of cases."""

    name: str
    ours: list[tuple[str, str]]
    """(case, precision) keys; the best of them that ran counts."""
    reference: list[tuple[str, str]]
    precision: str | None = None
    """The precision of every key, if they share one (the line says it)."""


def ratios(cases: list[str], precisions: list[str]) -> list[Ratio]:
    """The ratio lines a run prints, in order: per precision eager against eager,
    compiled against compiled and (with compiled cases) best against best; then our
    eager bf16 against the reference's eager fp32."""
    found = []
    for precision in precisions:
        for ours, reference in (("ours", "reference"), ("ours-compiled", "reference-compiled")):
            if ours in cases and reference in cases:
                found.append(Ratio(f"{ours}/{reference}", [(ours, precision)],
                                   [(reference, precision)], precision))
        ours = [(case, precision) for case in cases if case.startswith("ours")]
        reference = [(case, precision) for case in cases if case.startswith("reference")]
        if ours and reference and any(case in COMPILED for case in cases):
            found.append(Ratio("best ours/best reference", ours, reference, precision))
    if {"fp32", "bf16"} <= set(precisions) and {"ours", "reference"} <= set(cases):
        found.append(Ratio("ours bf16 / reference fp32", [("ours", "bf16")],
                           [("reference", "fp32")]))
    return found


def ratio_line(ratio: Ratio, best: dict[tuple[str, str], dict]) -> dict | None:
    """The JSON line of `ratio` from the best result of each case, None if either side
    has no result (its cases failed)."""
    ours = max((best[key] for key in ratio.ours if key in best),
               key=lambda result: result["tgt_tok_s"], default=None)
    reference = max((best[key] for key in ratio.reference if key in best),
                    key=lambda result: result["tgt_tok_s"], default=None)
    if ours is None or reference is None:
        return None
    line = {"bench": "train_throughput", "ratio": ratio.name}
    if ratio.precision is None:
        line["tgt_tok_s"] = round(ours["tgt_tok_s"] / reference["tgt_tok_s"], 3)
        return line
    if ratio.name.startswith("best"):
        line.update(ours=ours["impl"], reference=reference["impl"])
    line.update(precision=ratio.precision,
                tgt_tok_s=round(ours["tgt_tok_s"] / reference["tgt_tok_s"], 3),
                peak_rss=round(ours["peak_rss_gb"] / reference["peak_rss_gb"], 3))
    if "gpu_peak_allocated_gb" in ours:
        line["gpu_peak_allocated"] = round(ours["gpu_peak_allocated_gb"]
                                           / reference["gpu_peak_allocated_gb"], 3)
    return line


def main() -> None:
    global VOCAB  # --vocab sets the vocabulary of every case
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where to train (default cpu); cuda changes the other defaults "
                        "as the module's docstring says")
    parser.add_argument("--steps", type=int,
                        help="timed steps per case (default 3; 10 on cuda, about a second)")
    parser.add_argument("--precisions", help="comma-separated (default fp32,bf16; bf16 on cuda)")
    parser.add_argument("--cases", help=f"comma-separated, of {', '.join(CASES)}; they run in "
                        "that order (default ours,reference; all of them on cuda)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every case this many times, interleaved; best counts")
    parser.add_argument("--threads", type=int,
                        help="torch threads (default: one per core); 1 gives steadier ratios "
                        "when other jobs share the cores")
    parser.add_argument("--vocab", type=int,
                        help="vocabulary size (default 8000; on cuda 37000, about the paper's "
                        "English-German vocabulary)")
    parser.add_argument("--max-tokens", type=int,
                        help="target tokens per micro-batch (default 4000; 12500 on cuda)")
    parser.add_argument("--step-tokens", type=int,
                        help="target tokens per optimizer step, accumulated over "
                        "round(step/max) micro-batches (default: one micro-batch; 25000, "
                        "the paper's, on cuda)")
    parser.add_argument("--preset", default="base",
                        help="model preset of both loops (default base; tiny for a smoke run)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # CASE:PRECISION, in a child
    args = parser.parse_args()
    defaults = DEFAULTS[args.device]
    for name in ("steps", "precisions", "vocab", "max_tokens", "step_tokens", "cases"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(defaults, name))
    VOCAB = args.vocab
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this PyTorch sees no GPU")
    if args.case:
        case, precision = args.case.split(":")
        print(json.dumps(run_case(case, precision, args)), flush=True)
        return
    cases = [case for case in CASES if case in args.cases.split(",")]
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown or not cases:
        parser.error(f"--cases: {', '.join(sorted(unknown)) or 'none'} unknown; "
                     f"choose among {', '.join(CASES)}")
    precisions = args.precisions.split(",")
    pending = ratios(cases, precisions)
    best: dict[tuple[str, str], dict] = {}
    for repeat in range(args.repeats):
        ran: set[tuple[str, str]] = set()
        for precision in precisions:
            for case in cases:
                key = (case, precision)
                result = run_child(case, precision, args)
                ran.add(key)
                if result is not None and (key not in best
                                           or result["tgt_tok_s"] > best[key]["tgt_tok_s"]):
                    best[key] = result
                # In the last repeat, each ratio as soon as its cases have all run.
                while repeat == args.repeats - 1 and pending and \
                        set(pending[0].ours + pending[0].reference) <= ran:
                    line = ratio_line(pending.pop(0), best)
                    if line is not None:
                        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
