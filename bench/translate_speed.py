"""Translation speed on this CPU or on a GPU: greedy and beam 4, fp32 and reduced precision.

Prints one JSON line per figure: sentences/s and generated target tokens/s (EOS
included) per search and precision, with the peak RSS of a process that translates in
that precision (each precision runs in its own process), and the speed of the same fp32
weights decoded without a key/value cache (whole prefix every step) as a reference ratio.
`others_cores` says how many cores other processes kept busy during a measurement: the
figures are only comparable when it is near 0.

With --device cuda the batches are decoded one at a time on the GPU, at each of the
--batch-size list (default 64 and 256 sentences), in fp32 and bf16 weights; int8, dynamic
quantization for CPUs, is skipped with a note. Each figure also gives the peak GPU memory
allocated at that batch size, the model included, and the GPU is synchronized before a
timing stops. TF32 stays off, PyTorch's default, so fp32 is true fp32.

Without --model, the model is a random one of the base shape with an 8000-piece BPE
vocabulary learned from the WMT test sets newstest2013 and 2014, both sides (in
../shared/data/wmt14, or else beside --src; --spm gives a vocabulary instead; without
the test sets it is learned from --src alone). A random model never predicts EOS on its
own, so a wrapper forces EOS after round(ratio * source tokens) tokens, ratio being the
measured German/English subword ratio of newstest2014 (without the test sets, the ratio
measured here, NEWSTEST2014_RATIO; --length-ratio sets another): every sentence then
costs what a trained model's translation of realistic length costs. With --model, the
model's own vocabulary and stopping are used.

    python bench/translate_speed.py [--sentences 500] [--batch-size 32] [--model M.pt]
        [--precisions fp32,bf16,int8]

On one GPU (about 40 s with the random model: learning the vocabulary, then one
process per precision that starts CUDA and decodes the 500 sentences four times, greedy
and beam 4 at batch 64 and 256, and fp32's also 64 sentences without cache):

    python bench/translate_speed.py --device cuda --src newstest2014.en
    python bench/translate_speed.py --device cuda --src newstest2014.en --spm spm.model
    python bench/translate_speed.py --device cuda --model model.pt --src newstest2014.en
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor, nn

from process_memory import peak_rss_mb

from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.data.vocab import Vocab, train_vocab
from transformer_nmt.decode.attention.kv_cache import decoder_cache
from transformer_nmt.decode.search.base import Hypothesis, SpecialIds
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.device.threads import decoding_threads, torch_threads
from transformer_nmt.runtime import bf16_supported
from transformer_nmt.memory import release_free_memory
from transformer_nmt.model.transformer import EncoderOut, Transformer
from transformer_nmt.model_file import load_for_inference

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "wmt14"
WMT_TEXTS = ("newstest2013.en", "newstest2013.de", "newstest2014.en", "newstest2014.de")
"""The WMT test sets the random model's vocabulary is learned from (see wmt_folder)."""
NEWSTEST2014_RATIO = 1.075
"""newstest2014's German/English subword ratio under the 8000-piece vocabulary learned
from WMT_TEXTS (1.0748, measured): the ratio where those files are absent."""
GPU_BATCH_SIZES = "64,256"
"""--batch-size's default on a GPU."""


class ForcedEncoderOut(EncoderOut):
    """EncoderOut that also carries each row's output length, kept aligned by select."""

    def __init__(self, enc: EncoderOut, lengths: Tensor) -> None:
        super().__init__(enc.states, enc.src_mask)
        self.lengths = lengths  # (batch,)

    def select(self, index: Tensor) -> "ForcedEncoderOut":
        return ForcedEncoderOut(super().select(index), self.lengths.index_select(0, index))


class ForcedLength(nn.Module):
    """A model whose logits are the wrapped model's, except that EOS is impossible before
    round(ratio * source length) output tokens and certain at that length; or, given
    `length`, after exactly that many tokens whatever the source length."""

    def __init__(self, model: Transformer, ratio: float, eos: int,
                 length: int | None = None) -> None:
        super().__init__()
        self.model, self.cfg, self.ratio, self.eos, self.length = model, model.cfg, ratio, eos, length

    def encode(self, src: Tensor) -> ForcedEncoderOut:
        if self.length is not None:
            lengths = src.new_full((src.size(0),), self.length)
        else:
            lengths = (src.ne(self.model.pad_id).sum(1) - 1).float().mul(self.ratio).round().long()
        return ForcedEncoderOut(self.model.encode(src), lengths.clamp(min=1))

    def new_cache(self, max_length: int = 0):
        return decoder_cache(self.model, max_length)

    def decode(self, tgt: Tensor, enc: ForcedEncoderOut, cache=None, need_weights: bool = False):
        start = 0 if cache is None else cache.length  # read before decode appends to it
        out = self.model.decode(tgt, enc, cache, need_weights)
        # Logit row i predicts the next token after start + i generated ones.
        generated = torch.arange(start, start + tgt.size(1), device=tgt.device)  # (tgt_len,)
        # A model may decode several rows (beams) per encoder row.
        lengths = enc.lengths.repeat_interleave(tgt.size(0) // enc.lengths.size(0))
        at_end = generated.unsqueeze(0) == lengths.unsqueeze(1)  # (batch, tgt_len)
        logits = out.logits.float()
        logits[..., self.eos] = torch.where(at_end, 1e4, -1e4)
        out.logits = logits
        return out


def read_sentences(path: Path, count: int) -> list[str]:
    """The first `count` non-empty lines of a text file."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line][:count]


def wmt_folder(src: Path | None = None) -> Path | None:
    """Where the WMT test sets are: DATA, else the folder of `src` (a machine given a
    copy of them beside its source text); None where neither holds them all."""
    for folder in (DATA, None if src is None else src.parent):
        if folder is not None and all((folder / name).is_file() for name in WMT_TEXTS):
            return folder
    return None


def learn_vocab(vocab_size: int, workdir: Path, src: Path | None = None) -> Path:
    """A BPE model learned from the WMT test sets (`wmt_folder`), both languages, or,
    where they are absent and `src` is given, from the source text alone; returns its
    path."""
    folder = wmt_folder(src)
    if folder is None and src is not None:
        inputs = [src]
    else:
        inputs = [(folder or DATA) / name for name in WMT_TEXTS]
    train_vocab(inputs, workdir / "spm", vocab_size)
    return workdir / "spm.model"


def length_ratio(vocab: Vocab, folder: Path = DATA) -> float:
    """Subword tokens of newstest2014's German side per token of its English side."""
    en = vocab.encode_batch(read_sentences(folder / "newstest2014.en", 3003))
    de = vocab.encode_batch(read_sentences(folder / "newstest2014.de", 3003))
    return sum(map(len, de)) / sum(map(len, en))


def describe_random_model(vocab: Vocab, ratio: float,
                          where: str = "newstest2014 de/en subword ratio") -> str:
    return (f"random base model, vocabulary {len(vocab)}, EOS forced after "
            f"round({ratio:.3f} * source tokens) tokens ({where})")


def random_model(vocab: Vocab, ratio: float | None = None) -> nn.Module:
    """A random base-shape model wrapped to stop at a realistic length: `ratio` times
    the source's tokens (default: newstest2014's, measured under `vocab`)."""
    torch.manual_seed(0)
    model = Transformer(get_preset("base").model, len(vocab)).eval()
    return ForcedLength(model, length_ratio(vocab) if ratio is None else ratio, vocab.eos_id)


def batches(ids: list[list[int]], batch_size: int, pad: int, eos: int) -> list[Tensor]:
    """Padded source batches (batch, longest + 1), sentences sorted by length, ids + EOS."""
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    result = []
    for start in range(0, len(order), batch_size):
        chunk = [ids[i] for i in order[start: start + batch_size]]
        src = torch.full((len(chunk), len(chunk[0]) + 1), pad, dtype=torch.long)
        for row, sentence in enumerate(chunk):
            src[row, : len(sentence)] = torch.tensor(sentence)
            src[row, len(sentence)] = eos
        result.append(src)
    return result


def busy_jiffies() -> tuple[int, int]:
    """CPU time (clock ticks) of the whole machine and of this process so far."""
    with open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    machine = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    with open("/proc/self/stat") as handle:
        own = handle.read().rsplit(")", 1)[1].split()
    return machine, int(own[11]) + int(own[12])  # utime, stime


def synchronize(sources: list[Tensor]) -> None:
    """Wait for the GPU's queued work when `sources` are on one; nothing on the CPU."""
    if sources and sources[0].device.type == "cuda":
        torch.cuda.synchronize(sources[0].device)


def run(model: nn.Module, sources: list[Tensor], cfg: DecodeConfig, special: SpecialIds,
        use_cache: bool = True, workers: int = 1) -> tuple[float, float, int, int]:
    """Seconds, cores busy with other processes, sentences and generated tokens (EOS
    included) of translating `sources`, `workers` batches at a time (as Translator does)."""
    def translate(src: Tensor) -> list[Hypothesis]:
        if cfg.beam == 1:
            found = greedy_search(model, src, cfg, special, use_cache=use_cache)
        else:
            found = [best[0] for best in beam_search(model, src, cfg, special, use_cache=use_cache)]
        release_free_memory()  # as Translator does after each batch
        return found

    synchronize(sources)
    start, (machine_start, own_start) = time.perf_counter(), busy_jiffies()
    with ThreadPoolExecutor(workers) as pool:
        found = [hyp for hyps in pool.map(translate, sources) for hyp in hyps]
    synchronize(sources)
    sentences, tokens = len(found), sum(len(hyp.tokens) + 1 for hyp in found)
    seconds = time.perf_counter() - start
    machine, own = busy_jiffies()
    others = (machine - machine_start - (own - own_start)) / os.sysconf("SC_CLK_TCK") / seconds
    return seconds, max(others, 0.0), sentences, tokens


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def model_and_vocab(model_file: str | None, spm: str | Path,
                    ratio: float | None = None) -> tuple[nn.Module, Vocab]:
    """A trained model file's model and vocabulary, or without one the random base-shape
    model (`random_model`, stopping at `ratio`) over the vocabulary at `spm`."""
    if model_file:
        loaded = load_for_inference(model_file)
        return loaded.model, loaded.vocab
    vocab = Vocab.load(str(spm))
    return random_model(vocab, ratio), vocab


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model and --src as the scripts that decode either model take them (--src is
    needed with --model; check it with `require_source`)."""
    parser.add_argument("--model", help="a trained model file (default: random base model)")
    parser.add_argument("--src", type=Path, help="source sentences (needed with --model; "
                        "default for the random model: newstest2014.en)")


def require_source(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse --model without --src; give the random model newstest2014's English."""
    if args.model and not args.src:
        parser.error("--model needs --src, the source sentences to translate")
    if args.src is None:
        args.src = DATA / "newstest2014.en"


def batch_sizes(text: str) -> list[int]:
    """--batch-size's comma-separated sizes, smallest first."""
    return sorted(int(size) for size in text.split(","))


def measure_gpu(args: argparse.Namespace, model: nn.Module, ids: list[list[int]],
                special: SpecialIds) -> None:
    """The figures of one precision on the GPU: one batch at a time, at each batch size
    (the peak memory of each size its own)."""
    device = torch.device(args.device)
    for batch_size in batch_sizes(args.batch_size):
        torch.cuda.reset_peak_memory_stats(device)
        sources = [src.to(device) for src in batches(ids, batch_size, special.pad, special.eos)]
        for beam in (1, 4):
            cfg = DecodeConfig(beam=beam)
            run(model, sources[:1], cfg, special)  # warm-up on the longest batch
            seconds, others, sentences, tokens = run(model, sources, cfg, special)
            figure(figure="translate", device=torch.cuda.get_device_name(device),
                   search="greedy" if beam == 1 else f"beam{beam}", precision=args.child,
                   batch_size=batch_size, sentences_per_s=round(sentences / seconds, 2),
                   tokens_per_s=round(tokens / seconds, 1),
                   tokens_per_sentence=round(tokens / sentences, 1),
                   seconds=round(seconds, 2), others_cores=round(others, 2))
        figure(figure="peak_gpu_memory_mb", precision=args.child, batch_size=batch_size,
               allocated=round(torch.cuda.max_memory_allocated(device) / 2**20),
               reserved=round(torch.cuda.max_memory_reserved(device) / 2**20))


def measure(args: argparse.Namespace) -> None:
    """The figures of one precision, in this process."""
    model, vocab = model_and_vocab(args.model, args.spm, args.length_ratio)
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    ids = vocab.encode_batch(read_sentences(args.src, args.sentences))
    prepared = prepare_model(model, args.device, args.child)
    if args.device == "cuda":
        measure_gpu(args, prepared, ids, special)
        reference_ratio(args, prepared, ids, special)
        return
    cores = torch.get_num_threads()
    # The translator's CPU default first (2 workers sharing --batch-size sentences and the
    # cores), so that its peak memory is its own; then one batch at a time on every core;
    # then one batch of --batch-size per core. Each worker gets the threads `nmt
    # translate` would give it.
    batch_size = int(args.batch_size)
    configs = [(1, batch_size)]
    if cores > 1:
        configs = [(2, max(batch_size // 2, 1))] + configs + [(cores, batch_size)]
    for workers, batch_size in configs:
        sources = batches(ids, batch_size, special.pad, special.eos)
        threads = decoding_threads(workers, "cpu")
        with torch_threads(threads):
            for beam in (1, 4):
                cfg = DecodeConfig(beam=beam)
                run(prepared, sources[:workers], cfg, special, workers=workers)  # warm-up
                seconds, others, sentences, tokens = run(prepared, sources, cfg, special,
                                                         workers=workers)
                figure(figure="translate", search="greedy" if beam == 1 else f"beam{beam}",
                       precision=args.child, workers=workers, threads_per_worker=threads,
                       batch_size=batch_size,
                       sentences_per_s=round(sentences / seconds, 2),
                       tokens_per_s=round(tokens / seconds, 1),
                       tokens_per_sentence=round(tokens / sentences, 1),
                       seconds=round(seconds, 2), others_cores=round(others, 2))
        # The peak so far: the largest batches of this configuration, the model included.
        figure(figure="peak_rss_mb", precision=args.child, workers=workers,
               batch_size=batch_size,
               value=peak_rss_mb())
    reference_ratio(args, prepared, ids, special)


def reference_ratio(args: argparse.Namespace, prepared: nn.Module, ids: list[list[int]],
                    special: SpecialIds) -> None:
    """In fp32, the same weights decoded without cache, on a subset, against the cache."""
    if args.child != "fp32" or not args.reference_sentences:
        return
    subset = [src.to(args.device) for src in batches(
        ids[: args.reference_sentences], batch_sizes(args.batch_size)[0], special.pad,
        special.eos)]
    for beam in (1, 4):
        cfg = DecodeConfig(beam=beam)
        cached, _, _, tokens = run(prepared, subset, cfg, special)
        uncached, others, _, _ = run(prepared, subset, cfg, special, use_cache=False)
        figure(figure="cache_speedup", search="greedy" if beam == 1 else f"beam{beam}",
               precision="fp32", sentences=len(ids[: args.reference_sentences]),
               uncached_tokens_per_s=round(tokens / uncached, 1),
               cached_tokens_per_s=round(tokens / cached, 1),
               ratio=round(uncached / cached, 2), others_cores=round(others, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where to decode (default cpu)")
    parser.add_argument("--model", help="a trained model file (default: random base model)")
    parser.add_argument("--src", type=Path, default=DATA / "newstest2014.en",
                        help="source sentences (default ../shared/data/wmt14/newstest2014.en)")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--batch-size",
                        help=f"sentences per batch (default 32); on cuda a comma-separated "
                        f"list, each size measured in turn (default {GPU_BATCH_SIZES})")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--spm", type=Path,
                        help="the random model's sentencepiece model (default: one of "
                        "--vocab-size pieces learned from the WMT test sets, or from --src "
                        "where they are absent)")
    parser.add_argument("--length-ratio", type=float,
                        help="the random model's output tokens per source token (default: "
                        f"newstest2014's de/en ratio, measured; {NEWSTEST2014_RATIO} "
                        "without the test sets)")
    parser.add_argument("--precisions", default="fp32,bf16,int8")
    parser.add_argument("--reference-sentences", type=int, default=64,
                        help="sentences decoded both with and without cache for the ratio "
                        "(0: skip)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the precision a child measures
    args = parser.parse_args()
    if args.batch_size is None:
        args.batch_size = GPU_BATCH_SIZES if args.device == "cuda" else "32"
    if args.device == "cpu" and "," in args.batch_size:
        parser.error("--batch-size: one size on the CPU (a list is for --device cuda)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this PyTorch sees no GPU")
    if args.child:
        measure(args)
        return

    with tempfile.TemporaryDirectory() as workdir:
        if args.model:
            vocab = load_for_inference(args.model).vocab
            what = f"model file {args.model}"
        else:
            folder = wmt_folder(args.src)
            spm = args.spm or learn_vocab(args.vocab_size, Path(workdir), args.src)
            vocab = Vocab.load(str(spm))
            where = "newstest2014 de/en subword ratio"
            if args.length_ratio is not None:
                where = "--length-ratio"
            elif folder is not None:
                args.length_ratio = length_ratio(vocab, folder)
            else:
                args.length_ratio = NEWSTEST2014_RATIO
                where = "newstest2014 de/en subword ratio, measured elsewhere"
            what = describe_random_model(vocab, args.length_ratio, where)
            if args.spm is None and folder is None:
                what += f"; vocabulary learned from {args.src} alone"
        ids = vocab.encode_batch(read_sentences(args.src, args.sentences))
        device = torch.device(args.device)
        setup = dict(figure="setup", model=what, sentences=len(ids),
                     source_tokens_per_sentence=round(sum(map(len, ids)) / len(ids), 1),
                     batch_size=args.batch_size if device.type == "cuda"
                     else int(args.batch_size),
                     threads=torch.get_num_threads(),
                     torch=torch.__version__, bf16="bfloat16 weights and activations",
                     int8="dynamic int8 quantization of every linear layer and the output "
                     "projection")
        if device.type == "cuda":
            setup.update(device=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
        figure(**setup)
        failed = False
        for precision in args.precisions.split(","):
            if precision == "int8" and device.type == "cuda":
                figure(figure="skipped", precision=precision,
                       why="int8 is dynamic quantization for CPUs; nothing to measure on a GPU")
                continue
            if precision == "bf16" and not bf16_supported(device):
                figure(figure="skipped", precision=precision,
                       why=f"this {'GPU' if device.type == 'cuda' else 'CPU'} has no native bf16")
                continue
            # A fresh process per precision: its peak memory is what translating costs.
            command = [sys.executable, __file__, *sys.argv[1:], "--child", precision]
            if not args.model:
                command += ["--spm", str(spm), "--length-ratio", repr(args.length_ratio)]
            # A precision that fails (its traceback above) leaves the others' figures.
            status = subprocess.run(command).returncode
            if status:
                figure(figure="failed", precision=precision, exit_status=status)
                failed = True
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
