"""The container recipe (Dockerfile): what it installs and runs exists in the project.
Building the image needs a Docker daemon and the network; these checks need neither."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_the_torch_pin_it_installs_from_the_cpu_index_is_the_projects():
    [command] = [run for run in instructions("RUN") if "download.pytorch.org/whl/cpu" in run]
    script = re.search(r'python -c "(.*?)" > /tmp/torch.txt', command).group(1)
    found = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+", found)
    assert f'"{found}"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_what_it_copies_exists_and_is_not_ignored():
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    for copy in instructions("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert {f"!{source}", f"!{source}/"} & set(ignored), source


def test_it_serves_the_models_directory_with_flags_nmt_serve_takes(tmp_path):
    assert instructions("ENTRYPOINT") == ['["nmt", "serve"]']
    assert instructions("CMD") == ['["--models", "/models"]']
    help_text = subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "serve",
                                "--help"], capture_output=True, text=True, check=True).stdout
    assert "--models DIR" in help_text
    for variable in re.findall(r"\b(NMT_[A-Z_]+)=", DOCKERFILE):
        assert variable in help_text, variable
    assert "/ready" in " ".join(instructions("HEALTHCHECK"))
    assert instructions("USER") == ["nmt"]
