"""Importing a fairseq Transformer checkpoint (pretrained/fairseq.py, `nmt import --from
fairseq`): the imported model computes fairseq's own logits and greedy and beam outputs
from the same text, and what it cannot represent is refused in one line.

The checkpoints in tests/data/fairseq were trained and saved by fairseq 0.12.2 itself
(`fairseq-train --arch transformer`), and reference.pt holds what fairseq's hub interface
computed with them: bench/fairseq_checkpoints.py says how, and makes them again. Three
variants: "post" (post-norm, fairseq's sinusoids, one matrix shared three ways, with its
optimizer state), "pre" (pre-norm with final norms, learned positions per stack, GELU,
unscaled embeddings, target embedding shared with the output layer only) and "untied" (odd
d_model, three matrices, different source and target position limits).
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from train_fixtures import make_copy_task_data, tiny_overrides
from transformer_nmt.cli import main
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import load_for_inference, read_model_file, vocab_source
from transformer_nmt.pretrained.fairseq_checkpoint import FairseqArgs, load_checkpoint
from transformer_nmt.pretrained.vocab_map import COPY_BIAS
from transformer_nmt.pretrained.write import import_model
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.session import train

DATA = Path(__file__).parent / "data" / "fairseq"
VARIANTS = ("post", "pre", "untied")


@pytest.fixture(scope="module")
def reference() -> dict:
    return torch.load(DATA / "reference.pt", weights_only=True)


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("imported")
    for name in VARIANTS:
        import_model("fairseq", DATA / name / "checkpoint_best.pt", out / f"{name}.pt",
                     dict_dir=DATA, bpe_model=DATA / "spm.model")
    return {name: out / f"{name}.pt" for name in VARIANTS}


def id_maps(model_path: Path) -> tuple[list[int], dict[int, int]]:
    """(theirs[ours], ours[theirs]) between our ids and fairseq's, by piece: fairseq's
    Dictionary is <s>, <pad>, </s>, <unk>, then dict.en.txt's lines; our start token is
    its </s>."""
    vocab = load_for_inference(model_path).vocab
    pieces = ["<s>", "<pad>", "</s>", "<unk>"] + [
        line.split(" ")[0] for line in (DATA / "dict.en.txt").read_text("utf-8").splitlines()]
    theirs = [2 if i == vocab.bos_id else pieces.index(vocab.piece(i)) for i in range(len(vocab))]
    ours = {their: our for our, their in enumerate(theirs) if our != vocab.bos_id}
    return theirs, ours


def our_logits(model_path: Path, reference: dict, **changes) -> torch.Tensor:
    """The imported model's logits (batch, tgt_len, our vocab) of the reference's batch,
    its fairseq ids mapped to ours; `changes` to its ModelConfig, its weights kept."""
    loaded = load_for_inference(model_path)
    model = loaded.model
    if changes:
        model = Transformer(replace(model.cfg, **changes), model.vocab_size).eval()
        model.load_state_dict(loaded.model.state_dict(), strict=False)  # post-norm: no final norms
    _, ours = id_maps(model_path)
    src = reference["src"].clone().apply_(lambda i: ours[i])  # right-padded, ending in </s>
    tgt = reference["prev"].clone().apply_(lambda i: ours[i])
    tgt[:, 0] = loaded.vocab.bos_id  # fairseq's decoder starts from </s>, ours from its copy
    with torch.no_grad():
        return model(src, tgt)


@pytest.mark.parametrize("name", VARIANTS)
def test_the_imported_model_computes_fairseqs_logits(imported, reference, name):
    theirs, _ = id_maps(imported[name])
    found = our_logits(imported[name], reference)
    expected = reference["logits"][name][..., theirs]  # (batch, tgt_len, our vocab)
    bos = load_for_inference(imported[name]).vocab.bos_id
    others = [i for i in range(len(theirs)) if i != bos]
    torch.testing.assert_close(found[..., others], expected[..., others], atol=1e-5, rtol=1e-5)
    # The start token, a copy of </s>, takes no probability from it.
    torch.testing.assert_close(found[..., bos], expected[..., bos] + COPY_BIAS)
    torch.testing.assert_close(torch.log_softmax(found, -1)[..., others],
                               torch.log_softmax(reference["logits"][name], -1)[..., theirs]
                               [..., others], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, change", [
    ("post", dict(positional="sinusoidal-halves")), ("untied", dict(positional="sinusoidal")),
    ("pre", dict(scale_embeddings=True)), ("pre", dict(pre_norm=False)),
    ("untied", dict(activation="gelu"))])
def test_each_of_fairseqs_differences_shows_in_the_logits(imported, reference, name, change):
    """The comparison above tells the fields it depends on apart: the table, the scale,
    the norms, the activation, each wrong, moves the logits far beyond its tolerance."""
    theirs, _ = id_maps(imported[name])
    found = our_logits(imported[name], reference, **change)
    assert (found[..., 4:] - reference["logits"][name][..., theirs][..., 4:]).abs().max() > 1e-2


def test_the_source_text_becomes_fairseqs_ids(imported, reference):
    """fairseq encodes a sentence as its sentencepiece pieces looked up in dict.txt, then
    </s>, with no <s> before them: so do we."""
    _, ours = id_maps(imported["post"])
    translator = Translator.from_file(imported["post"], TranslatorOptions(precision="fp32"))
    found = [ids + [translator.vocab.eos_id] for ids in translator.source_ids(reference["lines"])]
    for name in VARIANTS:
        assert [[ours[i] for i in row] for row in reference["encoded"][name]] == found


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("search, beam", [("greedy", 1), ("beam", 4)])
def test_search_finds_fairseqs_own_output(imported, reference, name, search, beam):
    """fairseq's generator with beam 1, and with beam 4 and no length penalty (lenpen 0
    ranks by the sum of log-probabilities, as alpha 0 does), ending a sentence once it
    has `beam` finished hypotheses, as ours does."""
    _, ours = id_maps(imported[name])
    translator = Translator.from_file(imported[name], TranslatorOptions(
        DecodeConfig(beam=beam, alpha=0.0, max_len_a=0, max_len_b=16, guard=False),
        workers=1, precision="fp32"))
    found = [hyps[0].tokens for hyps in translator.translate_nbest(reference["lines"])]
    eos = translator.vocab.eos_id
    expected = [[ours[i] for i in row if ours[i] != eos] for row in reference[search][name]]
    assert found == expected
    assert len({tuple(tokens) for tokens in found}) == len(found)


def test_nmt_import_writes_a_model_file_that_says_where_it_came_from(tmp_path, capsys):
    out = tmp_path / "en-de.pt"
    assert main(["import", "--from", "fairseq", str(DATA / "pre" / "checkpoint_best.pt"),
                 "--dict-dir", str(DATA), "--bpe", "sentencepiece", "--bpe-model",
                 str(DATA / "spm.model"), "--out", str(out), "--src-lang", "en",
                 "--tgt-lang", "de"]) == 0
    assert f"wrote {out} (en-de)" in capsys.readouterr().out
    payload = read_model_file(out)
    assert payload["imported_from"]["format"] == "fairseq"
    assert payload["imported_from"]["model_type"] == "transformer"
    assert main(["info", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"fairseq transformer model {DATA / 'pre' / 'checkpoint_best.pt'}" in printed
    assert ("learned positions (a table per stack) up to 48, pre-norm, gelu FFN, tied "
            "embeddings: decoder, logits bias, unscaled embeddings") in printed
    source = tmp_path / "in.txt"
    source.write_text("the dog runs in the garden\nchildren play near the old house\n",
                      encoding="utf-8")
    # At most 16 tokens out: the default 50 would leave no room for a source in this
    # tiny model's 48 positions.
    assert main(["translate", "--model", str(out), "--input", str(source), "--output",
                 str(tmp_path / "out.txt"), "--precision", "fp32", "--max-len-b", "16"]) == 0
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == [
        "die hund läuft in die garten", "kinder spielen bei die alt haus"]


@pytest.mark.parametrize("name", ["post", "pre"])
def test_ctranslate2_decodes_the_imported_model_as_we_do(imported, reference, tmp_path, name):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    from export_fixtures import ctranslate2_tokens, our_tokens
    from transformer_nmt.export.ctranslate2 import export_ctranslate2

    decode = DecodeConfig(beam=1, alpha=0.0, max_len_b=16)
    exported = export_ctranslate2(imported[name], tmp_path / "ct2")
    assert ctranslate2_tokens(exported, imported[name], reference["lines"], decode) == \
        our_tokens(imported[name], reference["lines"], decode)


def test_the_imported_model_fine_tunes_on_a_corpus_of_its_vocabulary(imported, tmp_path):
    """The start token's large negative bias leaves label smoothing's loss finite."""
    data = make_copy_task_data(tmp_path, vocab_source(imported["pre"]))
    out = tmp_path / "run"
    train(out=out, data=data, init_from=str(imported["pre"]), progress=False,
          overrides=tiny_overrides(max_steps=2, warmup_steps=1, lr_peak=1e-4))
    tuned = read_model_file(out / LAST)
    assert tuned["step"] == 2 and tuned["model_config"]["positional"] == "learned"
    assert all(torch.isfinite(value).all() for value in tuned["model"].values()
               if value.is_floating_point() and value.dim())


def copy_data(tmp_path: Path) -> Path:
    """A copy of the dictionaries and sentencepiece model to change."""
    copied = tmp_path / "data"
    copied.mkdir()
    for name in ("dict.en.txt", "dict.de.txt", "spm.model"):
        shutil.copy(DATA / name, copied / name)
    return copied


def resaved(tmp_path: Path, name: str = "post", settings: dict | None = None,
            weights: dict | None = None) -> Path:
    """The variant's checkpoint with `settings` changed and `weights` added, saved as
    fairseq saves it (its settings an argparse.Namespace)."""
    state = load_checkpoint(DATA / name / "checkpoint_best.pt")
    model = {**vars(state["cfg"]["model"]), **(settings or {})}
    state["cfg"]["model"] = argparse.Namespace(**model)
    state["model"] = {**state["model"], **(weights or {})}
    path = tmp_path / "changed.pt"
    torch.save(state, path)
    return path


def refused(checkpoint: Path, tmp_path: Path, message: str, dict_dir: Path = DATA,
            **options) -> None:
    options = {"bpe_model": dict_dir / "spm.model", **options}
    with pytest.raises(UserError, match=message) as raised:
        import_model("fairseq", checkpoint, tmp_path / "out.pt", dict_dir=dict_dir, **options)
    assert "\n" not in str(raised.value) and not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize("settings, weights, message", [
    ({"layernorm_embedding": True}, {}, "layernorm_embedding is True: a LayerNorm on the "
                                        "embeddings"),
    ({"activation_fn": "gelu_accurate"}, {}, "activation_fn is 'gelu_accurate'"),
    ({"decoder_normalize_before": True}, {}, "decoder_normalize_before is True"),
    ({"arch": "lstm"}, {}, "a fairseq 'lstm' model"),
    ({"bpe": "fastbpe"}, {}, None),
    ({}, {"encoder.layernorm_embedding.weight": torch.ones(16)},
     "weights this import does not know \\(encoder.layernorm_embedding.weight\\)"),
])
def test_what_the_model_cannot_represent_is_refused_in_one_line(tmp_path, settings, weights,
                                                               message):
    checkpoint = resaved(tmp_path, settings=settings, weights=weights)
    if message is not None:
        refused(checkpoint, tmp_path, message)


@pytest.mark.parametrize("search, beam", [("greedy", 1), ("beam", 4)])
def test_separate_dictionaries_become_one_id_space(reference, tmp_path, search, beam):
    """The "untied" checkpoint made into one with separate dictionaries and the same
    function: the target's dictionary in another order (the decoder's rows and output
    layer moved with it), a piece only the source's has (an encoder row of its own).
    Imported, it finds fairseq's own outputs."""
    data = copy_data(tmp_path)
    lines = (data / "dict.de.txt").read_text(encoding="utf-8").splitlines()
    (data / "dict.de.txt").write_text("\n".join(lines[::-1]) + "\n", encoding="utf-8")
    (data / "dict.en.txt").write_text("\n".join(lines + ["▁zzz 1"]) + "\n", encoding="utf-8")
    state = load_checkpoint(DATA / "untied" / "checkpoint_best.pt")
    state["cfg"]["model"] = argparse.Namespace(**vars(state["cfg"]["model"]))
    weights = state["model"]
    rows = list(range(4)) + [4 + len(lines) - 1 - j for j in range(len(lines))]
    for name in ("decoder.embed_tokens.weight", "decoder.output_projection.weight"):
        weights[name] = weights[name][rows]
    table = weights["encoder.embed_tokens.weight"]
    weights["encoder.embed_tokens.weight"] = torch.cat([table, torch.randn(1, table.size(1))])
    torch.save(state, tmp_path / "separate.pt")
    out = tmp_path / "separate-en-de.pt"
    with pytest.raises(UserError, match="say which is the source's: give --src-lang"):
        import_model("fairseq", tmp_path / "separate.pt", out, dict_dir=data,
                     bpe_model=data / "spm.model")
    import_model("fairseq", tmp_path / "separate.pt", out, languages=("en", "de"),
                 dict_dir=data, bpe_model=data / "spm.model")
    vocab = load_for_inference(out).vocab
    # Our four specials, fairseq's <s> (a piece of its own here), the target's pieces and
    # the source's own.
    assert vocab.target is not vocab and len(vocab) == 4 + 1 + len(lines) + 1
    translator = Translator.from_file(out, TranslatorOptions(
        DecodeConfig(beam=beam, alpha=0.0, max_len_a=0, max_len_b=16, guard=False),
        workers=1, precision="fp32"))
    found = [[vocab.piece(i) for i in hyps[0].tokens]
             for hyps in translator.translate_nbest(reference["lines"])]
    joined = ["<s>", "<pad>", "</s>", "<unk>"] + [line.split(" ")[0] for line in lines]
    assert found == [[joined[i] for i in row if i != 2] for row in reference[search]["untied"]]


def test_another_bpe_and_unusable_dictionaries_are_refused(tmp_path):
    """BPE codes are imported too (tests/test_pretrained_fairseq_bpe.py); not the codes
    of a sentencepiece model, nor a sentencepiece model for a checkpoint of codes."""
    checkpoint = DATA / "post" / "checkpoint_best.pt"
    refused(checkpoint, tmp_path, "--bpe-model is for --bpe sentencepiece", bpe="fastbpe")
    refused(checkpoint, tmp_path, "--bpe-codes \\(none\\)", bpe="subword_nmt",
            bpe_model=None)
    state = load_checkpoint(checkpoint)
    state["cfg"]["bpe"] = {"_name": "subword_nmt", "bpe_codes": "codes"}
    state["cfg"]["model"] = argparse.Namespace(**vars(state["cfg"]["model"]))
    torch.save(state, tmp_path / "bpe.pt")
    refused(tmp_path / "bpe.pt", tmp_path, "trained with --bpe subword_nmt; give --bpe "
            "subword_nmt and its files")
    state["cfg"]["bpe"] = None
    state["cfg"]["tokenizer"] = {"_name": "moses", "source_lang": "en"}
    torch.save(state, tmp_path / "moses.pt")
    refused(tmp_path / "moses.pt", tmp_path, "its text was tokenized with 'moses'")
    data = copy_data(tmp_path)
    lines = (data / "dict.de.txt").read_text(encoding="utf-8").splitlines()
    (data / "dict.de.txt").write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    refused(checkpoint, tmp_path, "dict.en.txt differs from .*dict.de.txt, and the checkpoint "
            "does not say which is the source's", dict_dir=data)
    with pytest.raises(UserError, match="the source and target dictionaries differ, where "
                       ".* shares one embedding matrix"):
        import_model("fairseq", checkpoint, tmp_path / "out.pt", languages=("en", "de"),
                     dict_dir=data, bpe_model=data / "spm.model")
    (data / "dict.de.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    (data / "dict.en.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    refused(checkpoint, tmp_path, "the encoder's dictionary has 47 entries with fairseq's four "
            "specials, the checkpoint's embeddings 48 rows", dict_dir=data)
    (data / "dict.en.txt").write_text("▁the 5\n▁the 3\n", encoding="utf-8")
    refused(checkpoint, tmp_path, "'▁the' is listed twice", dict_dir=data)


def test_a_sentencepiece_model_of_other_pieces_is_refused(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("zyxw vutsr qpon mlkj\n" * 50, encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "other"),
                                   vocab_size=40, minloglevel=2, hard_vocab_limit=False,
                                   normalization_rule_name="identity")
    refused(DATA / "post" / "checkpoint_best.pt", tmp_path, "pieces are not in this "
            "sentencepiece model", bpe_model=tmp_path / "other.model")


class MakeDirectory:
    """Unpickled by running code, this would create the directory `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def test_a_checkpoint_holding_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    state = {"args": None, "cfg": None, "model": {}, "extra_state": MakeDirectory(marker)}
    torch.save(state, tmp_path / "evil.pt")
    refused(tmp_path / "evil.pt", tmp_path, "refused unread: it holds (posix|os).mkdir")
    assert not marker.exists()
    # omegaconf objects (some fairseq versions' settings): refused with a way to re-save.
    # A stand-in, so that the test needs no omegaconf: pickled under omegaconf's names.
    package, module = types.ModuleType("omegaconf"), types.ModuleType("omegaconf.dictconfig")
    module.DictConfig = type("DictConfig", (dict,), {"__module__": "omegaconf.dictconfig"})
    package.dictconfig = module
    names = {"omegaconf": package, "omegaconf.dictconfig": module}
    saved = {name: sys.modules.get(name) for name in names}
    sys.modules.update(names)
    try:
        torch.save({"cfg": module.DictConfig(model=None), "model": {}}, tmp_path / "omega.pt")
    finally:
        for name, before in saved.items():
            if before is None:
                del sys.modules[name]
            else:
                sys.modules[name] = before
    refused(tmp_path / "omega.pt", tmp_path, "its settings are omegaconf objects "
            r"\(omegaconf.dictconfig.DictConfig\).*OmegaConf.to_container")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    refused(tmp_path / "text.pt", tmp_path, "text.pt: not a PyTorch checkpoint$")
    (tmp_path / "opcodes.pt").write_bytes(b"\x80\x02cbuiltins\nprint\n.")
    refused(tmp_path / "opcodes.pt", tmp_path, "refused unread")


def test_fairseqs_namespace_is_read_as_plain_attributes():
    state = load_checkpoint(DATA / "post" / "checkpoint_best.pt")
    settings = state["cfg"]["model"]
    assert type(settings) is FairseqArgs and settings.arch == "transformer"
    assert not isinstance(settings, argparse.Namespace)
    assert pickle.dumps(FairseqArgs())  # a plain class: nothing to run


def test_fairseqs_options_are_refused_for_another_source(tmp_path):
    with pytest.raises(UserError, match="--dict-dir, --bpe-model and --bpe-codes are for "
                       "--from fairseq"):
        import_model("huggingface", tmp_path, tmp_path / "out.pt", dict_dir=DATA)
    refused(tmp_path / "missing.pt", tmp_path, "missing.pt: no such file")
    refused(DATA / "post" / "checkpoint_best.pt", tmp_path, "--bpe-model .*missing.model: "
            "give the sentencepiece model", bpe_model=tmp_path / "missing.model")


def test_the_imported_model_is_calibrated_evaluated_and_drawn(imported, tmp_path, capsys):
    """The commands after import work on it with no special case: a confidence fitted on
    a corpus of its vocabulary, BLEU on that corpus, the attention pictures."""
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from transformer_nmt.calibrate import calibrate

    data = make_copy_task_data(tmp_path, vocab_source(imported["pre"]))
    out = tmp_path / "calibrated.pt"
    calibrate(imported["pre"], data, "valid", out=out, log=lambda message: None,
              options=TranslatorOptions(DecodeConfig(max_len_b=16), precision="fp32"))
    assert read_model_file(out)["calibration"]
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--split", "valid",
                 "--precision", "fp32", "--max-len-b", "16"]) == 0
    assert "BLEU" in capsys.readouterr().out
    assert main(["attention", "--model", str(out), "--src", "the dog runs in the garden",
                 "--out", str(tmp_path / "pictures")]) == 0
    assert list((tmp_path / "pictures").glob("*.png"))
