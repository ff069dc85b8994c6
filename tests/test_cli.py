"""The `nmt` command itself: how it ends when things outside it go wrong."""

import subprocess
import sys

import pytest
import torch

from transformer_nmt.config import get_preset
from transformer_nmt.data.manifest import SPM_MODEL
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload, save_model_file

from train_fixtures import WORDS


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, tiny_data):
    torch.manual_seed(0)
    model = Transformer(get_preset("tiny").model, 64)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    save_model_file(model_payload(model, (tiny_data / SPM_MODEL).read_bytes()), path)
    return path


def test_a_reader_that_goes_away_ends_translation_quietly(model_file, tmp_path):
    """`nmt translate | head -1`: once head has its line the pipe closes; nmt must stop
    like a Unix filter, without an error message, whatever the number of workers."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{WORDS[i % len(WORDS)]} house\n" for i in range(3000)),
                      encoding="utf-8")
    for workers in ("1", "2"):
        script = (f"{sys.executable} -m transformer_nmt.cli translate --model {model_file} "
                  f"--input {source} --beam 1 --max-len-b 30 --workers {workers} | head -1; "
                  "echo \"status ${PIPESTATUS[0]}\" >&2")
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              timeout=300)
        assert len(done.stdout.splitlines()) == 1
        assert done.stderr.strip().splitlines() == ["status 141"], done.stderr
