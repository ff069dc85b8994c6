"""Shared helpers of the import tests: a tiny random MarianMTModel directory, made and
saved by `transformers` itself as OPUS-MT's are published (weights, config, two
sentencepiece models trained here, vocab.json), and the ids its tokenizer gives."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

ENGLISH = ("the house is small a dog runs in the green garden and the cat sleeps on a warm "
           "roof while children play near old trees").split()
GERMAN = ("das haus ist klein ein hund läuft im grünen garten und die katze schläft auf "
          "einem warmen dach während kinder bei alten bäumen spielen").split()


def sentences(words: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(count)]


def _train_spm(directory: Path, name: str, words: list[str]) -> Path:
    text = directory / f"{name}.txt"
    text.write_text("\n".join(sentences(words, 300, seed=len(name))) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / name),
                                   vocab_size=60, model_type="unigram", minloglevel=2,
                                   character_coverage=1.0, hard_vocab_limit=False)
    text.unlink()
    (directory / f"{name}.vocab").unlink()
    return Path(shutil.move(directory / f"{name}.model", directory / f"{name}.spm"))


def make_marian_dir(directory: Path, **config: Any) -> Path:
    """A MarianMTModel with OPUS-MT's layout (Swish, shared embeddings, a random logits
    bias, </s> 0, <unk> 1, <pad> last and the decoder's start), taught to copy its
    source, saved into `directory` with its tokenizer files; `config` changes
    MarianConfig fields."""
    transformers = __import__("transformers")
    directory.mkdir(parents=True, exist_ok=True)
    work = directory / "spm-work"
    work.mkdir()
    source, target = _train_spm(work, "source", ENGLISH), _train_spm(work, "target", GERMAN)
    pieces = ["</s>", "<unk>"]
    for model in (source, target):
        processor = spm.SentencePieceProcessor(model_file=str(model))
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if not (processor.is_control(i) or processor.is_unknown(i)) and piece not in pieces:
                pieces.append(piece)
    pieces.append("<pad>")
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    settings = dict(vocab_size=len(pieces), d_model=16, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                    decoder_ffn_dim=32, activation_function="swish",
                    max_position_embeddings=64, pad_token_id=pad, eos_token_id=0,
                    decoder_start_token_id=pad, forced_eos_token_id=0, scale_embedding=True,
                    dropout=0.0, **config)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings))
    with torch.no_grad():
        model.final_logits_bias.normal_()
    tokenizer = transformers.MarianTokenizer(str(source), str(target), str(work / "vocab.json"),
                                             source_lang="en", target_lang="de")
    _learn_to_copy(model, tokenizer)
    model.eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    shutil.rmtree(work)
    return directory


def _learn_to_copy(model: Any, tokenizer: Any, steps: int = 500) -> None:
    """A few seconds of training to copy the source's pieces: a random model repeats one
    token whatever its input, where a test needs outputs that differ by source and end
    by themselves."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    lines = sentences(ENGLISH, 400, seed=11)
    model.train()
    for step in range(steps):
        batch = tokenizer(lines[step * 16 % 400: step * 16 % 400 + 16], padding=True,
                          return_tensors="pt")
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def marian_model_and_tokenizer(directory: Path) -> tuple[Any, Any]:
    """The source's own model (eval mode, fp32) and tokenizer, read by transformers."""
    import transformers

    model = transformers.MarianMTModel.from_pretrained(str(directory)).float().eval()
    return model, transformers.MarianTokenizer.from_pretrained(str(directory))
