"""Helpers of the training tests: the toy task's words, a fast tiny run's settings, and
how its data directory is made (the `tiny_data` fixture in conftest.py calls it)."""

import random
from pathlib import Path

from transformer_nmt.data.prepare import PrepareOptions, prepare

WORDS = ("a the house garden small green big red cat dog sees runs child play day and "
         "with under over near old new blue tree car road").split()

TINY = ["--preset", "tiny", "--batch-tokens", "96", "--set", "log_every=1",
        "--save-every-minutes", "0", "--valid-every", "0", "--precision", "fp32"]
"""`nmt train` flags of a fast tiny run: a few ms per step on the CPU."""


def tiny_overrides(**changes):
    """(field, value) pairs for session.train matching TINY, with `changes` added."""
    settings = {"batch_tokens": 96, "log_every": 1, "save_every_minutes": 0, "valid_every": 0,
                "precision": "fp32", **changes}
    return list(settings.items())


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def reversal_pairs(count: int, seed: int, words: tuple[int, int]) -> list[tuple[str, str]]:
    """`count` pairs of the toy task: a sentence of `words` (fewest, most) words, reversed."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        sentence = rng.choices(WORDS, k=rng.randint(*words))
        pairs.append((" ".join(sentence), " ".join(reversed(sentence))))
    return pairs


def make_tiny_data(root: Path) -> Path:
    """A data directory of 240 train and 24 valid pairs of a toy copy-and-reverse task,
    vocabulary 64; in ROOT/data (about a second)."""
    pairs = reversal_pairs(264, seed=7, words=(2, 9))
    files = {}
    for split, chunk in (("train", pairs[:240]), ("valid", pairs[240:]), ("test", pairs[240:])):
        files[f"{split}_src"] = _write(root / f"{split}.src.txt", [s for s, _ in chunk])
        files[f"{split}_tgt"] = _write(root / f"{split}.tgt.txt", [t for _, t in chunk])
    out = root / "data"
    prepare(PrepareOptions(corpus="files", src="en", tgt="xx", out=out, vocab_size=64,
                           files=files, threads=1), progress=False, log=lambda message: None)
    return out


def make_copy_task_data(root: Path, vocab) -> Path:
    """Another domain for fine-tuning tests: the toy task's words copied in order (not
    reversed), 240 train and 24 valid pairs encoded with `vocab` (a VocabSource), in
    ROOT/copy-data."""
    rng = random.Random(11)
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(2, 9))) for _ in range(264)]
    files = {}
    for split, chunk in (("train", sentences[:240]), ("valid", sentences[240:])):
        files[f"{split}_src"] = _write(root / f"copy-{split}.src.txt", chunk)
        files[f"{split}_tgt"] = _write(root / f"copy-{split}.tgt.txt", chunk)
    out = root / "copy-data"
    prepare(PrepareOptions(corpus="files", src="en", tgt="xx", out=out, vocab=vocab,
                           files=files, threads=1), progress=False, log=lambda message: None)
    return out
