"""What an export records about its source model (export/provenance.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from transformer_nmt.config import get_preset
from transformer_nmt.export.provenance import provenance
from transformer_nmt.model_dir import EXPORT_FORMAT_VERSION, EXPORT_VERSION_KEY
from transformer_nmt.model_file import model_preset as preset_of
from transformer_nmt.model_file import model_training_steps as training_steps

SMALL = dataclasses.asdict(get_preset("small").model)


def test_steps_come_from_a_checkpoint_an_average_or_an_earlier_export():
    assert training_steps({"step": 120}) == 120
    assert training_steps({"averaged_from": [{"file": "a", "step": 90},
                                             {"file": "b", "step": 110}]}) == 110
    assert training_steps({"training_steps": 75}) == 75
    assert training_steps({}) is None


def test_an_average_is_given_the_preset_of_its_architecture_and_says_so():
    assert preset_of({"preset": "base", "model_config": SMALL}) == (
        "base", "recorded in the model file")
    assert preset_of({"model_config": SMALL})[0] == "small"
    changed = {**SMALL, "d_ff": 999}
    assert preset_of({"model_config": changed}) == (
        None, "not recorded, and no preset has this architecture")


def test_the_record_names_its_format_version_languages_steps_and_source():
    record = provenance({"model_config": SMALL, "src_lang": "en", "tgt_lang": "de",
                         "averaged_from": [{"file": "a", "step": 5}, {"file": "b", "step": 9}]},
                        Path("runs/x/model.pt"))
    assert (record["src_lang"], record["tgt_lang"], record["training_steps"]) == ("en", "de", 9)
    assert record["source_model"] == "model.pt" and record["averaged_steps"] == [5, 9]
    assert record["exported_by"].startswith("transformer-nmt ")
    assert record[EXPORT_VERSION_KEY] == EXPORT_FORMAT_VERSION
