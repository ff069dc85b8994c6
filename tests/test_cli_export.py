"""`nmt export` (cli/export.py): an existing output kept unless --force, int8 weights on
request (in 7 bits too), and the weight types CTranslate2 itself accepts offered."""

from __future__ import annotations

import pytest

from transformer_nmt.cli import main
from transformer_nmt.cli.export import QUANTIZATIONS as CLI_QUANTIZATIONS
from transformer_nmt.decode.runtime.ct2_int8 import SEVEN_BIT

ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

from transformer_nmt.export.ctranslate2 import QUANTIZATIONS  # noqa: E402

pytestmark = pytest.mark.usefixtures("keep_torch_threads")


def test_an_existing_output_is_kept_without_force_and_replaced_with_it(tmp_path, model_file,
                                                                       capsys):
    out = tmp_path / "ct2"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", "--model", str(model_file), "--to", "ctranslate2", str(out)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert [path.name for path in out.iterdir()] == ["notes.txt"]
    assert main(["export", "--model", str(model_file), "--to", "ctranslate2", str(out),
                 "--force"]) == 0
    assert not (out / "notes.txt").exists() and (out / "model.bin").is_file()
    assert [path.name for path in tmp_path.iterdir()] == ["ct2"]  # no leftovers


def test_int8_weights_load_and_translate(tmp_path, trained_model_file, capsys):
    out = tmp_path / "int8"
    assert main(["export", "--model", str(trained_model_file), "--to", "ctranslate2",
                 str(out), "--quantization", "int8"]) == 0
    assert "int8 weights" in capsys.readouterr().out
    assert (out / "model.bin").stat().st_size < 0.5 * (trained_model_file.stat().st_size)
    translator = ctranslate2.Translator(str(out), compute_type="int8", intra_threads=1)
    [result] = translator.translate_batch([["▁the", "▁house"]])
    assert result.hypotheses[0]


def test_the_cli_offers_ctranslate2s_own_weight_types_and_7_bit_int8():
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    assert set(CLI_QUANTIZATIONS) == set(QUANTIZATIONS) == {*ACCEPTED_MODEL_TYPES, SEVEN_BIT}


def test_7_bit_int8_weights_load_and_score_as_float32_does(tmp_path, trained_model_file):
    float32, seven_bit = tmp_path / "float32", tmp_path / "seven"
    for out, quantization in ((float32, "float32"), (seven_bit, SEVEN_BIT)):
        assert main(["export", "--model", str(trained_model_file), "--to", "ctranslate2",
                     str(out), "--quantization", quantization]) == 0
    assert (seven_bit / "model.bin").stat().st_size < 0.5 * (float32 / "model.bin").stat().st_size
    source, target = [["▁the", "▁house", "▁red"]] * 2, [["▁red", "▁house", "▁the"]] * 2
    exact, int8 = (
        ctranslate2.Translator(str(out), compute_type=compute, intra_threads=1).score_batch(
            source, target) for out, compute in ((float32, "float32"), (seven_bit, "int8")))
    assert [sum(r.log_probs) for r in int8] == pytest.approx(
        [sum(r.log_probs) for r in exact], rel=0.05)
