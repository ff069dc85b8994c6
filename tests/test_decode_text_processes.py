"""Batches translated by worker processes: the same Translations as threads give, the
choice between them, and a worker that cannot start."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from decode_fixtures import SHORT, sentences

from transformer_nmt.cli import main
from transformer_nmt.decode.text import translator as translator_module
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import load_for_inference

# fp32: threads and processes then run the same kernels on one thread per batch, so
# their numbers agree to the last bit on every CPU.
OPTIONS = TranslatorOptions(decode=SHORT, engine="torch", device="cpu", precision="fp32",
                            workers=2, batch_size=4)


def _translations(model_file, lines, **options):
    translator = Translator.from_files([model_file], replace(OPTIONS, **options))
    try:
        return list(translator.translate_nbest(lines, alignments=True, token_scores=True)), \
            translator
    finally:
        translator.close()


def test_processes_give_the_translations_threads_give(model_file):
    lines = sentences(24, seed=3) + ["", "the cat"]
    in_threads, _ = _translations(model_file, lines, worker_processes=False)
    in_processes, translator = _translations(model_file, lines, worker_processes=True)
    assert in_processes == in_threads
    assert in_processes[24][0].text == ""  # an empty line is not sent to a process
    assert translator._processes is None  # closed


def test_the_default_takes_processes_for_a_long_enough_call_until_one_dies(model_file,
                                                                          monkeypatch):
    translator = Translator.from_files([model_file], OPTIONS)
    try:
        monkeypatch.setattr(translator_module, "PROCESSES_FROM_LINES", 12)
        list(translator.translate(sentences(8)))
        assert translator._processes is None
        list(translator.translate(sentences(12)))
        assert translator._processes is not None
        # Once started, they translate every call of several batches.
        started = translator._processes
        list(translator.translate(sentences(8)))
        assert translator._processes is started
        # A process that dies (killed, out of memory) is one clear error.
        for process in started._pool._processes.values():
            process.kill()
        with pytest.raises(UserError, match="decoding worker process ended"):
            list(translator.translate(sentences(12)))
        assert translator._processes is None
    finally:
        translator.close()


def test_the_default_keeps_a_large_model_in_threads(model_file, monkeypatch):
    translator = Translator.from_files([model_file], OPTIONS)
    monkeypatch.setattr(translator_module, "PROCESSES_FROM_LINES", 12)
    monkeypatch.setattr(translator_module, "PROCESSES_MOST_PARAMETERS", translator.parameters - 1)
    list(translator.translate(sentences(12)))
    assert translator._processes is None


def test_a_model_given_in_memory_or_one_worker_is_translated_in_threads(model_file):
    in_memory = Translator(load_for_inference(model_file, "cpu"),
                           replace(OPTIONS, worker_processes=True))
    list(in_memory.translate(sentences(12)))
    assert in_memory._processes is None
    alone = Translator.from_files([model_file], replace(OPTIONS, workers=1,
                                                        worker_processes=True))
    list(alone.translate(sentences(12)))
    assert alone._processes is None


def test_workers_that_cannot_load_the_model_give_its_error(model_file, tmp_path):
    copy = tmp_path / "model.pt"
    shutil.copy(model_file, copy)
    translator = Translator.from_files([copy], replace(OPTIONS, worker_processes=True))
    copy.unlink()  # the workers load the file after the parent did
    with pytest.raises(UserError, match=str(copy)):
        list(translator.translate(sentences(12)))
    assert translator._processes is None


def test_nmt_translate_with_and_without_worker_processes(model_file, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sentences(16, seed=5)) + "\n", encoding="utf-8")
    outputs = []
    for flag in ("--worker-processes", "--no-worker-processes"):
        out = tmp_path / f"out{flag}.txt"
        assert main(["translate", "--model", str(model_file), "--input", str(source),
                     "--output", str(out), "--precision", "fp32", "--workers", "2",
                     "--batch-size", "4", "--beam", "2", "--max-len-b", "6", flag]) == 0
        outputs.append(out.read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1]
    assert len(outputs[0].splitlines()) == 16


PARENT = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from transformer_nmt.decode.text.processes import enter_worker_process

if __name__ == "__main__":
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                               initializer=enter_worker_process, initargs=(1,))
    pids = {pool.submit(os.getpid).result() for _ in range(8)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie waiting to be reaped,
    re-parented where nobody reaps, has)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_with_a_parent_killed_outright(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT, encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert workers and all(_running(pid) for pid in workers)
    finally:
        parent.kill()  # SIGKILL to the parent alone, as the OOM killer sends it
        parent.wait()
    deadline = time.monotonic() + 60  # generous: they look every second
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in workers)
