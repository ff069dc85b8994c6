"""The config package (config/__init__.py): one place to import every setting and preset
from, the very objects config/settings.py and config/presets.py define."""

import transformer_nmt.config as config
from transformer_nmt.config import presets, settings


def test_every_exported_name_is_the_object_its_module_defines():
    assert len(config.__all__) == len(set(config.__all__))
    for name in config.__all__:
        assert getattr(config, name) in (getattr(settings, name, None),
                                         getattr(presets, name, None)), name
    assert {"DecodeConfig", "ModelConfig", "TrainConfig", "get_preset", "PRESETS"} <= set(
        config.__all__)
