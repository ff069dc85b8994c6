"""The test session's settings and the fixtures shared by test modules."""

import atexit
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import torch

from corpus_paths import WMT14
from decode_fixtures import make_model_file
from distill_fixtures import options, run
from train_fixtures import make_tiny_data, tiny_overrides

# Tiny models run 5-20x slower on 2 threads than on 1 when the 2 cores are shared with
# other processes (OpenMP threads wait on each other): the whole session uses one, set
# here once. No library code changes the thread count behind a test's back.
torch.set_num_threads(1)
# The same for the commands the tests start (nmt serve, translate, train in a subprocess),
# whose OpenMP threads would otherwise wait on each other beside the session's own work.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# What training's precision 'auto' measures about the machine is cached; the tests (and
# the commands they start) keep theirs aside rather than in the user's cache, and remove
# it when the process ends (each xdist worker has its own).
os.environ["NMT_CACHE_DIR"] = tempfile.mkdtemp(prefix="nmt-test-cache-")
atexit.register(shutil.rmtree, os.environ["NMT_CACHE_DIR"], ignore_errors=True)
from transformer_nmt.config import get_preset
from transformer_nmt.data.manifest import SPM_MODEL
from transformer_nmt.data.text import read_lines
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import model_payload, save_model_file
from transformer_nmt.training.checkpoint import LAST
from transformer_nmt.training.session import train

WORKER_GROUPS = {"tests/test_cli_distill.py": "distilled",
                 "tests/test_distill_export.py": "distilled",
                 "tests/test_distill_pipeline.py": "distilled",
                 "tests/test_pretrained_huggingface.py": "marian",
                 "tests/test_pretrained_marian.py": "marian",
                 "tests/test_pretrained_separate_vocabs.py": "marian",
                 "tests/test_serve_multilingual.py": "marian"}
"""Modules that `--dist loadscope` (pyproject.toml) sends to one xdist worker together,
because they share a costly session fixture (`distilled`) that each worker would
otherwise build for itself, or a costly import (transformers' MarianMTModel, which
brings much of PyTorch's compiler with it)."""


LONGEST_FIRST = ("tests/test_training_distributed.py", "marian", "tests/test_serve_server.py",
                 "tests/test_cli_train.py", "tests/test_interrupts.py", "distilled",
                 "tests/test_serve_page.py", "tests/test_cli_quickstart.py",
                 "tests/test_corpus.py", "tests/test_training_memory.py",
                 "tests/test_signals_ignored.py", "tests/test_serve_models.py")
"""The scopes that take longest (their --durations; bench/RESULTS.md), handed out
before the others: xdist hands out the scopes with the most tests first, and these have
few, so that one worker ran a long one at the end while the other had finished. A hint
only: a scope missing here, or gone, is scheduled as xdist would."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's loadscope scheduling (each module's tests in one worker), WORKER_GROUPS'
    modules as one, LONGEST_FIRST's first; None (xdist's own choice) for any other
    --dist."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return WORKER_GROUPS.get(module, module)

        def _assign_work_unit(self, node) -> None:
            longest = next((scope for scope in LONGEST_FIRST if scope in self.workqueue), None)
            if longest is not None:
                self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


@pytest.fixture
def fake_wmt14_mirror() -> Callable[..., Path]:
    """A function making a small WMT14 mirror at `root`: stand-ins of `lines` pairs for
    the three training corpora (Europarl and News Commentary as plain files, Common Crawl
    inside its .tgz archive, as a real mirror may hold them) and links to the shared
    newstest files. A factory, because tests choose where and how big."""

    def make(root: Path, lines: int = 30) -> Path:
        en = list(read_lines(WMT14 / "train-sample10k.tok.en"))
        de = list(read_lines(WMT14 / "train-sample10k.tok.de"))
        root.mkdir(exist_ok=True)
        (root / "training").mkdir(exist_ok=True)
        for lang, text in (("en", en), ("de", de)):
            (root / f"europarl-v7.de-en.{lang}").write_text("\n".join(text[:lines]) + "\n")
            (root / "training" / f"news-commentary-v9.de-en.{lang}").write_text(
                "\n".join(text[2 * lines:3 * lines]) + "\n")
        with tarfile.open(root / "training-parallel-commoncrawl.tgz", "w:gz") as tar:
            for lang, text in (("en", en), ("de", de)):
                data = ("\n".join(text[lines:2 * lines]) + "\n").encode()
                info = tarfile.TarInfo(f"commoncrawl.de-en.{lang}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for name in ("newstest2013.en", "newstest2013.de", "newstest2014-deen-src.en.sgm",
                     "newstest2014-deen-ref.de.sgm"):
            (root / name).symlink_to((WMT14 / name).resolve())
        return root

    return make


@pytest.fixture
def keep_torch_threads():
    """CTranslate2 sets the OpenMP thread count it shares with torch: put torch's back
    after a test that runs it, or later tests in this process (bit-exact resume) would run
    on other threads. Modules that run CTranslate2 use it on every test (pytestmark)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A data directory of 240 train and 24 valid pairs of a toy copy-and-reverse task,
    vocabulary 64; prepared once per test session (about a second)."""
    return make_tiny_data(tmp_path_factory.mktemp("train-data"))


@pytest.fixture(scope="session")
def model_file(tmp_path_factory) -> Path:
    """A tiny random model file with 256 positions and a 60-piece vocabulary, made once
    per test session (modules that need another model define their own)."""
    return make_model_file(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def served_model(model_file, tmp_path_factory) -> Path:
    """The session's model file recorded as translating English to German, as the
    server tests serve it (a copy: the model file itself stays as it is)."""
    from serve_fixtures import with_languages  # the server's modules, for its tests only
    return with_languages(model_file, tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="session")
def tiny_model_file(tmp_path_factory, tiny_data) -> Path:
    """A random tiny-preset model with `tiny_data`'s 64-piece vocabulary, made once per
    test session: for tests of what happens around a model, not of what it translates."""
    torch.manual_seed(0)
    model = Transformer(get_preset("tiny").model, 64)
    path = tmp_path_factory.mktemp("tiny-model") / "model.pt"
    save_model_file(model_payload(model, (tiny_data / SPM_MODEL).read_bytes()), path)
    return path


@pytest.fixture(scope="session")
def trained_model_file(tiny_data, tmp_path_factory) -> Path:
    """A tiny model trained for a few seconds on `tiny_data`'s copy-and-reverse task, made
    once per test session: its outputs vary with the source and end by themselves, and
    most of its choices are clear enough to survive a reduced precision, unlike a random
    model's."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    train(out=run_dir, data=tiny_data, preset="tiny", progress=False,
          overrides=tiny_overrides(max_steps=300, batch_tokens=256, dropout=0.0))
    return run_dir / LAST


@pytest.fixture(scope="session")
def distilled(trained_model_file, tiny_data, tmp_path_factory):
    """(DIR, report, log) of `trained_model_file` distilled into a few steps of a narrow
    student, without exports, once per test session (about 12 seconds): tests change a
    copy of DIR (distill_fixtures.copy_of)."""
    out = tmp_path_factory.mktemp("distill") / "out"
    report, log = run(options(trained_model_file, tiny_data, out))
    return out, report, log
