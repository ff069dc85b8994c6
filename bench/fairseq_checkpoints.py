"""The small fairseq checkpoints and reference outputs of tests/test_pretrained_fairseq.py,
made by fairseq 0.12.2 itself.

fairseq is not a dependency of the project: this script installs it into a virtual
environment of its own under --work (the installation of bench/fairseq_quickstart.py,
with sentencepiece added), then runs itself again inside that environment, where it

1. writes a toy English-German corpus (word-for-word sentences over a lexicon of twenty
   pairs), trains one sentencepiece model on both sides and cuts the text into pieces;
2. binarizes it with `fairseq-preprocess --joined-dictionary`, which writes dict.en.txt
   and dict.de.txt ("piece count" lines, madeupword fillers up to a multiple of 8);
3. trains one tiny model per variant with `fairseq-train --arch transformer` on the CPU
   for a few hundred updates (enough for outputs that depend on the source and end by
   themselves), each a checkpoint_best.pt as fairseq writes it;
4. loads each checkpoint through fairseq's hub interface (`TransformerModel.from_pretrained`
   with --bpe sentencepiece) and records, for fixed sentences, the ids its encode() gives,
   the decoder's logits of a fixed batch (fairseq ids, right-padded sources, targets
   starting with </s>), and its greedy (beam 1) and beam 4 outputs (no length penalty).

The variants (`VARIANTS`): "post" is the paper's post-norm model with fairseq's sinusoids
and one embedding matrix shared three ways; "pre" is pre-norm with learned positions, GELU,
unscaled embeddings, a final LayerNorm per stack, and the target embedding shared with
the output layer only; "untied" has an odd d_model (a zero
column in fairseq's sinusoids), three separate matrices and different source and target
position limits. Everything lands in --out: the sentencepiece model, the dictionaries, one
directory per variant holding its checkpoint_best.pt, and reference.pt (tensors, lists and
strings only, read with weights_only=True).

    python bench/fairseq_checkpoints.py --work /tmp/fairseq-checkpoints --out tests/data/fairseq

Training is seeded and single-threaded, so a rerun on the same machine gives the same
files; another CPU may differ in the last bits of the weights, and the reference moves
with them.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

LEXICON = {
    "the": "die", "house": "haus", "is": "ist", "small": "klein", "a": "ein",
    "dog": "hund", "runs": "läuft", "in": "in", "green": "grün", "garden": "garten",
    "and": "und", "cat": "katze", "sleeps": "schläft", "on": "auf", "warm": "warm",
    "roof": "dach", "children": "kinder", "play": "spielen", "near": "bei", "old": "alt",
}
"""Twenty English words and their German ones: the toy corpus translates word for word."""

TEST_LINES = ["the dog runs in the garden", "a small cat sleeps on the warm roof",
              "children play near the old house", "the green garden is small and warm"]
"""The sentences whose encoding and greedy translation the reference records."""

COMMON = ["--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2",
          "--dropout", "0.0", "--attention-dropout", "0.0", "--activation-dropout", "0.0"]
VARIANTS = {
    "post": ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
             "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
             "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
             "--share-all-embeddings", "--max-source-positions", "64",
             "--max-target-positions", "64"],
    "pre": ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
            "--share-decoder-input-output-embed", "--encoder-normalize-before",
            "--decoder-normalize-before", "--encoder-learned-pos", "--decoder-learned-pos",
            "--activation-fn", "gelu", "--no-scale-embedding",
            "--max-source-positions", "48", "--max-target-positions", "48",
            "--no-save-optimizer-state"],
    "untied": ["--encoder-embed-dim", "15", "--decoder-embed-dim", "15",
               "--encoder-ffn-embed-dim", "24", "--decoder-ffn-embed-dim", "24",
               "--encoder-attention-heads", "3", "--decoder-attention-heads", "3",
               "--max-source-positions", "64", "--max-target-positions", "40",
               "--no-save-optimizer-state"],
}
"""fairseq-train's flags of each variant, after COMMON."""


def corpus(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = sorted(LEXICON)
    pairs = []
    for _ in range(count):
        english = [rng.choice(words) for _ in range(rng.randint(3, 9))]
        pairs.append((" ".join(english), " ".join(LEXICON[word] for word in english)))
    return pairs


def run(command: list[str], **kwargs) -> None:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:2])} failed:\n"
                         f"{(result.stdout + result.stderr)[-3000:]}")


def make_data(work: Path, out: Path) -> Path:
    """The pieces of the toy corpus binarized by fairseq-preprocess; its directory."""
    import sentencepiece as spm

    text = work / "text"
    text.mkdir(parents=True, exist_ok=True)
    splits = {"train": corpus(3000, seed=1), "valid": corpus(100, seed=2)}
    both = text / "both.txt"
    both.write_text("".join(f"{en}\n{de}\n" for en, de in splits["train"]), encoding="utf-8")
    # Identity normalization keeps the model a few kilobytes (no NFKC table).
    spm.SentencePieceTrainer.train(input=str(both), model_prefix=str(work / "spm"),
                                   vocab_size=64, model_type="unigram", minloglevel=2,
                                   character_coverage=1.0, normalization_rule_name="identity")
    shutil.copy(work / "spm.model", out / "spm.model")
    processor = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    for split, pairs in splits.items():
        for side, language in enumerate(("en", "de")):
            pieces = processor.encode([pair[side] for pair in pairs], out_type=str)
            (text / f"{split}.{language}").write_text(
                "".join(" ".join(line) + "\n" for line in pieces), encoding="utf-8")
    return binarize(text, work / "data-bin", out)


def binarize(text: Path, binarized: Path, out: Path) -> Path:
    """fairseq-preprocess of text/{train,valid}.{en,de} (pieces) into `binarized`, one
    joined dictionary, copied to `out` as dict.en.txt and dict.de.txt; `binarized`."""
    shutil.rmtree(binarized, ignore_errors=True)
    run([str(Path(sys.executable).parent / "fairseq-preprocess"), "--source-lang", "en",
         "--target-lang", "de", "--trainpref", str(text / "train"), "--validpref",
         str(text / "valid"), "--destdir", str(binarized), "--joined-dictionary",
         "--workers", "1"])
    for language in ("en", "de"):
        shutil.copy(binarized / f"dict.{language}.txt", out / f"dict.{language}.txt")
    return binarized


def train(binarized: Path, work: Path, out: Path, name: str) -> Path:
    """fairseq-train of variant `name`; the directory of its checkpoint_best.pt in --out."""
    save = work / "checkpoints" / name
    shutil.rmtree(save, ignore_errors=True)
    run([str(Path(sys.executable).parent / "fairseq-train"), str(binarized), "--cpu",
         *COMMON, *VARIANTS[name], "--optimizer", "adam", "--lr", "0.01",
         "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "50",
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
         "--max-tokens", "1500", "--max-update", "400", "--save-dir", str(save),
         "--no-epoch-checkpoints", "--no-last-checkpoints", "--seed", "1",
         "--num-workers", "0", "--log-format", "simple"],
        env={**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    target = out / name
    target.mkdir(exist_ok=True)
    shutil.copy(save / "checkpoint_best.pt", target / "checkpoint_best.pt")
    return target


def reference(out: Path) -> dict:
    """What fairseq's own hub interface computes with each variant's checkpoint."""
    import torch
    from fairseq.models.transformer import TransformerModel

    # fairseq 0.12.2 loads its own checkpoints with torch.load's old default, which
    # PyTorch 2.6 and later keep only on request; these were written just now, here.
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    torch.set_num_threads(1)
    found: dict = {"lines": TEST_LINES, "encoded": {}, "greedy": {}, "beam": {},
                   "translations": {}, "logits": {}}
    for name in VARIANTS:
        hub = TransformerModel.from_pretrained(
            str(out / name), checkpoint_file="checkpoint_best.pt", data_name_or_path=str(out),
            source_lang="en", target_lang="de", bpe="sentencepiece",
            sentencepiece_model=str(out / "spm.model")).eval()
        encoded = [hub.encode(line) for line in TEST_LINES]
        found["encoded"][name] = [ids.tolist() for ids in encoded]
        generated = hub.generate(encoded, beam=1, max_len_a=0, max_len_b=16)
        found["greedy"][name] = [hyps[0]["tokens"].tolist() for hyps in generated]
        found["translations"][name] = [hub.decode(hyps[0]["tokens"]) for hyps in generated]
        generated = hub.generate(encoded, beam=4, lenpen=0.0, max_len_a=0, max_len_b=16)
        found["beam"][name] = [hyps[0]["tokens"].tolist() for hyps in generated]
        # A batch of right-padded sources of different lengths, and targets that start
        # with </s> as fairseq's decoder inputs do.
        pad, eos = hub.src_dict.pad(), hub.src_dict.eos()
        longest = max(len(ids) for ids in encoded)
        src = torch.full((len(encoded), longest), pad, dtype=torch.long)
        for row, ids in enumerate(encoded):
            src[row, :len(ids)] = ids
        generator = torch.Generator().manual_seed(0)
        prev = torch.randint(4, len(hub.tgt_dict), (len(encoded), 7), generator=generator)
        prev[:, 0] = eos
        with torch.no_grad():
            logits, _ = hub.models[0](src, src.ne(pad).sum(1), prev)
        found["src"], found["prev"] = src, prev
        found["logits"][name] = logits.float()  # (batch, tgt_len, fairseq vocab)
    return found


def inside(work: Path, out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    binarized = make_data(work, out)
    for name in VARIANTS:
        train(binarized, work, out, name)
    torch.save(reference(out), out / "reference.pt")


def run_in_fairseq(script: str, description: str, inside: Callable[[Path, Path], None],
                   packages: list[str]) -> None:
    """The command line of a script that makes test data with fairseq: installed in its
    own environment under --work with `packages` added, the script runs itself again
    there with --inside, where `inside(work, out)` does the work."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--work", type=Path, required=True,
                        help="fairseq's environment, the corpus and the training runs")
    parser.add_argument("--out", type=Path, required=True, help="where the test data goes")
    parser.add_argument("--inside", action="store_true",
                        help="(run by the script itself inside fairseq's environment)")
    args = parser.parse_args()
    work, out = args.work.resolve(), args.out.resolve()
    if args.inside:
        inside(work, out)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from fairseq_quickstart import install

    bin_dir = install(work, sys.executable)
    run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", *packages])
    run([str(bin_dir / "python"), script, "--inside", "--work", str(work), "--out", str(out)])
    print(f"wrote {out}")


def main() -> None:
    run_in_fairseq(__file__, __doc__.splitlines()[0], inside, ["sentencepiece"])


if __name__ == "__main__":
    main()
