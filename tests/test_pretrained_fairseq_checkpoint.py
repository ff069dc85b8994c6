"""A fairseq checkpoint read as data (pretrained/fairseq_checkpoint.py), on checkpoints
saved here: fairseq's Namespace read as a plain record, any other class refused unread,
what is not a checkpoint refused in one line; the model's, task's and BPE's settings from
`args` or from `cfg`; and a tokenizer other than what is imported refused."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from transformer_nmt.errors import UserError
from transformer_nmt.pretrained.fairseq_checkpoint import (FairseqArgs, check_tokenizer,
                                                           checkpoint_settings,
                                                           load_checkpoint)

WEIGHTS = {"encoder.embed_tokens.weight": torch.zeros(4, 2)}


class Payload:
    """What no fairseq checkpoint holds: a class of its own, which unpickling would run."""


def saved(path: Path, state) -> Path:
    torch.save(state, path)
    return path


def test_the_namespace_is_read_as_a_plain_record(tmp_path):
    args = argparse.Namespace(arch="transformer", encoder_embed_dim=2, bpe="sentencepiece")
    state = load_checkpoint(saved(tmp_path / "c.pt", {"model": WEIGHTS, "args": args}))
    assert isinstance(state["args"], FairseqArgs) and state["args"].encoder_embed_dim == 2
    assert torch.equal(state["model"]["encoder.embed_tokens.weight"], torch.zeros(4, 2))


def test_what_is_not_a_fairseq_checkpoint_is_refused_unread_in_one_line(tmp_path):
    with pytest.raises(UserError, match="missing.pt: no such file"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(UserError, match="text.pt: not a PyTorch checkpoint$"):
        load_checkpoint(tmp_path / "text.pt")
    with pytest.raises(UserError, match="not a fairseq checkpoint \\(no 'model' state dict"):
        load_checkpoint(saved(tmp_path / "weights.pt", WEIGHTS))
    with pytest.raises(UserError, match=r"refused unread: it holds \S*Payload") as refused:
        load_checkpoint(saved(tmp_path / "evil.pt", {"model": WEIGHTS, "x": Payload()}))
    assert "\n" not in str(refused.value)


def test_the_settings_from_args_or_from_cfg_flattened(tmp_path):
    args = FairseqArgs()
    args.__dict__.update(arch="transformer_wmt_en_de", encoder_embed_dim=8, bpe="fastbpe",
                         source_lang="en")
    model, task, bpe = checkpoint_settings({"args": args}, tmp_path / "c.pt")
    assert (model["encoder_embed_dim"], task["source_lang"], bpe) == (8, "en", "fastbpe")
    cfg = {"model": {"_name": "transformer", "encoder": {"embed_dim": 8}},
           "task": {"source_lang": "de"}, "bpe": {"_name": "sentencepiece"}}
    model, task, bpe = checkpoint_settings({"cfg": cfg}, tmp_path / "c.pt")
    assert (model["arch"], model["encoder_embed_dim"], task["source_lang"], bpe) == (
        "transformer", 8, "de", "sentencepiece")
    with pytest.raises(UserError, match="c.pt: a fairseq 'bart_large' model; nmt import"):
        checkpoint_settings({"cfg": {"model": {"_name": "bart_large"}}}, tmp_path / "c.pt")
    with pytest.raises(UserError, match="c.pt: no settings"):
        checkpoint_settings({}, tmp_path / "c.pt")


@pytest.mark.parametrize("tokenizer, bpe, says", [
    ({}, "sentencepiece", None), ({"_name": "moses"}, "subword_nmt", None),
    ({"_name": "moses"}, "sentencepiece", "tokenized with 'moses'"),
    ({"_name": "space"}, "subword_nmt", "tokenized with 'space'"),
    ({"_name": "moses", "moses_no_escape": True}, "subword_nmt", "with moses_no_escape"),
])
def test_a_tokenizer_other_than_what_is_imported_is_refused(tmp_path, tokenizer, bpe, says):
    state = {"cfg": {"tokenizer": tokenizer}}
    if says is None:
        check_tokenizer(state, tmp_path / "c.pt", bpe)
        return
    with pytest.raises(UserError, match=says):
        check_tokenizer(state, tmp_path / "c.pt", bpe)
