"""A fairseq Transformer checkpoint (`checkpoint_best.pt` of `fairseq-train --arch
transformer`, transformer_wmt_en_de, transformer_vaswani_wmt_en_de_big and the other
architectures of fairseq's TransformerModel) with its dictionaries and sentencepiece model,
as the payload of one of our model files.

The checkpoint is read as data, never run (pretrained/fairseq_checkpoint.py), and its
dictionaries as fairseq writes them (pretrained/fairseq_dictionary.py). fairseq's model is the paper's, with what ModelConfig has fields for: its own sinusoids
("sinusoidal-fairseq") or learned tables per stack (their first padding_idx + 1 = 2 rows
unused), unscaled embeddings (no_scale_embedding), pre-norm stacks with a final LayerNorm
each, GELU. Its Dictionary (dict.LANG.txt) puts <s> 0, <pad> 1, </s> 2, <unk> 3 before the
pieces; its decoder starts from </s>, and sources end with </s> and have no <s>, as ours.
Our vocabulary is the sentencepiece model rebuilt on the dictionary (vocab_map.py), whose
start token is a second copy of </s>: the logits bias keeps that copy out of the softmax,
where it would otherwise halve the probability of ending a sentence. Separate dictionaries
(dict.SRC.txt and dict.TGT.txt apart) become one id space (vocab_map.py). Sentencepiece
pieces alone are supported; what else the model does that ours cannot is refused in one
line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor

from transformer_nmt.config import ModelConfig
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import FAIRSEQ_FIRST_ROW, Transformer
from transformer_nmt.model_file import model_payload
from transformer_nmt.data.bpe_vocab import merges_of
from transformer_nmt.pretrained.fairseq_checkpoint import (check_tokenizer, checkpoint_settings,
                                                           load_checkpoint)
from transformer_nmt.pretrained.fairseq_dictionary import dictionaries
from transformer_nmt.pretrained.layer_names import layer_weights
from transformer_nmt.pretrained.vocab_map import (ImportedVocab, Side, mapped_bpe_vocab,
                                                  mapped_vocab)

BPES = ("sentencepiece", "subword_nmt", "fastbpe")
"""fairseq's --bpe schemes of translation models: a sentencepiece model, or BPE codes over
Moses tokens (data/bpe_vocab.py; fastBPE's codes are subword-nmt's merges with counts)."""
ACTIVATIONS = ("relu", "gelu")
"""fairseq's activation_fn values that are ours (its gelu is the exact one, with erf)."""
PAD, EOS, UNK = 1, 2, 3
DERIVED_KEYS = re.compile(r"(encoder|decoder)\.version|.*\.embed_positions\._float_tensor"
                          r"|encoder\.layers\.\d+\.(in_proj|out_proj|fc1|fc2)_(weight|bias)")
"""State-dict entries that are no weights of the model: version stamps, the sinusoids'
device marker, and fairseq 0.12's copies of each encoder layer's weights for its fused
inference path (rebuilt from the real ones whenever fairseq loads a checkpoint)."""
REFUSED = {
    "layernorm_embedding": "a LayerNorm on the embeddings",
    "no_token_positional_embeddings": "no positional encodings",
    "adaptive_input": "adaptive input embeddings",
    "adaptive_softmax_cutoff": "an adaptive softmax",
    "tie_adaptive_weights": "an adaptive softmax",
    "cross_self_attention": "cross+self attention",
    "no_cross_attention": "a decoder without encoder-decoder attention",
    "encoder_layers_to_keep": "pruned encoder layers",
    "decoder_layers_to_keep": "pruned decoder layers",
}
"""fairseq settings that, when set, make a network ours is not."""
ACTIVATION_DROPOUT_NAMES = ("activation_dropout", "relu_dropout")
"""fairseq's names of the dropout after the FFN's activation, newer first."""
DEFAULT_POSITIONS = 1024
"""fairseq's max_source_positions and max_target_positions where the settings omit them."""


def read_fairseq_checkpoint(checkpoint: Path, dict_dir: Path, bpe: str,
                            bpe_model: Path | None,
                            languages: tuple[str | None, str | None] = (None, None),
                            bpe_codes: Path | None = None) -> dict[str, Any]:
    """The model-file payload of the fairseq checkpoint `checkpoint`, whose dictionaries
    (dict.SRC.txt, dict.TGT.txt) are in `dict_dir` and whose pieces are those of the
    `bpe` scheme: the sentencepiece model `bpe_model`, or Moses tokens cut by the BPE
    codes `bpe_codes` (subword_nmt, fastbpe); with an `imported_from` record.
    `languages` (source, target) name the dictionaries and Moses's languages where the
    checkpoint does not."""
    _check_bpe_files(bpe, bpe_model, bpe_codes)
    state = load_checkpoint(checkpoint)
    settings, task, recorded_bpe = checkpoint_settings(state, checkpoint)
    if recorded_bpe not in (None, bpe):
        raise UserError(f"{checkpoint}: trained with --bpe {recorded_bpe}; give --bpe "
                        f"{recorded_bpe} and its files")
    check_tokenizer(state, checkpoint, bpe)
    languages = (task.get("source_lang") or languages[0], task.get("target_lang") or languages[1])
    if bpe != "sentencepiece" and not all(languages):
        raise UserError(f"{checkpoint} names no languages, which Moses tokenizes by: give "
                        "--src-lang and --tgt-lang")
    pieces = dictionaries(dict_dir, languages)
    weights = _ReadKeys(_float_weights(state, checkpoint))
    try:
        cfg = fairseq_model_config(settings, weights, checkpoint)
        _check_dictionaries_fit(cfg, weights, pieces, checkpoint, dict_dir)
        imported = _imported_vocab(pieces, bpe, bpe_model, bpe_codes, languages, dict_dir)
        ours = _our_weights(weights, cfg, imported, checkpoint)
    except KeyError as error:
        raise UserError(f"{checkpoint}: no {error.args[0]} among its settings or weights: "
                        "not a fairseq TransformerModel of the form this import reads") from None
    vocab = imported.vocab
    model = _loaded_model(cfg, vocab, weights, ours, checkpoint)
    payload = model_payload(model, vocab.to_bytes(), languages if all(languages) else None,
                            vocab.target_bytes())
    payload["imported_from"] = {"format": "fairseq", "model_type": settings["arch"],
                                "path": str(checkpoint), "license": None,
                                **({"bpe": bpe} if bpe != "sentencepiece" else {})}
    return payload


def _check_dictionaries_fit(cfg: ModelConfig, weights: Mapping[str, Tensor],
                            pieces: tuple[list[str], list[str]], checkpoint: Path,
                            dict_dir: Path) -> None:
    """UserError unless the source's and target's dictionaries `pieces` are those the
    checkpoint's embeddings were trained on: one each row, and one for both where it
    shares its embeddings."""
    source_pieces, target_pieces = pieces
    if cfg.tie_embeddings == "all" and source_pieces != target_pieces:
        raise UserError(f"{dict_dir}: the source and target dictionaries differ, where "
                        f"{checkpoint} shares one embedding matrix between them "
                        "(share_all_embeddings); give the --dict-dir it was trained with")
    for side, side_pieces in (("encoder", source_pieces), ("decoder", target_pieces)):
        rows = weights[f"{side}.embed_tokens.weight"].size(0)
        if rows != len(side_pieces):
            raise UserError(f"{dict_dir}: the {side}'s dictionary has {len(side_pieces)} "
                            f"entries with fairseq's four specials, the checkpoint's "
                            f"embeddings {rows} rows: give the --dict-dir of the data it "
                            "was trained on")


def _imported_vocab(pieces: tuple[list[str], list[str]], bpe: str, bpe_model: Path | None,
                    bpe_codes: Path | None, languages: tuple[str | None, str | None],
                    dict_dir: Path) -> ImportedVocab:
    """Our vocabulary of the dictionaries' `pieces` (source, target): the sentencepiece
    model rebuilt on them, or Moses and the BPE codes over them."""
    source_pieces, target_pieces = pieces
    specials = {"pad": PAD, "unk": UNK, "eos": EOS, "start": EOS}
    if bpe == "sentencepiece":
        model_bytes = bpe_model.read_bytes()
        imported = mapped_vocab(Side(model_bytes, source_pieces, specials),
                                Side(model_bytes, target_pieces, specials), str(bpe_model))
        _check_pieces_known(imported.vocab, len(imported.vocab), bpe_model)
        return imported
    codes = merges_of(_text(bpe_codes), str(bpe_codes))
    return mapped_bpe_vocab(Side(b"", source_pieces, specials),
                            Side(b"", target_pieces, specials), codes,
                            (languages[0], languages[1]), str(dict_dir))


def _loaded_model(cfg: ModelConfig, vocab: Vocab, weights: _ReadKeys,
                  ours: dict[str, Tensor], checkpoint: Path) -> Transformer:
    """Our Transformer holding `ours`; a UserError where fairseq's `weights` hold one this
    import did not read, or where they do not fit the settings."""
    model = Transformer(cfg, len(vocab), vocab.pad_id)
    unread = sorted(key for key in set(weights) - weights.read
                    if not DERIVED_KEYS.fullmatch(key))
    if unread:
        raise UserError(f"{checkpoint}: weights this import does not know "
                        f"({', '.join(unread[:3])}{', ...' if len(unread) > 3 else ''}): a "
                        "model this project's Transformer cannot represent, or an older "
                        "fairseq's names (load it in fairseq 0.10 or later and save it again)")
    try:
        model.load_state_dict(ours)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1].strip()
        raise UserError(f"{checkpoint}: its weights do not fit its settings: {first}") from None
    return model


def _check_bpe_files(bpe: str, bpe_model: Path | None, bpe_codes: Path | None) -> None:
    """UserError unless `bpe` comes with its file: a sentencepiece model, or BPE codes."""
    if bpe == "sentencepiece":
        if bpe_codes is not None:
            raise UserError("--bpe-codes is for --bpe subword_nmt or fastbpe; a sentencepiece "
                            "model is given with --bpe-model")
        if bpe_model is None or not bpe_model.is_file():
            raise UserError(f"--bpe-model {bpe_model or '(none)'}: give the sentencepiece "
                            "model (.model) the checkpoint's dictionaries were made with")
    elif bpe in BPES:
        if bpe_model is not None:
            raise UserError(f"--bpe-model is for --bpe sentencepiece; give --bpe {bpe}'s "
                            "codes with --bpe-codes")
        if bpe_codes is None or not bpe_codes.is_file():
            raise UserError(f"--bpe-codes {bpe_codes or '(none)'}: give the BPE codes file "
                            "the checkpoint's dictionaries were made with (fairseq's "
                            "--bpe-codes; bpecodes in fairseq's WMT releases)")
    else:
        raise UserError(f"--bpe {bpe}: one of {', '.join(BPES)} is needed")


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error})") from None


def fairseq_model_config(settings: dict[str, Any], weights: Mapping[str, Tensor],
                         path: Path) -> ModelConfig:
    """Our ModelConfig of a fairseq TransformerModel's settings; a UserError naming the
    setting of one our Transformer cannot represent."""
    def refuse(name: str, why: str) -> UserError:
        return UserError(f"{path}: {name} is {settings.get(name)!r}: {why}")

    for name, what in REFUSED.items():
        if settings.get(name):
            raise refuse(name, f"{what}, which this project's Transformer does not have")
    for name in ("embed_dim", "ffn_embed_dim", "attention_heads", "normalize_before",
                 "learned_pos"):
        if settings.get(f"decoder_{name}") != settings.get(f"encoder_{name}"):
            raise refuse(f"decoder_{name}", f"encoder_{name} is "
                         f"{settings.get(f'encoder_{name}')!r}, and this project's encoder "
                         "and decoder are alike there")
    d_model, heads = settings["encoder_embed_dim"], settings["encoder_attention_heads"]
    for name in ("decoder_input_dim", "decoder_output_dim"):
        if settings.get(name, d_model) != d_model:
            raise refuse(name, f"not the embeddings' {d_model}: a projection this "
                         "project's Transformer does not have")
    pre_norm = bool(settings["encoder_normalize_before"])
    if pre_norm and settings.get("no_decoder_final_norm"):
        raise refuse("no_decoder_final_norm", "a pre-norm decoder without its final "
                     "LayerNorm, which this project's pre-norm decoder has")
    if settings.get("activation_fn", "relu") not in ACTIVATIONS:
        raise refuse("activation_fn", f"one of {', '.join(ACTIVATIONS)} is needed")
    if settings.get("share_all_embeddings"):
        tie = "all"
    elif settings.get("share_decoder_input_output_embed"):
        tie = "decoder"
    else:
        tie = "none"
    learned = bool(settings["encoder_learned_pos"])
    if learned:
        # Rows 0 .. padding_idx are never a position: ours start at fairseq's row 2.
        max_positions = min(weights[f"{side}.embed_positions.weight"].size(0)
                            for side in ("encoder", "decoder")) - FAIRSEQ_FIRST_ROW
    else:
        max_positions = min(settings.get("max_source_positions", DEFAULT_POSITIONS),
                            settings.get("max_target_positions", DEFAULT_POSITIONS))
    activation_dropout = next((settings[name] for name in ACTIVATION_DROPOUT_NAMES
                               if settings.get(name) is not None), 0.0)
    return ModelConfig(
        encoder_layers=settings["encoder_layers"], decoder_layers=settings["decoder_layers"],
        d_model=d_model, d_ff=settings["encoder_ffn_embed_dim"], heads=heads,
        d_k=d_model // heads, d_v=d_model // heads, dropout=settings.get("dropout", 0.1),
        attention_dropout=settings.get("attention_dropout", 0.0),
        activation_dropout=activation_dropout,
        activation=settings.get("activation_fn", "relu"),
        positional="learned" if learned else "sinusoidal-fairseq",
        tie_positions=not learned, max_positions=max_positions,
        scale_embeddings=not settings.get("no_scale_embedding", False), pre_norm=pre_norm,
        tie_embeddings=tie, logits_bias=True)


class _ReadKeys(dict):
    """A state dict that remembers which entries were read, so that one the import did
    not map (a module ours does not have) is refused rather than dropped."""

    def __init__(self, weights: dict[str, Tensor]) -> None:
        super().__init__(weights)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Tensor:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Tensor | None = None) -> Tensor | None:
        return self[key] if key in self else default


def _float_weights(state: dict[str, Any], path: Path) -> dict[str, Tensor]:
    """The state dict in float32 (whatever the checkpoint stored: fp16 in many): the
    precision of decoding is chosen when a model is loaded, as for every model file."""
    weights = state["model"]
    if not all(isinstance(key, str) and isinstance(value, Tensor)
               for key, value in weights.items()):
        raise UserError(f"{path}: its 'model' is not a state dict of tensors")
    return {key: value.float() if value.is_floating_point() else value
            for key, value in weights.items()}


def _our_weights(theirs: _ReadKeys, cfg: ModelConfig, imported: ImportedVocab, path: Path
                 ) -> dict[str, Tensor]:
    """Our state dict from fairseq's: its vocabulary rows in our id order, the learned
    position tables from their row 2, the layers as layer_names.py maps them."""
    source = imported.source.rows(theirs["encoder.embed_tokens.weight"])
    target = imported.target.rows(theirs["decoder.embed_tokens.weight"])
    bias = imported.target.logits_bias(
        torch.zeros(theirs["decoder.embed_tokens.weight"].size(0)))
    ours = {"src_embed.weight": target if cfg.tie_embeddings == "all" else source,
            "tgt_embed.weight": target, "logits_bias": bias}
    output = theirs.get("decoder.output_projection.weight")
    if cfg.tie_embeddings == "none":
        ours["output_proj.weight"] = imported.target.rows(
            theirs["decoder.output_projection.weight"])
    elif output is not None and not torch.equal(output, theirs["decoder.embed_tokens.weight"]):
        raise UserError(f"{path}: its output projection is not its target embedding, which "
                        "its settings share; a checkpoint edited by hand?")
    if cfg.positional == "learned":
        rows = slice(FAIRSEQ_FIRST_ROW, FAIRSEQ_FIRST_ROW + cfg.max_positions)
        ours["src_positions.weight"] = theirs["encoder.embed_positions.weight"][rows]
        ours["positions.weight"] = theirs["decoder.embed_positions.weight"][rows]
    if cfg.pre_norm:
        for side, to in (("encoder", "encoder_norm"), ("decoder", "decoder_norm")):
            for kind in ("weight", "bias"):
                ours[f"{to}.{kind}"] = theirs[f"{side}.layer_norm.{kind}"]
    ours.update(layer_weights(theirs, cfg, "encoder", "decoder"))
    return ours


def _check_pieces_known(vocab: Vocab, entries: int, bpe_model: Path) -> None:
    """UserError when most of the dictionary's pieces are not the sentencepiece model's:
    another model than the dictionaries were made with would encode text as <unk>."""
    unknown = sum(vocab.processor.is_unused(i) and vocab.target.processor.is_unused(i)
                  for i in range(len(vocab)))
    if unknown * 2 > entries:
        raise UserError(f"{bpe_model}: {unknown} of the dictionary's {entries} pieces are "
                        "not in this sentencepiece model; give the --bpe-model the "
                        "dictionaries were made with")
