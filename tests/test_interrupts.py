"""Commands stopped while they build a file or directory (interrupts.py, with
files.py's temporaries): SIGTERM and SIGINT remove what was being built and end with one
line; what a SIGKILLed one left is removed by the next run into the same place; a signal
while `nmt translate` imports torch and loads its model takes effect once they are done.

Each command runs in a child process, with the step that writes its output made to stop
there (print "building" and sleep), so that the signal always arrives mid-build."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from signal_fixtures import DEFAULT_SIGINT, default_sigint
from transformer_nmt.cli import main
from transformer_nmt.interrupts import Terminated, sigterm_unwinds, stop_signals_held

HAS_CTRANSLATE2 = importlib.util.find_spec("ctranslate2") is not None
HAS_SAFETENSORS = importlib.util.find_spec("safetensors") is not None

CHILD = """
import sys, time
import {module} as where
from transformer_nmt.cli import main

write = where.{function}

def write_then_stop(*args, **kwargs):
    write(*args, **kwargs)
    print("building", flush=True)
    time.sleep(120)

where.{function} = write_then_stop
sys.exit(main(sys.argv[1:]))
"""

COMMANDS = {
    # command: (module, function that writes the output, arguments(model, output), output)
    # The average's model file is written by torch.save into a files.AtomicFile.
    "average": ("torch", "save", lambda model, output: [
        "average", str(model), str(model), "--out", str(output)], "average.pt"),
    "safetensors": ("transformer_nmt.export.safetensors", "write_model_dir",
                    lambda model, output: ["export", "--model", str(model), "--to",
                                           "safetensors", str(output)], "model-st"),
    "ctranslate2": ("transformer_nmt.export.ctranslate2", "write_ctranslate2",
                    lambda model, output: ["export", "--model", str(model), "--to",
                                           "ctranslate2", str(output)], "model-ct2"),
    "argos": ("transformer_nmt.export.argos", "write_ctranslate2",
              lambda model, output: ["export", "--model", str(model), "--to", "argos",
                                     str(output), "--from-code", "en", "--to-code", "de"],
              "en_de.argosmodel"),
    # The translations are written by a data.text.LineWriter into a files.AtomicFile.
    "translate": ("transformer_nmt.decode.text.output", "format_translations",
                  lambda model, output: ["translate", "--model", str(model), "--input",
                                         str(model.parent / "corpus.txt"), "--output",
                                         str(output)], "translation.txt"),
}
NEEDS = {"safetensors": HAS_SAFETENSORS, "ctranslate2": HAS_CTRANSLATE2,
         "argos": HAS_CTRANSLATE2}


def commands(*names: str) -> list:
    return [pytest.param(name, marks=pytest.mark.skipif(
        not NEEDS.get(name, True), reason=f"the extra {name} needs is not installed"))
        for name in names]


def arguments(command: str, model: Path, out: Path) -> list[str]:
    """The command line of `command` writing its output into the directory `out`."""
    _, _, make, output = COMMANDS[command]
    return make(model, out / output)


def stopped_mid_build(command: str, model: Path, out: Path) -> subprocess.Popen:
    """The child running `command` into the directory `out`, once it is mid-build."""
    module, function, _, _ = COMMANDS[command]
    out.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", DEFAULT_SIGINT + CHILD.format(module=module, function=function),
         *arguments(command, model, out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "building", child.communicate()[1]
    assert any(path.name.startswith(".") for path in out.iterdir()), "nothing being built"
    return child


@pytest.mark.parametrize("command", commands(*COMMANDS))
def test_sigterm_removes_what_was_being_built_and_says_so_in_one_line(command, model_file,
                                                                      tmp_path):
    out = tmp_path / "out"
    child = stopped_mid_build(command, model_file, out)
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.splitlines()[-1] == f"nmt {arguments(command, model_file, out)[0]}: terminated"
    assert "Traceback" not in stderr
    assert list(out.iterdir()) == []


@pytest.mark.sigint
@pytest.mark.parametrize("command", commands("average"))
def test_sigint_removes_what_was_being_built(command, model_file, tmp_path):
    out = tmp_path / "out"
    child = stopped_mid_build(command, model_file, out)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 130 and stderr.splitlines()[-1].endswith(": interrupted")
    assert list(out.iterdir()) == []


# A file (files.AtomicFile, as translate's and every model file's) and a directory built
# aside (files.temporary_directory, as every export's).
@pytest.mark.parametrize("command", commands("average", "argos"))
def test_the_next_run_removes_what_a_killed_one_left(command, model_file, tmp_path, capsys):
    out = tmp_path / "out"
    child = stopped_mid_build(command, model_file, out)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    left = [path.name for path in out.iterdir()]
    assert left and all(name.startswith(".") and name.endswith(".tmp") for name in left)
    # Another output's leftover beside it is not this run's to remove.
    (out / ".other.1.abc.tmp").write_text("another output's")
    assert main(arguments(command, model_file, out)) == 0, capsys.readouterr().err
    assert sorted(path.name for path in out.iterdir()) == [".other.1.abc.tmp",
                                                           COMMANDS[command][3]]


def test_sigterm_raises_terminated_inside_and_gets_its_handler_back_outside():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with sigterm_unwinds():
            signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("number, raised", [
    pytest.param(signal.SIGINT, KeyboardInterrupt, marks=pytest.mark.sigint),
    (signal.SIGTERM, Terminated)])
def test_a_signal_inside_stop_signals_held_is_raised_once_the_body_is_done(number, raised):
    done = []
    with pytest.raises(raised):
        with default_sigint(), sigterm_unwinds(), stop_signals_held():
            signal.raise_signal(number)
            done.append("the body")
    assert done == ["the body"]


LOAD_INTERRUPTED = """
import os, signal, sys, time
from transformer_nmt.cli import main
from transformer_nmt.decode.text.translator import Translator

load = Translator.from_files.__func__

def interrupted_while_loading(cls, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, while torch code runs
    time.sleep(0.2)
    translator = load(cls, *args, **kwargs)
    print("loaded", flush=True)
    return translator

Translator.from_files = classmethod(interrupted_while_loading)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.sigint
def test_ctrl_c_while_the_model_loads_ends_translate_once_it_has_loaded(model_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", DEFAULT_SIGINT + LOAD_INTERRUPTED,
         *arguments("translate", model_file, out)], capture_output=True, text=True, timeout=120)
    assert child.stdout == "loaded\n" and child.returncode == 130, child.stderr
    assert child.stderr.splitlines() == ["nmt translate: interrupted"]
    assert list(out.iterdir()) == []
