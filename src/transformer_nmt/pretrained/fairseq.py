"""A fairseq Transformer checkpoint (`checkpoint_best.pt` of `fairseq-train --arch
transformer`, transformer_wmt_en_de, transformer_vaswani_wmt_en_de_big and the other
architectures of fairseq's TransformerModel) with its dictionaries and sentencepiece model,
as the payload of one of our model files.

The checkpoint is read as data, never run: `torch.load(weights_only=True)`, with fairseq's
argparse.Namespace of settings (`args`, or `cfg["model"]` of fairseq 0.10 and later) read
into `FairseqArgs`, a plain record; any other class in its pickle is refused unread.
fairseq's model is the paper's, with what ModelConfig has fields for: its own sinusoids
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

import pickle
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
from transformer_nmt.pretrained.layer_names import layer_weights
from transformer_nmt.data.bpe_vocab import merges_of
from transformer_nmt.pretrained.vocab_map import (ImportedVocab, Side, mapped_bpe_vocab,
                                                  mapped_vocab)

BPES = ("sentencepiece", "subword_nmt", "fastbpe")
"""fairseq's --bpe schemes of translation models: a sentencepiece model, or BPE codes over
Moses tokens (data/bpe_vocab.py; fastBPE's codes are subword-nmt's merges with counts)."""
ARCHITECTURES = ("transformer", "transformer_tiny", "transformer_iwslt_de_en",
                 "transformer_wmt_en_de", "transformer_vaswani_wmt_en_de_big",
                 "transformer_vaswani_wmt_en_fr_big", "transformer_wmt_en_de_big",
                 "transformer_wmt_en_de_big_t2t")
"""fairseq's architectures of its TransformerModel: one network, other defaults."""
ACTIVATIONS = ("relu", "gelu")
"""fairseq's activation_fn values that are ours (its gelu is the exact one, with erf)."""
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
"""A fairseq Dictionary's first four entries, ids 0 to 3, which dict.txt does not list."""
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


class FairseqArgs:
    """What fairseq's argparse.Namespace of settings is read as: its attributes, nothing
    that runs."""


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
    settings, task, recorded_bpe = _settings(state, checkpoint)
    if recorded_bpe not in (None, bpe):
        raise UserError(f"{checkpoint}: trained with --bpe {recorded_bpe}; give --bpe "
                        f"{recorded_bpe} and its files")
    _check_tokenizer(state, checkpoint, bpe)
    languages = (task.get("source_lang") or languages[0], task.get("target_lang") or languages[1])
    if bpe != "sentencepiece" and not all(languages):
        raise UserError(f"{checkpoint} names no languages, which Moses tokenizes by: give "
                        "--src-lang and --tgt-lang")
    source_pieces, target_pieces = _dictionaries(dict_dir, languages)
    weights = _ReadKeys(_float_weights(state, checkpoint))
    try:
        cfg = fairseq_model_config(settings, weights, checkpoint)
        if cfg.tie_embeddings == "all" and source_pieces != target_pieces:
            raise UserError(f"{dict_dir}: the source and target dictionaries differ, where "
                            f"{checkpoint} shares one embedding matrix between them "
                            "(share_all_embeddings); give the --dict-dir it was trained with")
        for side, pieces in (("encoder", source_pieces), ("decoder", target_pieces)):
            rows = weights[f"{side}.embed_tokens.weight"].size(0)
            if rows != len(pieces):
                raise UserError(f"{dict_dir}: the {side}'s dictionary has {len(pieces)} "
                                f"entries with fairseq's four specials, the checkpoint's "
                                f"embeddings {rows} rows: give the --dict-dir of the data it "
                                "was trained on")
        specials = {"pad": PAD, "unk": UNK, "eos": EOS, "start": EOS}
        if bpe == "sentencepiece":
            model_bytes = bpe_model.read_bytes()
            imported = mapped_vocab(Side(model_bytes, source_pieces, specials),
                                    Side(model_bytes, target_pieces, specials), str(bpe_model))
            _check_pieces_known(imported.vocab, len(imported.vocab), bpe_model)
        else:
            codes = merges_of(_text(bpe_codes), str(bpe_codes))
            imported = mapped_bpe_vocab(Side(b"", source_pieces, specials),
                                        Side(b"", target_pieces, specials), codes,
                                        (languages[0], languages[1]), str(dict_dir))
        vocab = imported.vocab
        ours = _our_weights(weights, cfg, imported, checkpoint)
    except KeyError as error:
        raise UserError(f"{checkpoint}: no {error.args[0]} among its settings or weights: "
                        "not a fairseq TransformerModel of the form this import reads") from None
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
    payload = model_payload(model, vocab.to_bytes(), languages if all(languages) else None,
                            vocab.target_bytes())
    payload["imported_from"] = {"format": "fairseq", "model_type": settings["arch"],
                                "path": str(checkpoint), "license": None,
                                **({"bpe": bpe} if bpe != "sentencepiece" else {})}
    return payload


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


def _check_tokenizer(state: dict[str, Any], path: Path, bpe: str) -> None:
    """UserError when the checkpoint records a tokenizer other than what is imported with
    its BPE: none for sentencepiece, Moses with fairseq's defaults for BPE codes."""
    cfg = state.get("cfg")
    if isinstance(cfg, dict):
        found = _plain(cfg.get("tokenizer"))
    else:  # fairseq before 0.10: one flat Namespace
        args = _plain(state.get("args"))
        found = {"_name": args.get("tokenizer"), **args}
    name = found.get("_name")
    if name not in (None, "moses") or (name == "moses" and bpe == "sentencepiece"):
        raise UserError(f"{path}: its text was tokenized with {name!r}, which this import "
                        "does not do; models of Moses and BPE codes, or of sentencepiece "
                        "alone, are imported")
    for option in ("moses_no_dash_splits", "moses_no_escape"):
        if found.get(option):
            raise UserError(f"{path}: tokenized with {option}, which this import does not "
                            "do (fairseq's default Moses settings are imported)")


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error})") from None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's dict, unpickled with weights_only=True and fairseq's Namespace read
    as FairseqArgs; a UserError naming any other class it holds, loaded not at all."""
    if not path.is_file():
        raise UserError(f"{path}: no such file; give fairseq's checkpoint "
                        "(checkpoint_best.pt)")
    with path.open("rb") as file:
        start = file.read(2)
    # torch.save's zip archive, or the bare pickle of PyTorch before 1.6 (older fairseq).
    if start != b"PK" and start[:1] != b"\x80":
        raise UserError(f"{path}: not a PyTorch checkpoint")
    try:
        with torch.serialization.safe_globals([(FairseqArgs, "argparse.Namespace")]):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise _unpickling_refusal(path, str(error)) from None
    except (RuntimeError, OSError, EOFError, ValueError) as error:
        raise UserError(f"{path}: not a PyTorch checkpoint ({_first_line(error)})") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise UserError(f"{path}: not a fairseq checkpoint (no 'model' state dict)")
    return state


def _unpickling_refusal(path: Path, message: str) -> UserError:
    """The one line that refuses a checkpoint torch.load(weights_only=True) would not
    read, from its `message`: the class or function it holds, or what else it says."""
    found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL (\S+)", message)
    if found and found.group(1).startswith("omegaconf."):
        return UserError(
            f"{path}: its settings are omegaconf objects ({found.group(1)}), which only code "
            "can read, so it is refused unread; where fairseq is installed and you trust the "
            "file, load it with fairseq's checkpoint_utils.load_checkpoint_to_cpu, turn its "
            "'cfg' into plain data with OmegaConf.to_container(cfg, resolve=True) and "
            "torch.save it again")
    if found:
        return UserError(f"{path}: refused unread: it holds {found.group(1)}, which is not "
                         "data a fairseq checkpoint holds")
    said = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", message)
    return UserError(f"{path}: refused unread, as more than data "
                     f"({said.group(1).strip() if said else message.strip().splitlines()[0]})")


def _settings(state: dict[str, Any], path: Path
              ) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The model's settings, flat (encoder_embed_dim, not encoder.embed_dim), the task's,
    and the bpe scheme recorded, from `cfg` (fairseq 0.10 and later) or `args`."""
    cfg = state.get("cfg")
    if isinstance(cfg, dict) and cfg.get("model") is not None:
        model, task = _plain(cfg["model"]), _plain(cfg.get("task"))
        bpe = _plain(cfg.get("bpe")).get("_name")
        # fairseq's TransformerConfig nests encoder.* and decoder.*; its Namespace is flat.
        for side in ("encoder", "decoder"):
            if isinstance(model.get(side), dict):
                model.update({f"{side}_{name}": value
                              for name, value in model.pop(side).items()})
    elif state.get("args") is not None:
        model = task = _plain(state["args"])
        bpe = model.get("bpe")
    else:
        raise UserError(f"{path}: no settings (neither cfg nor args): not a fairseq "
                        "checkpoint of a model")
    model.setdefault("arch", model.get("_name"))
    if model["arch"] not in ARCHITECTURES:
        raise UserError(f"{path}: a fairseq {model['arch']!r} model; nmt import --from "
                        f"fairseq reads fairseq's TransformerModel ({', '.join(ARCHITECTURES)})")
    return model, task, bpe


def _plain(settings: Any) -> dict[str, Any]:
    if isinstance(settings, FairseqArgs):
        return dict(vars(settings))
    return dict(settings) if isinstance(settings, dict) else {}


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


def read_dictionary(path: Path) -> list[str]:
    """pieces[id] of a fairseq Dictionary file: its four specials, then one entry per line
    ("piece count", or "piece count #fairseq:overwrite"), in id order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error})") from None
    pieces = list(SPECIALS)
    for number, line in enumerate(lines, 1):
        fields = line.rstrip().split(" ")
        if fields[-1] == "#fairseq:overwrite":
            fields = fields[:-1]
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise UserError(f"{path}, line {number}: {line!r} is not 'piece count'")
        pieces.append(fields[0])
    if len(set(pieces)) != len(pieces):
        repeated = next(piece for piece in pieces if pieces.count(piece) > 1)
        raise UserError(f"{path}: {repeated!r} is listed twice, which one sentencepiece "
                        "model cannot hold")
    return pieces


def _dictionaries(dict_dir: Path, languages: tuple[str | None, str | None]
                  ) -> tuple[list[str], list[str]]:
    """The source's and the target's dictionaries: dict.SRC.txt and dict.TGT.txt where the
    checkpoint names the languages, else the one dict.*.txt in `dict_dir` (or several,
    all equal: a joined dictionary)."""
    if all(languages):
        paths = [dict_dir / f"dict.{language}.txt" for language in languages]
        missing = [path for path in paths if not path.is_file()]
        if missing:
            raise UserError(f"{missing[0]}: no such file; give the --dict-dir of the "
                            "checkpoint's data (fairseq-preprocess's --destdir)")
    else:
        paths = sorted(dict_dir.glob("dict.*.txt"))
        if not paths:
            raise UserError(f"{dict_dir}: no dict.*.txt; give the --dict-dir of the "
                            "checkpoint's data (fairseq-preprocess's --destdir)")
    dictionaries = [read_dictionary(path) for path in paths]
    if all(languages):
        return dictionaries[0], dictionaries[1]
    if len(paths) == 2 and dictionaries[0] != dictionaries[1]:
        raise UserError(f"{paths[1]} differs from {paths[0]}, and the checkpoint does not "
                        "say which is the source's: give --src-lang and --tgt-lang")
    for path, pieces in zip(paths[1:], dictionaries[1:]):
        if pieces != dictionaries[0]:
            raise UserError(f"{path} differs from {paths[0]}, and the checkpoint does not say "
                            "which language is the source; give a --dict-dir with one "
                            "dictionary, or the checkpoint of a translation task")
    return dictionaries[0], dictionaries[0]


def _check_pieces_known(vocab: Vocab, entries: int, bpe_model: Path) -> None:
    """UserError when most of the dictionary's pieces are not the sentencepiece model's:
    another model than the dictionaries were made with would encode text as <unk>."""
    unknown = sum(vocab.processor.is_unused(i) and vocab.target.processor.is_unused(i)
                  for i in range(len(vocab)))
    if unknown * 2 > entries:
        raise UserError(f"{bpe_model}: {unknown} of the dictionary's {entries} pieces are "
                        "not in this sentencepiece model; give the --bpe-model the "
                        "dictionaries were made with")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
