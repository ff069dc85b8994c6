"""The server's settings are checked when it starts (serve/settings.py)."""

from __future__ import annotations

import argparse

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
    ("max_attention_cells", 0, "max_attention_cells must be a whole number of at least 1"),
    ("max_wait_ms", -1, "max_wait_ms"), ("timeout_s", 0, "timeout_s"),
    ("timeout_s", float("inf"), "timeout_s"), ("api_key", "  ", "API key is empty"),
    ("headers_timeout_s", 0, "headers_timeout_s must be more than 0"),
    ("body_timeout_s", -1, "body_timeout_s must be a finite number"),
    ("keep_alive_s", float("nan"), "keep_alive_s must be a finite number"),
    ("min_confidence", 1.5, "min_confidence must be between 0 and 1"),
    ("min_confidence", -0.1, "min_confidence"),
])
def test_bad_settings_are_user_errors_naming_the_setting(field, value, message):
    with pytest.raises(UserError, match=message):
        ServeSettings(**{field: value})


def test_every_setting_reads_its_environment_variable():
    settings = ServeSettings.from_environment({
        "NMT_HOST": "0.0.0.0", "NMT_PORT": "9000", "NMT_MAX_WAIT_MS": "2.5",
        "NMT_TIMEOUT_S": "30", "NMT_API_KEY": "secret", "NMT_LOG_LEVEL": "debug",
        "NMT_HEADERS_TIMEOUT_S": "2", "NMT_BODY_TIMEOUT_S": "3.5", "NMT_KEEP_ALIVE_S": "1",
        "NMT_CORS_ORIGINS": "https://a.example, https://b.example",
        "NMT_MAX_ATTENTION_CELLS": "5000", "OTHER": "x"})
    assert (settings.host, settings.port, settings.max_wait_ms, settings.timeout_s) == (
        "0.0.0.0", 9000, 2.5, 30.0)
    assert settings.api_key == "secret" and settings.log_level == "debug"
    assert (settings.headers_timeout_s, settings.body_timeout_s, settings.keep_alive_s) == (
        2.0, 3.5, 1.0)
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    assert settings.max_attention_cells == 5000
    assert ServeSettings.from_environment({}) == ServeSettings()


def test_flags_override_the_environment():
    settings = ServeSettings.from_environment({"NMT_PORT": "9000", "NMT_MAX_QUEUE": "10"},
                                              port=9100, max_beam=None)
    assert (settings.port, settings.max_queue, settings.max_beam) == (9100, 10, 16)


@pytest.mark.parametrize("variable, value, message", [
    ("NMT_PORT", "eighty", "environment variable NMT_PORT: port must be an int, not 'eighty'"),
    ("NMT_PORT", "8.5", "environment variable NMT_PORT: port must be an int, not '8.5'"),
    ("NMT_PORT", "70000", "environment variable NMT_PORT: port must be at most 65535"),
    ("NMT_TIMEOUT_S", "0", "environment variable NMT_TIMEOUT_S: timeout_s must be more than 0"),
    ("NMT_LOG_LEVEL", "loud", "environment variable NMT_LOG_LEVEL: log_level must be one of"),
    ("NMT_API_KEY", " ", "environment variable NMT_API_KEY: the API key is empty"),
])
def test_a_bad_variable_is_an_error_naming_it(variable, value, message):
    with pytest.raises(UserError, match="^" + message):
        ServeSettings.from_environment({variable: value})


def test_nmt_serve_reports_a_bad_variable_in_one_line(monkeypatch, capsys, tmp_path):
    from transformer_nmt.cli import main

    monkeypatch.setenv("NMT_MAX_QUEUE", "lots")
    assert main(["serve", "--model", str(tmp_path / "model.pt")]) == 2
    assert capsys.readouterr().err == ("nmt serve: error: environment variable NMT_MAX_QUEUE: "
                                       "max_queue must be an int, not 'lots'\n")


def test_the_help_names_every_variable():
    from transformer_nmt.cli import build_parser

    parser = build_parser()._subparsers._group_actions[0].choices["serve"]
    epilog = " ".join(parser.epilog.split())
    for name in ServeSettings.__dataclass_fields__:
        assert f"NMT_{name.upper()}" in epilog


def test_serve_has_one_token_budget_and_the_old_flag_names_it(capsys):
    """A server's batches have one token budget, --max-batch-tokens (the queue's, across
    every request); translate's --max-tokens is refused on serve naming it."""
    from transformer_nmt.cli import build_parser

    parser = build_parser()._subparsers._group_actions[0].choices["serve"]
    budgets = [option for action in parser._actions if action.help != argparse.SUPPRESS
               for option in action.option_strings if "tokens" in option]
    assert budgets == ["--max-batch-tokens"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "m.pt", "--max-tokens", "100"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "nmt serve: error: --max-tokens is not an option of nmt serve: a batch's tokens, "
        "across every request, are limited by --max-batch-tokens (NMT_MAX_BATCH_TOKENS)")


@pytest.mark.parametrize("flag, variable, budget", [
    (["--max-batch-tokens", "123"], None, 123), ([], "77", 77)])
def test_the_token_budget_of_serve_reaches_the_batcher_and_the_translator(
        served_model, monkeypatch, flag, variable, budget):
    """The flag (or NMT_MAX_BATCH_TOKENS) is the queue's budget and the translator's too,
    so that the translator never cuts again a batch the queue formed."""
    from fastapi.testclient import TestClient

    from transformer_nmt.cli import main
    from transformer_nmt.serve import server

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # run_serve leaves it as it is
    monkeypatch.delenv("NMT_MAX_BATCH_TOKENS", raising=False)
    if variable is not None:
        monkeypatch.setenv("NMT_MAX_BATCH_TOKENS", variable)
    seen = {}

    def serve(sockets, models, options, settings, **_):
        for sock in sockets:  # bound by nmt serve, not listened on here
            sock.close()
        with TestClient(server.build_app(models, options, settings)) as client:
            (model,) = client.app.state.pool.loaded.values()
            batcher = model.service.batcher
            seen["budgets"] = (batcher.budget.tokens, batcher.translator.budget.tokens)

    monkeypatch.setattr(server, "serve", serve)
    assert main(["serve", "--model", str(served_model), "--engine", "torch", "--precision",
                 "fp32", "--workers", "1", *flag]) == 0
    assert seen["budgets"] == (budget, budget)
