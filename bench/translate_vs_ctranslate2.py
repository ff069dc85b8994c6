"""Our search against CTranslate2 on the same weights, sentences and CPU, in one run.

bench/translate_speed.py measures us alone; the issue's goals quote CTranslate2's speed
on another machine. This measures CTranslate2 here (pip install ctranslate2), decoding the
very same random base-shape model (bench/ctranslate2_reference.py hands it the weights
through `nmt export`'s exporter), and prints the ratios.

Protocol, the same for both: the first --sentences of newstest2014 (English), sorted by
length into batches of --batch-size, --workers batches at a time (default 1), each on
--threads / --workers threads (ours: threads of a pool, as `nmt translate --workers`;
CTranslate2: its inter_threads, every batch queued asynchronously); every sentence of
a batch decodes exactly L + 1 steps, L being round(1.075 * source tokens) for the batch's
longest sentence (1.075: the newstest2014 German/English subword ratio), since a random
model has no idea when to stop. We generate L tokens and a forced EOS; CTranslate2, told
min = max decoding length = L + 1, generates L + 1 tokens. Tokens/s count those steps.
Greedy and beam 4 (no length penalty on either side, which does not change the work), fp32
and int8 (ours: dynamic int8 linear layers; CTranslate2's int8 compute type). Each case
runs in a fresh process so that its peak RSS is its own; CTranslate2's imports no torch.

With --device cuda both decode on the GPU (CTranslate2's wheel carries its CUDA build,
which needs CUDA 12's cuBLAS): ours in bf16 and fp32, CTranslate2 in float16, bfloat16
and float32, plus the ratio of our bf16 to CTranslate2's float16.

    python bench/translate_vs_ctranslate2.py [--sentences 500] [--batch-size 32] [--workers 1]
    python bench/translate_vs_ctranslate2.py --device cuda --sentences 3003 --batch-size 256
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from process_memory import peak_rss_mb

# Only what a CTranslate2 case needs is imported here: torch would add ~220 MB to its RSS.

LENGTH_RATIO = 1.075
PRECISIONS = {"cpu": {"ours": ("fp32", "int8"), "ctranslate2": ("fp32", "int8")},
              "cuda": {"ours": ("bf16", "fp32"), "ctranslate2": ("fp16", "bf16", "fp32")}}
"""What each system decodes in, per device."""


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def batch_lengths(batches: list[list[list[str]]]) -> list[int]:
    """L + 1 decoding steps per batch of source pieces (each ending with the EOS)."""
    return [round(LENGTH_RATIO * max(len(pieces) - 1 for pieces in batch)) + 1
            for batch in batches]


def piece_batches(spm: str, src: Path, sentences: int, batch_size: int) -> list[list[list[str]]]:
    """Source sentences as sentencepiece pieces + EOS, longest first, in batches."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=spm)
    lines = [line.strip() for line in src.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line][:sentences]
    pieces = sorted(processor.encode(lines, out_type=str), key=len, reverse=True)
    return [[p + ["</s>"] for p in pieces[i: i + batch_size]]
            for i in range(0, len(pieces), batch_size)]


def measure_ctranslate2(args: argparse.Namespace, precision: str) -> None:
    import ctranslate2_reference

    batches = piece_batches(args.spm, args.src, args.sentences, args.batch_size)
    lengths = batch_lengths(batches)
    translator = ctranslate2_reference.load(Path(args.ct2_dir), precision, args.threads,
                                            args.workers, args.device)
    for beam in (1, 4):
        ctranslate2_reference.translate(translator, batches[0][:4], beam, 4)  # warm-up
        start = time.perf_counter()
        # Every batch queued at once: CTranslate2's `workers` threads take them in turn.
        pending = [ctranslate2_reference.translate(translator, batch, beam, length,
                                                   asynchronous=True)
                   for batch, length in zip(batches, lengths)]
        tokens = sum(len(result.result().hypotheses[0]) for batch in pending for result in batch)
        report("ctranslate2", precision, beam, args, time.perf_counter() - start,
               batches, tokens)
    figure(figure="peak_rss_mb", system="ctranslate2", precision=precision, value=peak_rss_mb())


def measure_ours(args: argparse.Namespace, precision: str) -> None:
    import torch

    import translate_speed
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.data.vocab import Vocab
    from transformer_nmt.decode.search.base import SpecialIds
    from transformer_nmt.decode.runtime.precision import prepare_model
    from transformer_nmt.decode.device.threads import decoding_threads

    # Each worker on its share of --threads, as `nmt translate` shares the cores out (and
    # as CTranslate2's intra_threads are set).
    if args.device == "cpu":
        torch.set_num_threads(decoding_threads(args.workers, "cpu", cores=args.threads))
    vocab = Vocab.load(args.spm)
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    batches = piece_batches(args.spm, args.src, args.sentences, args.batch_size)
    lengths = batch_lengths(batches)
    sources = [id_batch(vocab, batch).to(args.device) for batch in batches]
    model = translate_speed.random_model(vocab, LENGTH_RATIO).model.eval()
    model = prepare_model(model, args.device, precision)
    for beam in (1, 4):
        # Per batch, L tokens then EOS: the maximum length is L whatever the source length
        # (so no sentence stops early), and EOS is forced there by the wrapper too.
        cases = [(translate_speed.ForcedLength(model, 0.0, special.eos, length=length - 1),
                  DecodeConfig(beam=beam, alpha=0.0, max_len_a=0.0, max_len_b=length - 1))
                 for length in lengths]
        translate_speed.run(cases[0][0], sources[:1], cases[0][1], special)  # warm-up

        def decode(case) -> int:
            (wrapper, cfg), src = case
            return translate_speed.run(wrapper, [src], cfg, special)[3]

        start = time.perf_counter()
        # `workers` batches at once, as Translator does (tensor operations release the GIL).
        with ThreadPoolExecutor(args.workers) as pool:
            tokens = sum(pool.map(decode, zip(cases, sources)))
        report("ours", precision, beam, args, time.perf_counter() - start, batches, tokens)
    figure(figure="peak_rss_mb", system="ours", precision=precision, value=peak_rss_mb())


def id_batch(vocab, batch: list[list[str]]):
    """(sentences, longest) token ids of a batch of pieces, padded."""
    import torch

    src = torch.full((len(batch), len(batch[0])), vocab.pad_id, dtype=torch.long)
    for row, pieces in enumerate(batch):
        src[row, : len(pieces)] = torch.tensor([vocab.processor.piece_to_id(p) for p in pieces])
    return src


def agreement(args: argparse.Namespace, spm: Path, model, ct2_dir: Path) -> float:
    """The share of the first batch's sentences that both systems translate identically
    by fp32 greedy search: evidence that CTranslate2 decodes the same model."""
    import ctranslate2_reference
    import translate_speed
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.data.vocab import Vocab
    from transformer_nmt.decode.search.base import SpecialIds
    from transformer_nmt.decode.search.searches import greedy_search

    vocab = Vocab.load(str(spm))
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    [batch] = piece_batches(str(spm), args.src, args.batch_size, args.batch_size)[:1]
    length = 12
    forced = translate_speed.ForcedLength(model, 0.0, special.eos, length=length)
    ours = greedy_search(forced, id_batch(vocab, batch), DecodeConfig(beam=1), special)
    theirs = ctranslate2_reference.translate(
        ctranslate2_reference.load(ct2_dir, "fp32", args.threads), batch, 1, length)
    same = [[vocab.piece(t) for t in hyp.tokens] == hyp_theirs
            for hyp, hyp_theirs in zip(ours, theirs)]
    return sum(same) / len(same)


def report(system: str, precision: str, beam: int, args: argparse.Namespace, seconds: float,
           batches, tokens: int) -> None:
    sentences = sum(map(len, batches))
    figure(figure="translate", system=system, search="greedy" if beam == 1 else f"beam{beam}",
           precision=precision, device=args.device, threads=args.threads, workers=args.workers,
           batch_size=args.batch_size, sentences_per_s=round(sentences / seconds, 2),
           tokens_per_s=round(tokens / seconds, 1),
           tokens_per_sentence=round(tokens / sentences, 1), seconds=round(seconds, 2))


def export(workdir: Path, vocab_size: int, src: Path):
    """The vocabulary's path, the random model, and the path of its CTranslate2 copy."""
    import ctranslate2_reference
    import translate_speed
    from transformer_nmt.data.vocab import Vocab

    spm = translate_speed.learn_vocab(vocab_size, workdir, src)
    vocab = Vocab.load(spm)
    model = translate_speed.random_model(vocab, LENGTH_RATIO).model.eval()
    return spm, model, ctranslate2_reference.export(model, vocab, workdir / "ctranslate2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / ".."
                        / "shared" / "data" / "wmt14" / "newstest2014.en",
                        help="source sentences (default ../shared/data/wmt14/newstest2014.en)")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1,
                        help="batches decoded in parallel by each system, each on "
                        "threads // workers threads (ours: as `nmt translate --workers`; "
                        "CTranslate2: inter_threads)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where both systems decode (default cpu)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # SYSTEM:PRECISION, in a child
    parser.add_argument("--spm", help=argparse.SUPPRESS)
    parser.add_argument("--ct2-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        system, precision = args.case.split(":")
        (measure_ours if system == "ours" else measure_ctranslate2)(args, precision)
        return
    results: dict[tuple[str, str, str], float] = {}
    with tempfile.TemporaryDirectory() as workdir:
        spm, model, ct2_dir = export(Path(workdir), args.vocab_size, args.src)
        figure(figure="agreement", of="identical fp32 greedy translations of the first batch",
               value=agreement(args, spm, model, ct2_dir))
        del model  # the children build their own
        systems = PRECISIONS[args.device]
        for precision in dict.fromkeys(p for chosen in systems.values() for p in chosen):
            for system in [s for s in ("ours", "ctranslate2") if precision in systems[s]]:
                child = subprocess.run(
                    [sys.executable, __file__, *sys.argv[1:], "--case", f"{system}:{precision}",
                     "--spm", str(spm), "--ct2-dir", str(ct2_dir)],
                    capture_output=True, text=True)
                if child.returncode:
                    figure(figure="failed", system=system, precision=precision,
                           stderr=child.stderr.strip().splitlines()[-6:])
                for line in child.stdout.splitlines():
                    print(line, flush=True)
                    values = json.loads(line)
                    if values["figure"] == "translate":
                        results[system, precision, values["search"]] = values["tokens_per_s"]
    pairs = [(p, p) for p in ("fp32", "int8", "bf16")] + [("bf16", "fp16")]
    for ours, theirs in pairs:
        for search in ("greedy", "beam4"):
            if ("ours", ours, search) in results and ("ctranslate2", theirs, search) in results:
                figure(figure="ratio", of="ours/ctranslate2 tokens_per_s", precision=ours,
                       ctranslate2_precision=theirs, search=search,
                       value=round(results["ours", ours, search]
                                   / results["ctranslate2", theirs, search], 3))



if __name__ == "__main__":
    main()
