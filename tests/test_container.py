"""The container recipe (Dockerfile, compose.yaml): what it installs and runs exists in
the project; and, where a container engine answers, the image built and run, serving a
model and answering /ready and a translation. The build needs the network (PyPI and
PyTorch's CPU index); without an engine that answers, that test skips saying why."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from serve_fixtures import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
ENGINES = ("docker", "podman")


def instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_the_torch_pin_it_installs_from_the_cpu_index_is_the_projects():
    [command] = [run for run in instructions("RUN") if "download.pytorch.org/whl/cpu" in run]
    script = re.search(r'python -c "(.*?)" > torch.txt', command).group(1)
    found = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+", found)
    assert f'"{found}"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_what_it_copies_from_the_context_exists_and_is_not_ignored():
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    copies = [copy.split() for copy in instructions("COPY") if not copy.startswith("--from")]
    for *sources, _ in copies:
        for source in sources:
            source = re.sub(r"\$\{MODEL:-(.*)\}", r"\1", source)  # the stand-in
            assert (ROOT / source).exists(), source
            assert {f"!{source}", f"!{source}/"} & set(ignored), source
    assert "!models/" in ignored  # where a baked-in model comes from


def test_it_serves_the_models_directory_with_flags_nmt_serve_takes():
    assert instructions("ENTRYPOINT") == ['["nmt", "serve"]']
    assert instructions("CMD") == ['["--models", "/models"]']
    help_text = subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "serve",
                                "--help"], capture_output=True, text=True, check=True).stdout
    assert "--models DIR" in help_text
    compose = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    for variable in re.findall(r"\b(NMT_[A-Z_]+)[=:]", DOCKERFILE + compose):
        assert variable in help_text, variable
    assert "/ready" in " ".join(instructions("HEALTHCHECK"))
    assert instructions("USER") == ["nmt"]
    assert len(instructions("FROM")) == 2  # a build stage, then the runtime


def engine() -> str | None:
    """The container engine on PATH whose daemon answers, or None."""
    for name in ENGINES:
        if shutil.which(name) and subprocess.run([name, "info"], capture_output=True,
                                                 timeout=60).returncode == 0:
            return name
    return None


def test_the_image_builds_with_a_model_baked_in_and_serves_it(served_model, tmp_path):
    found = engine()
    if found is None:
        pytest.skip(f"no container engine answers ({' or '.join(ENGINES)} info failed or "
                    "is not installed): the image is not built")
    context = tmp_path / "context"
    shutil.copytree(ROOT, context, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__"))
    (context / "models").mkdir(exist_ok=True)
    shutil.copy(served_model, context / "models" / "en-de.pt")
    tag = "transformer-nmt-test:latest"
    built = subprocess.run([found, "build", "--build-arg", "MODEL=models/en-de.pt", "-t", tag,
                            str(context)], capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    port = free_port()
    name = f"nmt-test-{port}"
    subprocess.run([found, "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:8080",
                    tag], check=True, capture_output=True, timeout=120)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the container never became ready"
                time.sleep(1)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/translate", method="POST",
            data=json.dumps({"q": "the dog runs", "source": "en", "target": "de"}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            assert "translatedText" in json.load(response)
    finally:
        subprocess.run([found, "stop", name], capture_output=True, timeout=120)
