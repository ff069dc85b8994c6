"""The server's settings are checked when it starts (serve/settings.py)."""

from __future__ import annotations

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.serve.settings import ServeSettings


def test_defaults_bind_to_loopback_without_key_or_cors():
    settings = ServeSettings()
    assert settings.host == "127.0.0.1"
    assert settings.api_key is None and settings.cors_origins == ()


@pytest.mark.parametrize("field, value, message", [
    ("port", 0, "port must be"), ("port", 70000, "at most 65535"),
    ("max_batch_tokens", 0, "max_batch_tokens"), ("max_queue", 1.5, "max_queue"),
    ("max_wait_ms", -1, "max_wait_ms"), ("timeout_s", 0, "timeout_s"),
    ("timeout_s", float("inf"), "timeout_s"), ("api_key", "  ", "API key is empty"),
])
def test_bad_settings_are_user_errors_naming_the_setting(field, value, message):
    with pytest.raises(UserError, match=message):
        ServeSettings(**{field: value})
