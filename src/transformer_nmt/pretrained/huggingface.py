"""A Hugging Face `MarianMTModel` directory (the form OPUS-MT's models are published in)
as the payload of one of our model files.

Marian's Transformer is the paper's post-norm one with Swish in the feed-forward network,
sines and cosines in two halves rather than interleaved, a bias on the logits, and one
embedding matrix shared by source, target and output (or, with separate vocabularies
(vocab.json and target_vocab.json), one for the source and one for the target and
output); those are ModelConfig fields here, and vocab_map.py joins two vocabularies into
one id space. What the model does that ours cannot (unscaled embeddings, say) is refused
in one line; a multilingual model's target-language tokens (>>fra<<) become pieces of
their own, which a source starts with (data/vocab.py). The weights are read by
`transformers` itself, which the import needs and the imported model does not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transformer_nmt.config import ModelConfig
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import SINUSOIDS, Transformer
from transformer_nmt.model_file import model_payload
from transformer_nmt.pretrained.layer_names import layer_weights
from transformer_nmt.pretrained.vocab_map import ImportedVocab, Side, mapped_vocab

ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
"""transformers' activation_function names and ours."""
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")


def require_transformers() -> Any:
    """The `transformers` package, or a UserError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UserError("importing a Hugging Face model needs the transformers package: "
                        "pip install 'transformer-nmt[pretrained]'") from None
    return transformers


def read_marian_dir(directory: Path) -> dict[str, Any]:
    """The model-file payload of the MarianMTModel in `directory` (config.json, its
    weights, source.spm, target.spm, vocab.json and, with separate vocabularies,
    target_vocab.json), with an `imported_from` record."""
    for name in ("config.json", *TOKENIZER_FILES):
        if not (directory / name).is_file():
            raise UserError(f"{directory}: no {name}; a MarianMTModel directory holds "
                            f"config.json, the weights and {', '.join(TOKENIZER_FILES)}")
    config = _read_json(directory / "config.json")
    if config.get("model_type") != "marian":
        raise UserError(f"{directory / 'config.json'}: model_type is "
                        f"{config.get('model_type')!r}; nmt import --from huggingface reads "
                        "MarianMTModel directories (model_type 'marian')")
    cfg = marian_model_config(config, directory / "config.json")
    imported = _imported_vocab(directory, config)
    weights = _marian_weights(directory)
    if cfg.tie_embeddings == "decoder" and not torch.equal(
            weights.get("lm_head.weight", weights["model.decoder.embed_tokens.weight"]),
            weights["model.decoder.embed_tokens.weight"]):
        cfg = dataclasses.replace(cfg, tie_embeddings="none")
    vocab = imported.vocab
    model = Transformer(cfg, len(vocab), vocab.pad_id)
    model.load_state_dict(our_weights(weights, cfg, imported))
    tokenizer = _read_json(directory / "tokenizer_config.json") \
        if (directory / "tokenizer_config.json").is_file() else {}
    languages = (tokenizer.get("source_lang"), tokenizer.get("target_lang"))
    payload = model_payload(model, vocab.to_bytes(), languages if all(languages) else None,
                            vocab.target_bytes())
    payload["imported_from"] = {"format": "huggingface", "model_type": "marian",
                                "path": str(directory), "license": model_card_license(directory)}
    return payload


def _imported_vocab(directory: Path, config: dict[str, Any]) -> ImportedVocab:
    """Our vocabulary of the model's id maps and sentencepiece models: vocab.json for
    both sides, or vocab.json for the source and target_vocab.json for the target."""
    source_map = directory / "vocab.json"
    target_map = source_map if config.get("share_encoder_decoder_embeddings", True) \
        else directory / "target_vocab.json"
    if not target_map.is_file():
        raise UserError(f"{directory}: no target_vocab.json, the target side's id map of a "
                        "model with separate vocabularies (share_encoder_decoder_embeddings "
                        "false)")
    pieces = id_map(_read_json(source_map), source_map)
    target_pieces = pieces if target_map == source_map else id_map(_read_json(target_map),
                                                                   target_map)
    pad, eos = config["pad_token_id"], config["eos_token_id"]
    if max(pad, eos) >= len(target_pieces):
        raise UserError(f"{target_map}: {len(target_pieces)} pieces, fewer than the ids of "
                        f"pad ({pad}) and eos ({eos}) in config.json")
    target_specials = {"pad": pad, "eos": eos,
                       "unk": piece_id(target_pieces, "<unk>", target_map),
                       "start": config.get("decoder_start_token_id", pad)}
    # The source side's specials are the same pieces at its own ids.
    source_specials = {name: piece_id(pieces, target_pieces[target_specials[name]], source_map)
                       for name in ("pad", "unk", "eos")}
    return mapped_vocab(
        Side((directory / "source.spm").read_bytes(), pieces, source_specials),
        Side((directory / "target.spm").read_bytes(), target_pieces, target_specials),
        str(directory / "source.spm"))


def marian_model_config(config: dict[str, Any], where: Path) -> ModelConfig:
    """Our ModelConfig of a MarianConfig's fields; a UserError naming the field of one
    our Transformer cannot represent."""
    def refuse(field: str, why: str) -> UserError:
        return UserError(f"{where}: {field} is {config.get(field)!r}: {why}")

    heads = config["encoder_attention_heads"]
    for field, ours in (("decoder_attention_heads", heads),
                        ("decoder_ffn_dim", config["encoder_ffn_dim"])):
        if config.get(field, ours) != ours:
            raise refuse(field, "the encoder and decoder differ there, which this "
                         "project's Transformer does not")
    if not config.get("scale_embedding", False):
        raise refuse("scale_embedding", "embeddings are always scaled by sqrt(d_model) here")
    shared = config.get("share_encoder_decoder_embeddings", True)
    tied = config.get("tie_word_embeddings", True)
    if shared and not tied:
        raise refuse("tie_word_embeddings", "an output layer apart from embeddings shared "
                     "by source and target is not supported yet")
    if config.get("activation_function") not in ACTIVATIONS:
        raise refuse("activation_function", f"one of {', '.join(ACTIVATIONS)} is needed")
    if config["d_model"] % heads:
        raise refuse("d_model", f"not a multiple of the {heads} attention heads")
    return ModelConfig(
        encoder_layers=config["encoder_layers"], decoder_layers=config["decoder_layers"],
        d_model=config["d_model"], d_ff=config["encoder_ffn_dim"], heads=heads,
        d_k=config["d_model"] // heads, d_v=config["d_model"] // heads,
        dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.0),
        activation_dropout=config.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[config["activation_function"]],
        positional="sinusoidal-halves", max_positions=config["max_position_embeddings"],
        pre_norm=False, tie_embeddings="all" if shared else "decoder" if tied else "none",
        logits_bias=True)


def _marian_weights(directory: Path) -> dict[str, Tensor]:
    """The MarianMTModel's state dict, read by transformers (safetensors or
    pytorch_model.bin, loaded without running code from it)."""
    transformers = require_transformers()
    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        model = transformers.MarianMTModel.from_pretrained(str(directory))
    except (OSError, ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{directory}: transformers cannot read the model: {first}") from None
    # Float32 whatever the checkpoint stored (fp16 on the Hub, say): the precision of
    # decoding is chosen when a model is loaded, as for every model file.
    return {name: tensor.detach().float() for name, tensor in model.state_dict().items()}


def our_weights(theirs: dict[str, Tensor], cfg: ModelConfig, imported: ImportedVocab
                ) -> dict[str, Tensor]:
    """Our state dict from a MarianMTModel's (or from names made into its by marian.py):
    q, k and v concatenated as our fused projections take them, the vocabulary's rows in
    our id order."""
    if cfg.tie_embeddings == "all":
        source = target = imported.target.rows(theirs["model.shared.weight"])
    else:
        source = imported.source.rows(theirs["model.encoder.embed_tokens.weight"])
        target = imported.target.rows(theirs["model.decoder.embed_tokens.weight"])
    ours = {"tgt_embed.weight": target, "src_embed.weight": source,
            "logits_bias": imported.target.logits_bias(theirs["final_logits_bias"][0])}
    if cfg.tie_embeddings == "none":
        ours["output_proj.weight"] = imported.target.rows(theirs["lm_head.weight"])
    _check_positions(theirs, cfg)
    ours.update(layer_weights(theirs, cfg, "model.encoder", "model.decoder"))
    return ours


def _check_positions(theirs: dict[str, Tensor], cfg: ModelConfig) -> None:
    """UserError unless the model's position table is the sinusoids ours computes: the
    table is not a weight of ours, so another one would be dropped without a word."""
    expected = SINUSOIDS[cfg.positional](cfg.max_positions, cfg.d_model)  # (positions, d_model)
    for side in ("encoder", "decoder"):
        table = theirs.get(f"model.{side}.embed_positions.weight")
        if table is not None and not torch.allclose(table.float(), expected, atol=1e-4):
            raise UserError(f"the {side}'s positional encodings are not Marian's sinusoids "
                            "(learned ones?), which this import does not support")


def id_map(vocab: Any, path: Path) -> list[str]:
    """pieces[id] of an id map (vocab.json, Marian's vocab.yml) mapping each piece to its
    id, which must be 0..n-1."""
    if not isinstance(vocab, dict) or not all(
            isinstance(key, str) and isinstance(value, int) for key, value in vocab.items()):
        raise UserError(f"{path}: not a map of pieces and their integer ids")
    pieces = sorted(vocab, key=vocab.__getitem__)
    if [vocab[piece] for piece in pieces] != list(range(len(pieces))):
        raise UserError(f"{path}: the ids are not 0 to {len(pieces) - 1}, each once")
    return pieces


def piece_id(pieces: list[str], piece: str, path: Path) -> int:
    """The id of `piece` in `pieces`, or a UserError naming the id map `path`."""
    try:
        return pieces.index(piece)
    except ValueError:
        raise UserError(f"{path}: no {piece} piece") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def model_card_license(directory: Path) -> str | None:
    """The `license:` of the model card's front matter (README.md), as the Hugging Face
    Hub writes it, or None."""
    card = directory / "README.md"
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    front = re.match(r"---\n(.*?)\n---", text, re.S)
    found = front and re.search(r"^license:\s*(\S+)\s*$", front.group(1), re.M)
    return found.group(1) if found else None
