"""The Python API of the package's __init__: `from transformer_nmt import Translator, ...`
works, gives the library's own objects, and importing the package imports no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

import transformer_nmt
from export_fixtures import task_sentences


def test_importing_the_package_imports_neither_torch_nor_the_library():
    """Only the version's leaf module comes with it."""
    code = ("import sys, transformer_nmt; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('transformer_nmt.')))")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert child.stdout.strip() == "['transformer_nmt.version']"


def test_the_api_names_are_the_librarys_own():
    from transformer_nmt import (DecodeConfig, PrepareOptions, Translator, TranslatorOptions,
                                 prepare, train)
    from transformer_nmt.config import DecodeConfig as decode_config
    from transformer_nmt.data.prepare import PrepareOptions as prepare_options
    from transformer_nmt.data.prepare import prepare as prepare_function
    from transformer_nmt.decode.text.translator import Translator as translator
    from transformer_nmt.decode.text.translator import TranslatorOptions as translator_options
    from transformer_nmt.training.session import train as train_function

    assert (Translator, TranslatorOptions, DecodeConfig, prepare, PrepareOptions, train) == (
        translator, translator_options, decode_config, prepare_function, prepare_options,
        train_function)
    assert set(transformer_nmt.API) <= set(dir(transformer_nmt))
    with pytest.raises(AttributeError, match="no attribute 'Translate'"):
        transformer_nmt.Translate  # noqa: B018


def test_the_readme_example_translates(trained_model_file, tiny_data):
    """The Python API example (docs/export-api.md): the translations depend on their
    sources: against the toy task's references (the source's words reversed) they score
    well above the same translations handed to the wrong sources. A ratio measured in the
    run, so that it holds on every CPU, whose float kernels change which words a briefly
    trained model gets right."""
    import sacrebleu
    from transformer_nmt import DecodeConfig, Translator, TranslatorOptions

    translator = Translator.from_file(trained_model_file,
                                      TranslatorOptions(decode=DecodeConfig(beam=4), workers=1))
    lines = task_sentences(tiny_data)
    translations = list(translator.translate(lines))
    assert len(translations) == len(lines) and all(translations)
    references = [" ".join(reversed(line.split())) for line in lines]
    matched = sacrebleu.corpus_chrf(translations, [references]).score
    mismatched = sacrebleu.corpus_chrf(translations[1:] + translations[:1], [references]).score
    assert matched > 1.5 * mismatched, (matched, mismatched)


def test_train_and_prepare_from_the_api_make_a_model(tmp_path, tiny_data):
    """prepare then train, through the API alone; `train` works whether or not the training
    subpackage was imported before (here it was: conftest imports it)."""
    from train_fixtures import tiny_overrides
    from transformer_nmt import PrepareOptions, Translator, prepare, train

    assert "transformer_nmt.training.session" in sys.modules
    source = tmp_path / "train.en"
    source.write_text("".join(f"{w} house\n" for w in ("a", "the", "small", "big") * 20))
    target = tmp_path / "train.de"
    target.write_text("".join(f"house {w}\n" for w in ("a", "the", "small", "big") * 20))
    prepare(PrepareOptions(corpus="files", src="en", tgt="de", out=tmp_path / "data",
                                    vocab_size=24, threads=1,
                                    files={"train_src": str(source), "train_tgt": str(target),
                                           "valid_src": str(source), "valid_tgt": str(target)}),
            progress=False, log=lambda message: None)
    summary = train(out=tmp_path / "run", data=tmp_path / "data", preset="tiny",
                    progress=False, overrides=tiny_overrides(max_steps=2))
    assert summary.step == 2
    assert list(Translator.from_file(tmp_path / "run" / "checkpoint_last.pt").translate(["a house"]))
