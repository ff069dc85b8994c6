"""`nmt serve` (cli/serve.py): the OpenMP settings it gives the server, and a server
without a model or with a wrong one refused in one line before it starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import transformer_nmt.serve.server as server
from transformer_nmt.cli import build_parser, main
from transformer_nmt.cli.serve import run_serve


def openmp_settings_restored(monkeypatch) -> None:
    """The command sets OMP_WAIT_POLICY and GOMP_SPINCOUNT in this process: put them back
    after the test, whether they were set before or not."""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_a_wrong_model_path_is_a_one_line_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "serve", "--model",
                             str(tmp_path / "missing.pt")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "missing.pt" in result.stderr


def test_neither_a_model_nor_a_directory_of_models_is_a_one_line_error(monkeypatch, capsys):
    openmp_settings_restored(monkeypatch)
    monkeypatch.setattr(server, "serve", lambda *args, **kwargs: pytest.fail("served"))
    assert main(["serve"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "needs a model: --model MODEL.pt" in error
    assert "--models DIR" in error


@pytest.mark.parametrize("given, expected", [
    ({}, ("PASSIVE", "30000")), ({"OMP_WAIT_POLICY": "ACTIVE"}, ("ACTIVE", None)),
    ({"GOMP_SPINCOUNT": "0"}, ("PASSIVE", "0"))])
def test_the_server_s_openmp_threads_sleep_when_idle_unless_the_user_says(
        monkeypatch, served_model, given, expected):
    """OMP_WAIT_POLICY and GOMP_SPINCOUNT are set before torch loads OpenMP: spinning
    threads cost a shared machine several times the CPU, threads that sleep at once cost a
    lone sentence 1.6x its time (bench/RESULTS.md); a user's own settings are kept."""
    openmp_settings_restored(monkeypatch)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    seen = []

    def serve(sockets, *args, **kwargs):
        for sock in sockets:  # bound by nmt serve, not listened on here
            sock.close()
        seen.append((os.environ["OMP_WAIT_POLICY"], os.environ.get("GOMP_SPINCOUNT")))

    monkeypatch.setattr(server, "serve", serve)
    run_serve(build_parser().parse_args(["serve", "--model", str(served_model)]))
    assert seen == [expected]
