"""A model in Marian's own format, as OPUS-MT and the Tatoeba-Challenge publish their zip
releases, as the payload of one of our model files, read with numpy and PyYAML alone.

A release holds decoder.yml (the model file and vocabularies marian-decoder loads), the
weights as an .npz of Marian's parameter names with the model's options in its
`special:model.yml` entry, and either an id map (`opus.spm32k-spm32k.vocab.yml`, or one
per side) beside the sentencepiece models source.spm and target.spm, or .spm vocabularies
themselves. Separate source and target vocabularies (no tied-embeddings-all: an encoder
embedding of its own) become one id space, as vocab_map.py joins them.
The network is the one huggingface.py imports, since transformers' converter makes
OPUS-MT's Hugging Face models from these files: Marian's names are renamed to
MarianMTModel's, its matrices, stored (in, out), transposed, and the rest is shared.
Marian has no <pad>: its decoder starts from a zero vector, which becomes, as in the
converter, a <pad> added after the last id with a zero embedding and a zero logits bias.
What our Transformer cannot represent is refused in one line naming the option: anything
but the post-norm Transformer (`transformer-preprocess: ""`, `transformer-postprocess:
dan`), source and target embeddings shared apart from the output layer
(tied-embeddings-src alone), learned positions, Marian's approximate GELU.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
import torch
from torch import Tensor

from transformer_nmt.config import ModelConfig
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload
from transformer_nmt.pretrained.huggingface import (id_map, model_card_license, our_weights,
                                                    piece_id)
from transformer_nmt.pretrained.vocab_map import Side, mapped_vocab

CONFIG_KEY = "special:model.yml"
"""The .npz entry holding the model's options as YAML text (bytes, NUL-terminated)."""
ACTIVATIONS = ("swish", "relu")
"""Marian's FFN activations ours computes alike (its 'gelu' is x * sigmoid(1.702 x))."""
DECODER_MAX_LENGTH = 1000
"""marian-decoder's --max-length when decoder.yml gives none: the longest sentence it
translates, our max_positions."""
DROPOUT = 0.1
"""Training's dropout, which model.yml does not record: OPUS-MT's, as the converter sets."""


def require_yaml() -> Any:
    """The `yaml` package (PyYAML), or a UserError saying how to install it."""
    try:
        import yaml
    except ImportError:
        raise UserError("importing a Marian model needs PyYAML: "
                        "pip install 'transformer-nmt[pretrained]'") from None
    return yaml


def read_marian_release(directory: Path) -> dict[str, Any]:
    """The model-file payload of the Marian model in `directory` (decoder.yml, the .npz
    and vocabularies it names), with an `imported_from` record."""
    decoder_yml = _decoder_yml(directory)
    decoder = _read_yaml(decoder_yml)
    if not isinstance(decoder, dict):
        raise UserError(f"{decoder_yml}: not a YAML map of marian-decoder's options")
    models = _names(decoder, "models", decoder_yml)
    if len(models) != 1:
        raise UserError(f"{decoder_yml}: models names {len(models)} models; import one "
                        "model, not an ensemble")
    npz_path = _named_file(directory, models[0], decoder_yml)
    if npz_path.suffix != ".npz":
        raise UserError(f"{npz_path}: not an .npz; convert a .bin model with "
                        "marian-conv --from model.bin --to model.npz")
    weights = _read_npz(npz_path)
    options = MarianOptions(_model_yml(weights, npz_path), f"{npz_path} ({CONFIG_KEY})")
    cfg = marian_model_config(options, _integer(decoder, "max-length", DECODER_MAX_LENGTH,
                                                decoder_yml))
    vocabularies = _vocabularies(directory, decoder, decoder_yml)
    names = ("Wemb", "Wemb") if cfg.tie_embeddings == "all" else ("encoder_Wemb", "decoder_Wemb")
    for (pieces, _, vocab_path), name in zip(vocabularies, names):
        if name in weights and len(weights[name]) != len(pieces):
            raise UserError(f"{vocab_path}: {len(pieces)} pieces, where the model's embeddings "
                            f"({name}) have {len(weights[name])} rows: not the model's "
                            "vocabulary")
    sides = [_side(pieces, spm_path, vocab_path) for pieces, spm_path, vocab_path in vocabularies]
    imported = mapped_vocab(sides[0], sides[1], str(vocabularies[0][1]))
    vocab = imported.vocab
    theirs = _huggingface_names(weights, cfg, [len(side.pieces) - 1 for side in sides],
                                npz_path)
    model = Transformer(cfg, len(vocab), vocab.pad_id)
    model.load_state_dict(our_weights(theirs, cfg, imported))
    payload = model_payload(model, vocab.to_bytes(), target_vocab=vocab.target_bytes())
    payload["imported_from"] = {"format": "marian", "model_type": "transformer",
                                "path": str(directory), "license": release_license(directory)}
    return payload


def _side(pieces: list[str], spm_path: Path, vocab_path: Path) -> Side:
    """One side's vocabulary with the <pad> Marian does not have added after its last id,
    the decoder's start (a zero embedding, as Marian's decoder starts from zeros)."""
    pad = next(name for name in ("<pad>", "<marian-pad>") if name not in set(pieces))
    specials = {"pad": len(pieces), "eos": piece_id(pieces, "</s>", vocab_path),
                "unk": piece_id(pieces, "<unk>", vocab_path), "start": len(pieces)}
    return Side(spm_path.read_bytes(), [*pieces, pad], specials)


class MarianOptions:
    """model.yml's options as PyYAML's BaseLoader reads them (every scalar a string),
    each read with Marian's default where an older Marian did not write it."""

    def __init__(self, values: Any, where: str) -> None:
        if not isinstance(values, dict):
            raise UserError(f"{where}: not a YAML map of the model's options")
        self.values, self.where = values, where

    def text(self, name: str, default: str) -> str:
        value = self.values.get(name, default)
        if not isinstance(value, str):
            raise self.refuse(name, "a single value is needed")
        return value

    def integer(self, name: str, default: int | None = None) -> int:
        if name not in self.values and default is not None:
            return default
        try:
            return int(self.text(name, ""))
        except ValueError:
            raise self.refuse(name, "a whole number is needed") from None

    def flag(self, name: str) -> bool:
        value = self.text(name, "false")
        if value not in ("true", "false"):
            raise self.refuse(name, "true or false is needed")
        return value == "true"

    def refuse(self, name: str, why: str) -> UserError:
        return UserError(f"{self.where}: {name} is {self.values.get(name)!r}: {why}")


def marian_model_config(options: MarianOptions, max_positions: int) -> ModelConfig:
    """Our ModelConfig of a Marian Transformer's options; a UserError naming the option
    of one our Transformer cannot represent."""
    post_norm = ("only Marian's post-norm Transformer (transformer-preprocess '', "
                 "transformer-postprocess dan) is read")
    required = {"type": ("transformer", "only Marian's Transformer is read"),
                "transformer-preprocess": ("", post_norm),
                "transformer-postprocess": ("dan", post_norm),
                "transformer-postprocess-top": ("", "a normalization after the last layer "
                                                "is not supported"),
                "transformer-decoder-autoreg": ("self-attention", "only a decoder of "
                                                "self-attention is supported")}
    for name, (value, why) in required.items():
        if options.text(name, value) != value:
            raise options.refuse(name, why)
    if options.text("transformer-postprocess-emb", "d") not in ("", "d"):
        raise options.refuse("transformer-postprocess-emb", "a normalization of the "
                             "embeddings is not supported")
    shared = options.flag("tied-embeddings-all")
    if not shared and options.flag("tied-embeddings-src"):
        raise options.refuse("tied-embeddings-src", "source and target embeddings shared "
                             "apart from the output layer are not supported")
    for name, why in (("transformer-train-position-embeddings", "learned positions are not "
                       "supported"), ("transformer-no-projection", "attention without its "
                       "output projection is not supported"),
                      ("right-left", "a right-to-left decoder is not supported"),
                      ("transformer-pool", "a pooled encoder is not supported")):
        if options.flag(name):
            raise options.refuse(name, why)
    if options.values.get("transformer-tied-layers") not in (None, [], ""):
        raise options.refuse("transformer-tied-layers", "layers sharing weights are not "
                             "supported")
    if options.integer("transformer-ffn-depth", 2) != 2:
        raise options.refuse("transformer-ffn-depth", "the feed-forward network has two "
                             "layers here")
    activation = options.text("transformer-ffn-activation", "swish")
    if activation not in ACTIVATIONS:
        raise options.refuse("transformer-ffn-activation", f"one of {', '.join(ACTIVATIONS)} "
                             "is needed (Marian's gelu is not the exact GELU of ours)")
    vocabs = options.values.get("dim-vocabs")
    if not isinstance(vocabs, list) or len(vocabs) != 2 or (shared and len(set(vocabs)) != 1):
        raise options.refuse("dim-vocabs", "a source and a target vocabulary of one size "
                             "are needed where tied-embeddings-all shares their embeddings")
    tie = "all" if shared else "decoder" if options.flag("tied-embeddings") else "none"
    d_model, heads = options.integer("dim-emb", 512), options.integer("transformer-heads", 8)
    if d_model % heads:
        raise options.refuse("dim-emb", f"not a multiple of the {heads} attention heads")
    return ModelConfig(
        encoder_layers=options.integer("enc-depth"), decoder_layers=options.integer("dec-depth"),
        d_model=d_model, d_ff=options.integer("transformer-dim-ffn", 2048), heads=heads,
        d_k=d_model // heads, d_v=d_model // heads, dropout=DROPOUT, attention_dropout=0.0,
        activation_dropout=0.0, activation=activation, positional="sinusoidal-halves",
        max_positions=max_positions, pre_norm=False, tie_embeddings=tie, logits_bias=True)


def layer_parameters(cfg: ModelConfig, decoder: bool) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Marian's name of each parameter of one layer (after `encoder_l1_`) -> MarianMTModel's
    (after `model.encoder.layers.0.`) and the shape Marian stores it in."""
    d, ffn = cfg.d_model, cfg.d_ff
    names: dict[str, tuple[str, tuple[int, ...]]] = {}
    for marian, theirs in (("self", "self_attn"), ("context", "encoder_attn"))[:1 + decoder]:
        for x, projection in zip("qkvo", ("q_proj", "k_proj", "v_proj", "out_proj")):
            names[f"{marian}_W{x}"] = (f"{theirs}.{projection}.weight", (d, d))
            names[f"{marian}_b{x}"] = (f"{theirs}.{projection}.bias", (1, d))
        names[f"{marian}_Wo_ln_scale"] = (f"{theirs}_layer_norm.weight", (1, d))
        names[f"{marian}_Wo_ln_bias"] = (f"{theirs}_layer_norm.bias", (1, d))
    names.update({"ffn_W1": ("fc1.weight", (d, ffn)), "ffn_b1": ("fc1.bias", (1, ffn)),
                  "ffn_W2": ("fc2.weight", (ffn, d)), "ffn_b2": ("fc2.bias", (1, d)),
                  "ffn_ffn_ln_scale": ("final_layer_norm.weight", (1, d)),
                  "ffn_ffn_ln_bias": ("final_layer_norm.bias", (1, d))})
    return names


def _huggingface_names(weights: dict[str, np.ndarray], cfg: ModelConfig, sizes: list[int],
                       where: Path) -> dict[str, Tensor]:
    """The .npz's parameters under MarianMTModel's names and in its (out, in) layout, with
    the added <pad>'s zero embedding and logits bias; `sizes`: the source's and the
    target's vocabulary without it. A UserError for a parameter missing, unknown, or of a
    shape model.yml's dimensions do not give."""
    def take(name: str, shape: tuple[int, ...]) -> Tensor:
        if name not in weights:
            raise UserError(f"{where}: no parameter {name}; the model is not the Transformer "
                            "its model.yml describes")
        array = weights.pop(name)
        if array.shape != shape:
            raise UserError(f"{where}: {name} is {array.shape}, where model.yml's dimensions "
                            f"make it {shape}")
        tensor = torch.from_numpy(np.asarray(array, dtype=np.float32))
        return tensor.reshape(-1) if shape[0] == 1 else tensor

    weights = dict(weights)
    zero = torch.zeros(1, cfg.d_model)
    source, target = sizes
    theirs = {"final_logits_bias": torch.cat([take("decoder_ff_logit_out_b", (1, target)),
                                              torch.zeros(1)])[None]}
    if cfg.tie_embeddings == "all":
        theirs["model.shared.weight"] = torch.cat([take("Wemb", (source, cfg.d_model)), zero])
    else:
        theirs["model.encoder.embed_tokens.weight"] = torch.cat(
            [take("encoder_Wemb", (source, cfg.d_model)), zero])
        theirs["model.decoder.embed_tokens.weight"] = torch.cat(
            [take("decoder_Wemb", (target, cfg.d_model)), zero])
    if cfg.tie_embeddings == "none":
        theirs["lm_head.weight"] = torch.cat(
            [take("decoder_ff_logit_out_W", (cfg.d_model, target)).T, zero])
    for side, depth in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(depth):
            for marian, (name, shape) in layer_parameters(cfg, side == "decoder").items():
                tensor = take(f"{side}_l{i + 1}_{marian}", shape)
                theirs[f"model.{side}.layers.{i}.{name}"] = tensor if shape[0] == 1 \
                    else tensor.T.contiguous()
    unknown = sorted(name for name in weights if name != CONFIG_KEY)
    if unknown:
        raise UserError(f"{where}: parameters this import does not know: "
                        f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}; the "
                        "model is not the Transformer its model.yml describes")
    return theirs


def _vocabularies(directory: Path, decoder: dict[str, Any], decoder_yml: Path
                  ) -> list[tuple[list[str], Path, Path]]:
    """(pieces[id], the sentencepiece model, the id map's file) of the source's and the
    target's vocabularies, which decoder.yml names (the same file, or one each)."""
    names = _names(decoder, "vocabs", decoder_yml)
    if len(names) != 2:
        raise UserError(f"{decoder_yml}: vocabs names {len(names)} vocabularies; a "
                        "translation model has a source's and a target's")
    paths = [_named_file(directory, name, decoder_yml) for name in names]
    source = _vocabulary(directory, paths[0], "source.spm")
    if paths[1] != paths[0] and paths[1].read_bytes() != paths[0].read_bytes():
        return [source, _vocabulary(directory, paths[1], "target.spm")]
    # One id map: the target's text is cut by target.spm where there is one.
    target_spm = directory / "target.spm"
    shared_spm = source[1] if paths[0].suffix == ".spm" or not target_spm.is_file() \
        else target_spm
    return [source, (source[0], shared_spm, source[2])]


def _vocabulary(directory: Path, path: Path, spm_name: str) -> tuple[list[str], Path, Path]:
    """(pieces[id], the sentencepiece model that cuts the side's text, the id map's file)
    of the vocabulary `path`: an .spm (its own id map), or an id map beside `spm_name`."""
    if path.suffix == ".spm":
        try:
            processor = spm.SentencePieceProcessor(model_proto=path.read_bytes())
        except RuntimeError as error:
            raise UserError(f"{path}: not a sentencepiece model ({error})") from None
        ids = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
        return id_map(ids, path), path, path
    if path.suffix not in (".yml", ".yaml", ".json"):
        raise UserError(f"{path}: a vocabulary Marian reads as neither an id map (.yml, "
                        ".json) nor a sentencepiece model (.spm)")
    side_spm = directory / spm_name
    if not side_spm.is_file():
        raise UserError(f"{directory}: no {spm_name}, the sentencepiece model that cuts "
                        f"the {spm_name.split('.')[0]} text into the pieces of {path.name}")
    mapping = _read_yaml(path)
    try:
        ids = {piece: int(i) for piece, i in mapping.items()}
    except (AttributeError, TypeError, ValueError):
        raise UserError(f"{path}: not a map of pieces and their integer ids") from None
    return id_map(ids, path), side_spm, path


def _decoder_yml(directory: Path) -> Path:
    """decoder.yml, as OPUS-MT names it, or the one model.npz.decoder.yml Marian wrote."""
    found = [directory / "decoder.yml"] if (directory / "decoder.yml").is_file() \
        else sorted(directory.glob("*.decoder.yml"))
    if len(found) != 1:
        raise UserError(f"{directory}: no decoder.yml naming the model (.npz) and its "
                        "vocabularies; give the directory a Marian release unzips to")
    return found[0]


def _names(decoder: dict[str, Any], key: str, decoder_yml: Path) -> list[str]:
    value = decoder.get(key)
    names = [value] if isinstance(value, str) else value
    if not names or not all(isinstance(name, str) for name in names):
        raise UserError(f"{decoder_yml}: no {key}")
    return names


def _named_file(directory: Path, name: str, decoder_yml: Path) -> Path:
    """The file decoder.yml names: relative to the directory, or a path from the machine
    it was trained on whose file now lies in the directory."""
    for path in (directory / name, directory / Path(name).name):
        if path.is_file():
            return path
    raise UserError(f"{decoder_yml} names {name}, which is not in {directory}")


def _integer(values: dict[str, Any], name: str, default: int, where: Path) -> int:
    try:
        return int(values.get(name, default))
    except (TypeError, ValueError):
        raise UserError(f"{where}: {name} is {values.get(name)!r}: a whole number is "
                        "needed") from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise UserError(f"{path}: numpy cannot read it as an .npz ({error})") from None


def _model_yml(weights: dict[str, np.ndarray], path: Path) -> Any:
    """The options model.yml holds, which every model Marian saves carries."""
    if CONFIG_KEY not in weights:
        raise UserError(f"{path}: no {CONFIG_KEY} entry, the model's options that Marian "
                        "saves with its weights; is it a Marian model?")
    raw = weights[CONFIG_KEY]
    if raw.dtype.itemsize != 1:
        raise UserError(f"{path}: {CONFIG_KEY} is not text")
    text = raw.tobytes().split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return _parse_yaml(text, f"{path} ({CONFIG_KEY})")


def _read_yaml(path: Path) -> Any:
    return _parse_yaml(path.read_text(encoding="utf-8", errors="replace"), str(path))


def _parse_yaml(text: str, where: str) -> Any:
    """YAML with every scalar a string, as Marian's options and vocabularies are read
    (a piece such as `yes` or `1` stays a piece); PyYAML's C loader where built."""
    yaml = require_yaml()
    try:
        return yaml.load(text, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except yaml.YAMLError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "invalid"
        raise UserError(f"{where}: not valid YAML ({first})") from None


def release_license(directory: Path) -> str | None:
    """The licence a release states: its model card's `license:`, or the first line of
    its LICENSE file."""
    found = model_card_license(directory)
    if found:
        return found
    for name in ("LICENSE", "LICENSE.txt", "LICENCE"):
        if (directory / name).is_file():
            lines = (directory / name).read_text(encoding="utf-8", errors="replace").split("\n")
            first = next((line.strip() for line in lines if line.strip()), None)
            if first:
                return first[:100]
    return None
