"""The fairseq checkpoint with Moses tokenization and subword-nmt BPE of
tests/test_pretrained_fairseq_bpe.py, and what fairseq 0.12.2 itself computes with it.

fairseq's WMT models (the "Scaling Neural Machine Translation" ones among them) cut text
with Moses's tokenizer and BPE codes, not sentencepiece. This script makes a small one
the same way, in fairseq's own environment (bench/fairseq_checkpoints.py's installation,
with subword-nmt and sacremoses added):

1. the toy English-German corpus of fairseq_checkpoints.py, with punctuation, commas and
   hyphenated pairs that Moses splits (`aggressive_dash_splits`) and escapes;
2. Moses tokenization of each side as fairseq's `--tokenizer moses` does it, BPE codes
   learned by subword-nmt on both sides, applied, and binarized by
   `fairseq-preprocess --joined-dictionary`;
3. the "post" variant of fairseq_checkpoints.py trained on it for a few hundred updates;
4. fairseq's hub interface (`--tokenizer moses --bpe subword_nmt`) on fixed sentences:
   the ids its encode() gives, its greedy and beam 4 outputs, and its detokenized
   translations, into reference.pt (tensors, lists and strings only).

    python bench/fairseq_bpe_checkpoint.py --work /tmp/fairseq-checkpoints \\
        --out tests/data/fairseq-bpe

Training is seeded and single-threaded; another CPU may differ in the weights' last bits,
and the reference moves with them.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fairseq_checkpoints import LEXICON, binarize, run_in_fairseq, train  # noqa: E402

TEST_LINES = ["The dog runs in the garden.", "A small cat sleeps on the warm-green roof!",
              "Children play near the old house, and the dog sleeps.",
              "The green garden is small and warm."]
"""The sentences whose encoding and translation the reference records."""
MERGES = 60
"""BPE merges learned: fewer than the corpus's words, so that some words are cut."""


def corpus(count: int, seed: int) -> list[tuple[str, str]]:
    """Sentences of the lexicon's words with punctuation Moses splits off, a comma, and a
    hyphenated pair, and their word-for-word German."""
    rng = random.Random(seed)
    words = sorted(LEXICON)
    pairs = []
    for _ in range(count):
        english = [rng.choice(words) for _ in range(rng.randint(3, 9))]
        german = [LEXICON[word] for word in english]
        if rng.random() < 0.3:
            at = rng.randrange(len(english) - 1)
            english[at:at + 2] = [f"{english[at]}-{english[at + 1]}"]
            german[at:at + 2] = [f"{german[at]}-{german[at + 1]}"]
        if rng.random() < 0.3:
            english[0], german[0] = english[0] + ",", german[0] + ","
        end = rng.choice(".!.?")
        english[0], german[0] = english[0].capitalize(), german[0].capitalize()
        pairs.append((" ".join(english) + end, " ".join(german) + end))
    return pairs


def make_data(work: Path, out: Path) -> Path:
    """The corpus tokenized, cut by learned BPE codes and binarized; its directory."""
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    text = work / "bpe-text"
    text.mkdir(parents=True, exist_ok=True)
    splits = {"train": corpus(3000, seed=1), "valid": corpus(100, seed=2)}
    tokenizers = {language: MosesTokenizer(language) for language in ("en", "de")}

    def tokenized(line: str, language: str) -> str:
        return tokenizers[language].tokenize(line, aggressive_dash_splits=True,
                                             return_str=True, escape=True)

    both = [tokenized(pair[side], language) for pair in splits["train"]
            for side, language in enumerate(("en", "de"))]
    with open(work / "codes", "w", encoding="utf-8") as codes:
        learn_bpe(both, codes, MERGES)
    shutil.copy(work / "codes", out / "codes")
    with open(work / "codes", encoding="utf-8") as codes:
        bpe = BPE(codes)
    for split, pairs in splits.items():
        for side, language in enumerate(("en", "de")):
            (text / f"{split}.{language}").write_text(
                "".join(bpe.process_line(tokenized(pair[side], language)) + "\n"
                        for pair in pairs), encoding="utf-8")
    return binarize(text, work / "bpe-data-bin", out)


def reference(out: Path) -> dict:
    """What fairseq's hub interface computes with the checkpoint, Moses and BPE included."""
    import os

    import torch
    from fairseq.models.transformer import TransformerModel

    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    torch.set_num_threads(1)
    hub = TransformerModel.from_pretrained(
        str(out / "post"), checkpoint_file="checkpoint_best.pt", data_name_or_path=str(out),
        source_lang="en", target_lang="de", tokenizer="moses", bpe="subword_nmt",
        bpe_codes=str(out / "codes")).eval()
    encoded = [hub.encode(line) for line in TEST_LINES]
    found: dict = {"lines": TEST_LINES, "encoded": [ids.tolist() for ids in encoded]}
    for search, beam in (("greedy", 1), ("beam", 4)):
        generated = hub.generate(encoded, beam=beam, lenpen=0.0, max_len_a=0, max_len_b=24)
        found[search] = [hyps[0]["tokens"].tolist() for hyps in generated]
        found[f"{search}_translations"] = [hub.decode(hyps[0]["tokens"])
                                           for hyps in generated]
    return found


def inside(work: Path, out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    train(make_data(work, out), work, out, "post")
    torch.save(reference(out), out / "reference.pt")


def main() -> None:
    run_in_fairseq(__file__, __doc__.splitlines()[0], inside,
                   ["sentencepiece", "subword-nmt", "sacremoses"])


if __name__ == "__main__":
    main()
