"""Importing a model in Marian's own format (pretrained/marian.py, `nmt import --from
marian`): a release written from a MarianMTModel, by the inverse of transformers'
converter, imports as the same model file as that MarianMTModel's directory does (whose
import test_pretrained_huggingface.py holds against transformers' logits), translates as
transformers does, and what ours cannot represent is refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch

pytest.importorskip("transformers", reason="the pretrained extra is not installed")
yaml = pytest.importorskip("yaml", reason="the pretrained extra is not installed")

from pretrained_fixtures import (ENGLISH, MARIAN_NPZ, MARIAN_VOCAB,  # noqa: E402
                                 assert_greedy_is_transformers, id_maps, make_marian_dir,
                                 make_marian_release, sentences)
from transformer_nmt.cli import main  # noqa: E402
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions  # noqa: E402
from transformer_nmt.errors import UserError  # noqa: E402
from transformer_nmt.model_file import read_model_file  # noqa: E402
from transformer_nmt.pretrained.write import import_model  # noqa: E402


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return make_marian_dir(tmp_path_factory.mktemp("hf") / "opus-mt-en-de", zero_start=True)


@pytest.fixture(scope="module")
def release(hf_dir, tmp_path_factory) -> Path:
    return make_marian_release(hf_dir, tmp_path_factory.mktemp("marian") / "opus-2021-02-22")


@pytest.fixture(scope="module")
def imported(release, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "en-de.pt"
    import_model("marian", release, out)
    return out


@pytest.fixture(scope="module")
def imported_from_hf(hf_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported-hf") / "en-de.pt"
    import_model("huggingface", hf_dir, out)
    return out


def copied(release: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(release, tmp_path / "release"))


def refused(directory: Path, tmp_path: Path, message: str) -> None:
    with pytest.raises(UserError, match=message) as raised:
        import_model("marian", directory, tmp_path / "out.pt")
    assert "\n" not in str(raised.value) and not (tmp_path / "out.pt").exists()


def test_the_release_imports_as_the_huggingface_model_it_was_written_from(imported,
                                                                          imported_from_hf):
    mine, theirs = read_model_file(imported), read_model_file(imported_from_hf)
    assert mine["model"].keys() == theirs["model"].keys()
    for name, tensor in theirs["model"].items():
        assert torch.equal(mine["model"][name], tensor), name
    # Training's dropout, which model.yml does not record (the fixture trained without).
    assert mine["model_config"] == {**theirs["model_config"], "dropout": 0.1}
    assert mine["model_config"]["max_positions"] == 64  # decoder.yml's max-length
    assert (mine["vocab"], mine["vocab_size"], mine["pad_id"]) == (
        theirs["vocab"], theirs["vocab_size"], theirs["pad_id"])
    assert mine["checksum"] == theirs["checksum"]
    assert mine["imported_from"]["format"] == "marian" and "src_lang" not in mine


def test_the_imported_model_translates_as_transformers_does(imported, hf_dir):
    assert_greedy_is_transformers(imported, hf_dir)


def test_an_spm_vocabulary_imports_the_same_weights_and_cuts_text_as_itself(
        hf_dir, imported, tmp_path):
    release = make_marian_release(hf_dir, tmp_path / "spm-release", spm_vocab=True)
    (release / "decoder.yml").write_text(
        (release / "decoder.yml").read_text().replace("max-length: 64\n", ""))
    out = tmp_path / "spm.pt"
    import_model("marian", release, out)
    mine, other = read_model_file(out), read_model_file(imported)
    assert all(torch.equal(mine["model"][name], tensor) for name, tensor in
               other["model"].items())
    # marian-decoder's own limit when decoder.yml names none.
    assert mine["model_config"]["max_positions"] == 1000
    _, ours = id_maps(out, hf_dir)
    processor = spm.SentencePieceProcessor(model_file=str(release / "vocab.spm"))
    lines = sentences(ENGLISH, 10, seed=7)
    translator = Translator.from_file(out, TranslatorOptions(precision="fp32"))
    assert translator.source_ids(lines) == [[ours[i] for i in processor.encode(line)]
                                            for line in lines]


def test_nmt_import_from_marian_writes_a_model_file_that_says_where_it_came_from(
        release, tmp_path, capsys):
    directory = copied(release, tmp_path)
    (directory / "LICENSE").write_text("\nCreative Commons Attribution 4.0 International\n")
    out = tmp_path / "en-de.pt"
    assert main(["import", "--from", "marian", str(directory), "--out", str(out),
                 "--src-lang", "en", "--tgt-lang", "de"]) == 0
    assert f"wrote {out} (en-de)" in capsys.readouterr().out
    assert read_model_file(out)["imported_from"]["license"] == \
        "Creative Commons Attribution 4.0 International"
    assert main(["info", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"marian transformer model {directory}" in printed
    assert "licence: Creative Commons Attribution 4.0 International" in printed


@pytest.mark.parametrize("options, message", [
    ({"transformer-postprocess": "da"}, "transformer-postprocess is 'da': only Marian's "
     "post-norm"),
    ({"transformer-preprocess": "n"}, "transformer-preprocess is 'n': only Marian's post-norm"),
    ({"tied-embeddings-all": False, "tied-embeddings-src": True},
     "tied-embeddings-src is 'true': source and target embeddings shared apart"),
    ({"tied-embeddings-all": False, "tied-embeddings": True},
     "no parameter encoder_Wemb"),
    ({"transformer-ffn-activation": "gelu"}, "transformer-ffn-activation is 'gelu'"),
    ({"transformer-train-position-embeddings": True}, "learned positions"),
    ({"transformer-decoder-autoreg": "average-attention"}, "transformer-decoder-autoreg"),
])
def test_what_ours_cannot_represent_is_refused_in_one_line(hf_dir, tmp_path, options, message):
    refused(make_marian_release(hf_dir, tmp_path / "changed", options), tmp_path, message)


def test_a_missing_or_foreign_vocabulary_is_refused_in_one_line(release, tmp_path):
    directory = copied(release, tmp_path)
    (directory / MARIAN_VOCAB).unlink()
    refused(directory, tmp_path, f"names {MARIAN_VOCAB}, which is not in")
    text = (release / MARIAN_VOCAB).read_text(encoding="utf-8")
    size = len(yaml.safe_load(text))
    (directory / MARIAN_VOCAB).write_text(f"{text}extra: {size}\n", encoding="utf-8")
    refused(directory, tmp_path, rf"{size + 1} pieces, where the model's embeddings \(Wemb\) "
            rf"have {size} rows")
    shutil.copy(release / MARIAN_VOCAB, directory)
    (directory / "source.spm").unlink()
    refused(directory, tmp_path, "no source.spm")
    (directory / "decoder.yml").unlink()
    refused(directory, tmp_path, "no decoder.yml")


def test_an_npz_that_is_not_the_transformer_of_its_model_yml_is_refused(release, tmp_path):
    directory = copied(release, tmp_path)
    with np.load(directory / MARIAN_NPZ) as npz:
        arrays = {name: npz[name] for name in npz.files}
    np.savez(directory / MARIAN_NPZ, **{name: array for name, array in arrays.items()
                                        if name != "special:model.yml"})
    refused(directory, tmp_path, "no special:model.yml entry")
    np.savez(directory / MARIAN_NPZ, **arrays, Wpos=np.zeros((64, 16), dtype=np.float32))
    refused(directory, tmp_path, "parameters this import does not know: Wpos")
    del arrays["decoder_l2_context_Wk"]
    np.savez(directory / MARIAN_NPZ, **arrays)
    refused(directory, tmp_path, "no parameter decoder_l2_context_Wk")
    arrays["decoder_l2_context_Wk"] = np.zeros((16, 8), dtype=np.float32)
    np.savez(directory / MARIAN_NPZ, **arrays)
    refused(directory, tmp_path, r"decoder_l2_context_Wk is \(16, 8\), where model.yml's "
            r"dimensions make it \(16, 16\)")
