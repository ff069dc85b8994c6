"""The named presets (config/presets.py): each a valid configuration, found by name or by
architecture, and listed in `nmt presets`' table."""

import dataclasses

import pytest
import torch

from transformer_nmt.config.presets import (PRESETS, get_preset, preset_of_architecture,
                                            presets_table)
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer


def test_every_preset_is_valid_and_replace_revalidates():
    for name in ("base", "big", "tiny", "small", "d-drop2"):
        preset = get_preset(name)
        with pytest.raises(UserError, match="dropout"):
            dataclasses.replace(preset.model, dropout=2.0)


def test_max_positions_is_part_of_the_architecture_everywhere(tmp_path):
    """A learned table has max_positions rows and every model takes inputs up to it: a
    fine-tuning run may not change it, and a model with other positions is no preset."""
    from transformer_nmt.training.init_from import check_init_architecture

    tiny = get_preset("tiny").model
    recorded = dataclasses.asdict(tiny)
    check_init_architecture(tmp_path / "m.pt", recorded, dataclasses.replace(tiny, dropout=0.3))
    with pytest.raises(UserError, match="max_positions: 256 -> 512"):
        check_init_architecture(tmp_path / "m.pt", recorded,
                                dataclasses.replace(tiny, max_positions=512))
    assert preset_of_architecture(dataclasses.replace(tiny, dropout=0.3)) == "tiny"
    assert preset_of_architecture(dataclasses.replace(tiny, max_positions=512)) is None


@pytest.mark.parametrize("name, layers, d_model", [("student-tiny", (3, 1), 192),
                                                   ("student-base", (6, 1), 384)])
def test_student_presets_have_a_deep_encoder_and_a_shallow_decoder(name, layers, d_model):
    """Decoding runs the decoder once per output token and the encoder once per sentence:
    a student's depth belongs in its encoder."""
    model = get_preset(name).model
    assert (model.encoder_layers, model.decoder_layers, model.d_model) == (*layers, d_model)
    assert model.heads * model.d_k == d_model
    assert model.pre_norm  # a post-norm six-layer encoder trained too slowly to be used
    assert preset_of_architecture(model) == name


def test_the_tiny_student_has_at_most_half_the_small_presets_parameters():
    """A student of the quickstart's model (the small preset) at its 8000 pieces, trained
    with the quickstart's short-run regime (its batch, warm-up and peak learning rate)."""
    def parameters(config) -> int:
        return sum(p.numel() for p in Transformer(config, 8000).parameters())

    student, small = get_preset("student-tiny"), get_preset("small")
    assert parameters(student.model) <= parameters(small.model) / 2
    assert (student.train.batch_tokens, student.train.warmup_steps) == (2048, 300)
    peak = student.train.lr_scale * student.train.warmup_steps ** -0.5
    small_peak = small.train.lr_scale * small.train.warmup_steps ** -0.5
    assert peak == pytest.approx(small_peak, rel=1e-5)  # per d_model^-0.5, as eq. (3)


def test_the_base_student_has_at_most_half_the_base_presets_parameters():
    """At the paper's 37,000 shared pieces, where the embedding is 30% of `base`."""
    def parameters(config) -> int:
        with torch.device("meta"):  # counted, not allocated
            return sum(p.numel() for p in Transformer(config, 37000).parameters())

    student, base = get_preset("student-base").model, get_preset("base").model
    assert parameters(student) <= parameters(base) / 2


def test_an_unknown_preset_is_refused_with_the_known_names():
    assert get_preset("base").model == PRESETS["base"].model
    with pytest.raises(UserError, match="unknown preset 'huge'; known presets: base, big, "):
        get_preset("huge")


def test_the_table_has_a_row_for_every_preset_under_aligned_columns():
    lines = presets_table().splitlines()
    assert lines[0].split()[:3] == ["name", "N", "d_model"]
    assert set(lines[1]) == {"-", " "}
    assert [line.split()[0] for line in lines[2:]] == list(PRESETS)
    base = lines[2 + list(PRESETS).index("base")].split()
    assert base[:7] == ["base", "6", "512", "2048", "8", "64", "64"] and "65M" in base
    student = next(line for line in lines if line.startswith("student-tiny "))
    assert student.split()[1] == "3+1"  # encoder+decoder layers where they differ
