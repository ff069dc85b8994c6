"""Importing a fairseq checkpoint whose text is Moses tokens cut by BPE codes, as fairseq's
WMT models are (`nmt import --from fairseq --bpe subword_nmt|fastbpe --bpe-codes`): the
same ids from the same text, and the same greedy and beam outputs and detokenized
translations, as fairseq 0.12.2's own hub interface with `--tokenizer moses --bpe
subword_nmt` (tests/data/fairseq-bpe, made by bench/fairseq_bpe_checkpoint.py); then
translated, served, scored and fine-tuned like any model file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("subword_nmt", reason="the pretrained extra is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from serve_fixtures import make_app  # noqa: E402
from train_fixtures import tiny_overrides  # noqa: E402
from transformer_nmt.cli import main  # noqa: E402
from transformer_nmt.config import DecodeConfig  # noqa: E402
from transformer_nmt.data.bpe_vocab import BpeVocab, merges_of  # noqa: E402
from transformer_nmt.data.prepare import prepare  # noqa: E402
from transformer_nmt.data.prepare_options import PrepareOptions  # noqa: E402
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions  # noqa: E402
from transformer_nmt.errors import UserError  # noqa: E402
from transformer_nmt.model_file import (load_for_inference, read_model_file,  # noqa: E402
                                        vocab_source)
from transformer_nmt.pretrained.write import import_model  # noqa: E402
from transformer_nmt.training.checkpoint import LAST  # noqa: E402
from transformer_nmt.training.session import train  # noqa: E402

DATA = Path(__file__).parent / "data" / "fairseq-bpe"
CHECKPOINT = DATA / "post" / "checkpoint_best.pt"
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
"""fairseq's Dictionary's first four ids, before dict.txt's lines."""


@pytest.fixture(scope="module")
def reference() -> dict:
    return torch.load(DATA / "reference.pt", weights_only=True)


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "en-de.pt"
    import_model("fairseq", CHECKPOINT, out, languages=("en", "de"), dict_dir=DATA,
                 bpe="subword_nmt", bpe_codes=DATA / "codes")
    return out


def fairseq_pieces() -> list[str]:
    return SPECIALS + [line.split(" ")[0] for line in
                       (DATA / "dict.en.txt").read_text(encoding="utf-8").splitlines()]


def test_the_source_text_becomes_fairseqs_ids(imported, reference):
    vocab = load_for_inference(imported).vocab
    assert isinstance(vocab, BpeVocab)
    pieces = fairseq_pieces()
    for line, expected in zip(reference["lines"], reference["encoded"]):
        assert vocab.marked_pieces(vocab.encode(line))  # text, cut into pieces
        assert [vocab.piece(i) for i in vocab.encode(line)] == \
            [pieces[i] for i in expected[:-1]]  # fairseq's end with </s>


@pytest.mark.parametrize("search, beam", [("greedy", 1), ("beam", 4)])
def test_search_finds_fairseqs_own_output_and_translation(imported, reference, search,
                                                          beam):
    """fairseq's generator never ends an output before one token (its --min-len 1)."""
    translator = Translator.from_file(imported, TranslatorOptions(
        DecodeConfig(beam=beam, alpha=0.0, max_len_a=0, max_len_b=24, min_len=1,
                     guard=False), workers=1, precision="fp32"))
    found = [hyps[0] for hyps in translator.translate_nbest(reference["lines"])]
    pieces = fairseq_pieces()
    assert [[translator.vocab.piece(i) for i in hyp.tokens] for hyp in found] == \
        [[pieces[i] for i in row if i != 2] for row in reference[search]]
    assert [hyp.text for hyp in found] == reference[f"{search}_translations"]


def test_fastbpe_codes_are_the_same_merges_with_counts(imported, reference, tmp_path):
    codes = (DATA / "codes").read_text(encoding="utf-8").splitlines()[1:]
    (tmp_path / "fastbpe.codes").write_text("".join(f"{line} {100 - n}\n"
                                                    for n, line in enumerate(codes)),
                                            encoding="utf-8")
    out = tmp_path / "fastbpe.pt"
    import_model("fairseq", CHECKPOINT, out, languages=("en", "de"), dict_dir=DATA,
                 bpe="fastbpe", bpe_codes=tmp_path / "fastbpe.codes")
    assert read_model_file(out)["vocab"] == read_model_file(imported)["vocab"]
    with pytest.raises(UserError, match=r"line 2: 'a b c d' is not a merge"):
        merges_of("#version: 0.2\ne n\na b c d\n", "codes")


@pytest.mark.parametrize("line", ["The green garden is small.",
                                  "A warm-green roof, and the old house!", "Is it small?"])
def test_bpe_pieces_make_the_words_of_the_text(imported, line):
    """Alignments, the page and the guard count words as the text has them: Moses splits
    punctuation and hyphens off (the toy model knows no other characters), and its
    detokenizer joins them again."""
    vocab = load_for_inference(imported).vocab
    words = "".join(vocab.marked_pieces(vocab.encode(line))).replace("\u2581", " ").split()
    assert len(words) == len(line.split())


def test_alignments_count_the_words_of_the_text(imported):
    translator = Translator.from_file(imported, TranslatorOptions(
        DecodeConfig(beam=2, guard=False), workers=1, precision="fp32"))
    (translation,), = translator.translate_nbest(["The green garden is small."],
                                                 alignments=True)
    target_words = len(translation.text.split())
    assert translation.alignment
    assert all(source < 6 and target < target_words
               for source, target in translation.alignment)


def test_the_imported_model_is_served_scored_and_fine_tuned(imported, reference, tmp_path,
                                                            capsys):
    with TestClient(make_app(imported)) as client:
        answer = client.post("/translate", json={"q": reference["lines"][0], "source": "en",
                                                 "target": "de"})
    assert answer.status_code == 200
    assert isinstance(answer.json()["translatedText"], str)
    (tmp_path / "src.txt").write_text("\n".join(reference["lines"]) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(reference["beam_translations"]) + "\n",
                                      encoding="utf-8")
    assert main(["score", "--model", str(imported), "--src", str(tmp_path / "src.txt"),
                 "--tgt", str(tmp_path / "ref.txt"), "--precision", "fp32"]) == 0
    files = {}
    for split in ("train", "valid"):
        for side, name in (("src", "src.txt"), ("tgt", "ref.txt")):
            files[f"{split}_{side}"] = tmp_path / name
    data = tmp_path / "data"
    prepare(PrepareOptions(corpus="files", src="en", tgt="de", out=data,
                           vocab=vocab_source(imported), files=files, threads=1),
            progress=False, log=lambda message: None)
    out = tmp_path / "run"
    train(out=out, data=data, init_from=str(imported), progress=False,
          overrides=tiny_overrides(max_steps=2, warmup_steps=1, lr_peak=1e-4))
    tuned = read_model_file(out / LAST)
    assert tuned["vocab"] == read_model_file(imported)["vocab"] and tuned["step"] == 2


def test_bpe_imports_are_refused_in_one_line_without_their_files(tmp_path, capsys):
    def refused(message: str, **options) -> None:
        with pytest.raises(UserError, match=message) as raised:
            import_model("fairseq", CHECKPOINT, tmp_path / "out.pt", dict_dir=DATA, **options)
        assert "\n" not in str(raised.value) and not (tmp_path / "out.pt").exists()

    refused("--bpe-codes \\(none\\): give the BPE codes", bpe="subword_nmt")
    refused("names no languages, which Moses tokenizes by", bpe="fastbpe",
            bpe_codes=DATA / "codes")
    refused("--bpe-model is for --bpe sentencepiece", bpe="subword_nmt",
            bpe_model=DATA / "codes", bpe_codes=DATA / "codes")
    shutil.copy(DATA / "codes", tmp_path / "bad.codes")
    (tmp_path / "bad.codes").write_text("#version: 0.1\ne n\n", encoding="utf-8")
    refused("version 0.1", bpe="subword_nmt", bpe_codes=tmp_path / "bad.codes",
            languages=("en", "de"))
    assert main(["import", "--from", "fairseq", str(CHECKPOINT), "--dict-dir", str(DATA),
                 "--bpe", "subword_nmt", "--bpe-codes", str(DATA / "codes"), "--src-lang",
                 "en", "--tgt-lang", "de", "--out", str(tmp_path / "cli.pt")]) == 0
    printed = capsys.readouterr().out
    assert "fairseq transformer model" in printed
    assert "Moses tokens and BPE codes for each side" in printed
    # Argos Translate cuts text with sentencepiece: refused in one line, nothing written.
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    assert main(["export", "--model", str(tmp_path / "cli.pt"), "--to", "argos",
                 str(tmp_path / "x.argosmodel")]) != 0
    assert "Moses tokens cut by BPE codes" in capsys.readouterr().err
    assert not (tmp_path / "x.argosmodel").exists()
