"""Training on a CPU starts again with tcmalloc preloaded where it is installed, once, and
never when the user says no or preloads something of their own."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

from transformer_nmt.cli.allocator import trains_on_cpu
from transformer_nmt.memory import training_allocator

FOUND = {"tcmalloc_minimal": "libtcmalloc_minimal.so.4"}.get


def test_tcmalloc_is_preloaded_unless_refused_or_something_else_is():
    if not sys.platform.startswith("linux"):
        assert training_allocator({}, find=FOUND) is None
        return
    assert training_allocator({"HOME": "/h"}, find=FOUND) == {
        "HOME": "/h", "LD_PRELOAD": "libtcmalloc_minimal.so.4"}
    assert training_allocator({"NMT_ALLOCATOR": "system"}, find=FOUND) is None
    assert training_allocator({"LD_PRELOAD": "libjemalloc.so.2"}, find=FOUND) is None
    assert training_allocator({}, find=lambda name: None) is None
    only_full = {"tcmalloc": "libtcmalloc.so.4"}.get
    assert training_allocator({}, find=only_full)["LD_PRELOAD"] == "libtcmalloc.so.4"


def test_only_training_on_a_cpu_asks_for_it():
    assert trains_on_cpu(["train", "--device", "cpu", "--data", "d"])
    assert trains_on_cpu(["quickstart", "--device=cpu"])
    assert not trains_on_cpu(["train", "--device", "cuda:1"])
    assert not trains_on_cpu(["train", "--device", "cpu", "--help"])
    assert not trains_on_cpu(["translate", "--device", "cpu"])
    assert not trains_on_cpu(["serve"]) and not trains_on_cpu([])


@pytest.mark.skipif(not sys.platform.startswith("linux") or not any(
    map(ctypes.util.find_library, ("tcmalloc_minimal", "tcmalloc"))),
    reason="tcmalloc is not installed (Debian: apt-get install libtcmalloc-minimal4)")
def test_nmt_train_runs_again_with_tcmalloc_once_and_not_when_refused(tmp_path):
    def train(**variables):
        environment = {key: value for key, value in os.environ.items()
                       if key not in ("LD_PRELOAD", "NMT_ALLOCATOR")}
        return subprocess.run(
            [sys.executable, "-m", "transformer_nmt.cli", "train", "--device", "cpu",
             "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run")],
            env={**environment, **variables}, capture_output=True, text=True, timeout=120)

    preloaded = train()
    assert preloaded.stderr.count("memory allocator tcmalloc") == 1  # once, not in a loop
    assert "nmt train: error:" in preloaded.stderr and "missing" in preloaded.stderr
    refused = train(NMT_ALLOCATOR="system")
    assert "tcmalloc" not in refused.stderr and "nmt train: error:" in refused.stderr
