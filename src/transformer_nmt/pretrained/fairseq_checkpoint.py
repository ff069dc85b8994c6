"""A fairseq checkpoint read as data, never run: `torch.load(weights_only=True)`, with
fairseq's argparse.Namespace of settings (`args`, or `cfg["model"]` of fairseq 0.10 and
later) read into `FairseqArgs`, a plain record; any other class in its pickle is refused
unread. What the checkpoint records of its model, its task, its BPE and its tokenizer
are read from it here; what they make is pretrained/fairseq.py's.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from transformer_nmt.errors import UserError

ARCHITECTURES = ("transformer", "transformer_tiny", "transformer_iwslt_de_en",
                 "transformer_wmt_en_de", "transformer_vaswani_wmt_en_de_big",
                 "transformer_vaswani_wmt_en_fr_big", "transformer_wmt_en_de_big",
                 "transformer_wmt_en_de_big_t2t")
"""fairseq's architectures of its TransformerModel: one network, other defaults."""


class FairseqArgs:
    """What fairseq's argparse.Namespace of settings is read as: its attributes, nothing
    that runs."""


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


def checkpoint_settings(state: dict[str, Any], path: Path
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


def check_tokenizer(state: dict[str, Any], path: Path, bpe: str) -> None:
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


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
