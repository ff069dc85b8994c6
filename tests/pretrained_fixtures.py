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


GLOSSARY = {word: GERMAN[i % len(GERMAN)] for i, word in enumerate(dict.fromkeys(ENGLISH))}
"""A word-for-word 'translation' for a model with separate vocabularies to learn."""


def translated(lines: list[str]) -> list[str]:
    return [" ".join(GLOSSARY[word] for word in line.split()) for line in lines]


def make_separate_vocab_marian_dir(directory: Path, zero_start: bool = False) -> Path:
    """A MarianMTModel with separate source and target vocabularies, as OPUS-MT publishes
    some: vocab.json for English and target_vocab.json for German (of different sizes,
    <pad> at 2 in both, since its id pads either side), an encoder embedding of its own,
    and the output layer tied to the decoder's embedding; taught a word-for-word
    translation. `zero_start`: the start's (<pad>'s) decoder embedding and logits bias
    stay 0, as in a model converted from Marian (`make_marian_release` needs it)."""
    transformers = __import__("transformers")
    directory.mkdir(parents=True, exist_ok=True)
    work = directory / "spm-work"
    work.mkdir()
    source, target = _train_spm(work, "source", ENGLISH), _train_spm(work, "target", GERMAN)
    maps = []
    for model, name in ((source, "vocab.json"), (target, "target_vocab.json")):
        processor = spm.SentencePieceProcessor(model_file=str(model))
        pieces = ["</s>", "<unk>", "<pad>"] + [
            processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]
        maps.append({piece: i for i, piece in enumerate(pieces)})
        (work / name).write_text(json.dumps(maps[-1], ensure_ascii=False), encoding="utf-8")
    assert len(maps[0]) != len(maps[1])
    settings = dict(vocab_size=len(maps[0]), decoder_vocab_size=len(maps[1]),
                    share_encoder_decoder_embeddings=False, d_model=16, encoder_layers=2,
                    decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                    encoder_ffn_dim=32, decoder_ffn_dim=32, activation_function="swish",
                    max_position_embeddings=64, pad_token_id=2, eos_token_id=0,
                    decoder_start_token_id=2, forced_eos_token_id=0, scale_embedding=True,
                    dropout=0.0)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings))
    with torch.no_grad():
        model.final_logits_bias.normal_()
        if zero_start:
            model.final_logits_bias[0, 2] = 0.0
    tokenizer = transformers.MarianTokenizer(
        str(source), str(target), str(work / "vocab.json"),
        target_vocab_file=str(work / "target_vocab.json"), separate_vocabs=True,
        source_lang="en", target_lang="de")
    _learn_to_copy(model, tokenizer, 2 if zero_start else None, translate=True)
    model.eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    shutil.rmtree(work)
    return directory


def make_marian_dir(directory: Path, zero_start: bool = False,
                    language_tokens: tuple[str, ...] = (), **config: Any) -> Path:
    """A MarianMTModel with OPUS-MT's layout (Swish, shared embeddings, a random logits
    bias, </s> 0, <unk> 1, <pad> last and the decoder's start), taught to copy its
    source, saved into `directory` with its tokenizer files; `config` changes
    MarianConfig fields. `zero_start`: the start's embedding and logits bias stay 0, as
    in every model converted from Marian, whose decoder starts from a zero vector and
    which has no <pad>, so that `make_marian_release` can write the model in Marian's
    format. `language_tokens` (>>fra<<, ...) make it a multilingual model's vocabulary."""
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
    pieces += list(language_tokens) + ["<pad>"]
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
        if zero_start:
            model.final_logits_bias[0, pad] = 0.0
    tokenizer = transformers.MarianTokenizer(str(source), str(target), str(work / "vocab.json"),
                                             source_lang="en", target_lang="de")
    _learn_to_copy(model, tokenizer, pad if zero_start else None)
    model.eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    shutil.rmtree(work)
    return directory


def _learn_to_copy(model: Any, tokenizer: Any, zero_row: int | None = None,
                   steps: int = 500, translate: bool = False) -> None:
    """A few seconds of training to copy the source's pieces (`translate`: to write its
    words' GLOSSARY entries in the target's pieces): a random model repeats one token
    whatever its input, where a test needs outputs that differ by source and end by
    themselves. `zero_row`: an embedding row held at 0 throughout."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    lines = sentences(ENGLISH, 400, seed=11)
    # The start is the decoder's (the encoder's too, where they share one matrix).
    embeddings = model.get_decoder().embed_tokens.weight
    model.train()
    for step in range(steps):
        if zero_row is not None:
            with torch.no_grad():
                embeddings[zero_row] = 0.0
        chunk = lines[step * 16 % 400: step * 16 % 400 + 16]
        batch = tokenizer(chunk, padding=True, return_tensors="pt")
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        if translate:
            batch = tokenizer(chunk, text_target=translated(chunk), padding=True,
                              return_tensors="pt")
            labels = batch.pop("labels")
            labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if zero_row is not None:
        with torch.no_grad():
            embeddings[zero_row] = 0.0


def id_maps(imported: Path, marian_dir: Path) -> tuple[list[int], dict[int, int]]:
    """(theirs[ours], ours[theirs]) between our ids and the source model's, by piece."""
    from transformer_nmt.model_file import load_for_inference

    vocab = load_for_inference(imported).vocab
    pieces = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))
    start = pieces["<pad>"]
    theirs = [start if i == vocab.bos_id else pieces[vocab.piece(i)] for i in range(len(vocab))]
    ours = {their: our for our, their in enumerate(theirs) if our != vocab.bos_id}
    return theirs, ours


def assert_greedy_is_transformers(imported: Path, marian_dir: Path, longest: int = 12,
                                  lines: list[str] | None = None) -> None:
    """Our greedy search with the model file `imported` finds what transformers' generate
    finds with the MarianMTModel in `marian_dir`, on `lines` (default: sentences whose
    outputs differ)."""
    from transformer_nmt.config import DecodeConfig
    from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

    model, tokenizer = marian_model_and_tokenizer(marian_dir)
    _, ours = id_maps(imported, marian_dir)
    lines = lines or sentences(ENGLISH, 8, seed=3)
    with torch.no_grad():
        generated = model.generate(**tokenizer(lines, padding=True, return_tensors="pt"),
                                   num_beams=1, do_sample=False, max_new_tokens=longest)
    translator = Translator.from_file(imported, TranslatorOptions(
        DecodeConfig(beam=1, max_len_a=0, max_len_b=longest, guard=False), workers=1,
        precision="fp32"))
    found = [hyps[0].tokens for hyps in translator.translate_nbest(lines)]
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    expected = [[ours[i] for i in row[1:].tolist() if i not in (pad, eos)] for row in generated]
    for mine, source in zip(found, expected):
        # Both stop at EOS; at the length limit transformers forces one where we end.
        assert mine[:len(source)] == source and len(mine) >= min(len(source), longest - 1)
    assert len({tuple(tokens) for tokens in found}) > 1


def marian_model_and_tokenizer(directory: Path) -> tuple[Any, Any]:
    """The source's own model (eval mode, fp32) and tokenizer, read by transformers."""
    import transformers

    model = transformers.MarianMTModel.from_pretrained(str(directory)).float().eval()
    return model, transformers.MarianTokenizer.from_pretrained(str(directory))


MARIAN_LAYER_NAMES = {
    "self_Wq": "self_attn.q_proj.weight", "self_bq": "self_attn.q_proj.bias",
    "self_Wk": "self_attn.k_proj.weight", "self_bk": "self_attn.k_proj.bias",
    "self_Wv": "self_attn.v_proj.weight", "self_bv": "self_attn.v_proj.bias",
    "self_Wo": "self_attn.out_proj.weight", "self_bo": "self_attn.out_proj.bias",
    "self_Wo_ln_scale": "self_attn_layer_norm.weight",
    "self_Wo_ln_bias": "self_attn_layer_norm.bias",
    "ffn_W1": "fc1.weight", "ffn_b1": "fc1.bias", "ffn_W2": "fc2.weight", "ffn_b2": "fc2.bias",
    "ffn_ffn_ln_scale": "final_layer_norm.weight", "ffn_ffn_ln_bias": "final_layer_norm.bias",
}
"""Marian's name of a parameter of encoder layer i (after `encoder_l{i+1}_`) -> its
MarianMTModel name (after `model.encoder.layers.{i}.`), as transformers'
convert_marian_to_pytorch.py maps them; written out here, apart from the importer's
table, so that a mistake in that one fails the tests."""
MARIAN_CONTEXT_NAMES = {
    marian.replace("self", "context"): theirs.replace("self_attn", "encoder_attn")
    for marian, theirs in MARIAN_LAYER_NAMES.items() if marian.startswith("self")}
"""The decoder's cross-attention, which its layers have besides MARIAN_LAYER_NAMES."""
MARIAN_NPZ = "opus.spm60-spm60.transformer-align.model1.npz.best-perplexity.npz"
MARIAN_VOCAB = "opus.spm60-spm60.vocab.yml"


def make_marian_release(hf_dir: Path, directory: Path, options: dict[str, Any] | None = None,
                        spm_vocab: bool = False) -> Path:
    """The MarianMTModel of `make_marian_dir(..., zero_start=True)` in `hf_dir` written in
    Marian's own format, as an OPUS-MT zip release unzips to `directory`: the .npz of
    Marian's names, matrices stored (in, out), no <pad> row and the model's options in
    `special:model.yml`; decoder.yml; the vocab.yml id map with source.spm and target.spm
    (or, `spm_vocab`, one vocab.spm whose ids are the id map's). `options` change
    model.yml's. A model of `make_separate_vocab_marian_dir(..., zero_start=True)` is
    written with an embedding per side (encoder_Wemb, decoder_Wemb) and an id map per
    side (its <pad> row left out, the ids after it one lower)."""
    import numpy as np
    import transformers
    import yaml

    model = transformers.MarianMTModel.from_pretrained(str(hf_dir))
    config = model.config
    weights = {name: tensor.detach().float().numpy() for name, tensor in
               model.state_dict().items()}
    pad = config.pad_token_id
    separate = not config.share_encoder_decoder_embeddings
    if separate:
        decoder_rows = weights["model.decoder.embed_tokens.weight"]
        assert not decoder_rows[pad].any() and not weights["final_logits_bias"][0, pad]
        arrays = {f"{side}_Wemb": np.delete(weights[f"model.{side}.embed_tokens.weight"],
                                            pad, axis=0) for side in ("encoder", "decoder")}
        arrays["decoder_ff_logit_out_b"] = np.delete(weights["final_logits_bias"], pad, axis=1)
        options = {"tied-embeddings-all": False, "tied-embeddings": True,
                   "dim-vocabs": [len(arrays["encoder_Wemb"]), len(arrays["decoder_Wemb"])],
                   **(options or {})}
    else:
        assert pad == config.vocab_size - 1 and not weights["model.shared.weight"][pad].any()
        arrays = {"Wemb": weights["model.shared.weight"][:pad],
                  "decoder_ff_logit_out_b": weights["final_logits_bias"][:, :pad]}
    for side, depth in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        names = {**MARIAN_LAYER_NAMES, **(MARIAN_CONTEXT_NAMES if side == "decoder" else {})}
        for i in range(depth):
            for marian, theirs in names.items():
                value = weights[f"model.{side}.layers.{i}.{theirs}"]
                arrays[f"{side}_l{i + 1}_{marian}"] = value.T if value.ndim == 2 else value[None]
    model_yml = {
        "bert-train-type-embeddings": True, "bert-type-vocab-size": 2,
        "dec-cell": "gru", "dec-cell-base-depth": 2, "dec-cell-high-depth": 1,
        "dec-depth": config.decoder_layers, "dim-emb": config.d_model, "dim-rnn": 1024,
        "dim-vocabs": [pad, pad], "enc-cell": "gru", "enc-cell-depth": 1,
        "enc-depth": config.encoder_layers, "enc-type": "bidirectional", "input-types": [],
        "layer-normalization": False, "lemma-dim-emb": 0, "output-omit-bias": False,
        "right-left": False, "skip": False, "tied-embeddings": False,
        "tied-embeddings-all": True, "tied-embeddings-src": False,
        "transformer-aan-activation": "swish", "transformer-aan-depth": 2,
        "transformer-aan-nogate": False, "transformer-decoder-autoreg": "self-attention",
        "transformer-dim-aan": 2048, "transformer-dim-ffn": config.encoder_ffn_dim,
        "transformer-ffn-activation": config.activation_function,
        "transformer-ffn-depth": 2, "transformer-guided-alignment-layer": "last",
        "transformer-heads": config.encoder_attention_heads,
        "transformer-no-projection": False, "transformer-pool": False,
        "transformer-postprocess": "dan", "transformer-postprocess-emb": "d",
        "transformer-postprocess-top": "", "transformer-preprocess": "",
        "transformer-tied-layers": [], "transformer-train-position-embeddings": False,
        "type": "transformer", "ulr": False, "ulr-dim-emb": 0,
        "ulr-trainable-transformation": False, "version": "v1.11.0 f00d062 2022-02-08",
        **(options or {})}
    text = yaml.safe_dump(model_yml, sort_keys=False) + "\0"
    arrays["special:model.yml"] = np.frombuffer(text.encode("utf-8"), dtype=np.int8)
    directory.mkdir(parents=True, exist_ok=True)
    np.savez(directory / MARIAN_NPZ, **arrays)
    if separate:
        return _write_separate_vocabularies(hf_dir, directory, pad, config)
    pieces = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    del pieces["<pad>"]
    vocab = "vocab.spm" if spm_vocab else MARIAN_VOCAB
    if spm_vocab:
        (directory / vocab).write_bytes(_id_map_as_spm(hf_dir, sorted(pieces, key=pieces.get)))
    else:
        (directory / vocab).write_text(yaml.safe_dump(pieces, allow_unicode=True,
                                                      sort_keys=False), encoding="utf-8")
        for name in ("source.spm", "target.spm"):
            shutil.copy(hf_dir / name, directory / name)
    decoder = {"models": [MARIAN_NPZ], "vocabs": [vocab, vocab], "beam-size": 6,
               "normalize": 0.6, "word-penalty": 0, "mini-batch": 16, "maxi-batch": 100,
               "maxi-batch-sort": "src", "relative-paths": True,
               "max-length": config.max_position_embeddings}
    (directory / "decoder.yml").write_text(yaml.safe_dump(decoder, sort_keys=False),
                                           encoding="utf-8")
    return directory


def _write_separate_vocabularies(hf_dir: Path, directory: Path, pad: int, config: Any) -> Path:
    """A release's id map per side (src.vocab.yml, trg.vocab.yml: the Hugging Face maps
    without <pad>), the two sentencepiece models, and decoder.yml naming them."""
    import yaml

    names = []
    for json_name, yml_name in (("vocab.json", "src.vocab.yml"),
                                ("target_vocab.json", "trg.vocab.yml")):
        pieces = json.loads((hf_dir / json_name).read_text(encoding="utf-8"))
        marian = {piece: i - (i > pad) for piece, i in pieces.items() if i != pad}
        (directory / yml_name).write_text(yaml.safe_dump(marian, allow_unicode=True,
                                                         sort_keys=False), encoding="utf-8")
        names.append(yml_name)
    for name in ("source.spm", "target.spm"):
        shutil.copy(hf_dir / name, directory / name)
    decoder = {"models": [MARIAN_NPZ], "vocabs": names, "beam-size": 6, "normalize": 0.6,
               "relative-paths": True, "max-length": config.max_position_embeddings}
    (directory / "decoder.yml").write_text(yaml.safe_dump(decoder, sort_keys=False),
                                           encoding="utf-8")
    return directory


def _id_map_as_spm(hf_dir: Path, pieces: list[str]) -> bytes:
    """A sentencepiece model whose ids are `pieces` (</s> 0, <unk> 1), its pieces' scores
    those of source.spm or target.spm, as Marian trains a joint one."""
    from sentencepiece import sentencepiece_model_pb2

    known = {}
    for name in ("target.spm", "source.spm"):
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString((hf_dir / name).read_bytes())
        known.update({piece.piece: piece.score for piece in proto.pieces})
    kind = sentencepiece_model_pb2.ModelProto.SentencePiece
    del proto.pieces[:]
    for piece in pieces:
        added = proto.pieces.add()
        added.piece, added.score = piece, known.get(piece, 0.0)
        added.type = {"</s>": kind.CONTROL, "<unk>": kind.UNKNOWN}.get(piece, kind.NORMAL)
    spec = proto.trainer_spec
    spec.eos_id, spec.unk_id, spec.bos_id, spec.pad_id = 0, 1, -1, -1
    spec.vocab_size = len(pieces)
    return proto.SerializeToString()
