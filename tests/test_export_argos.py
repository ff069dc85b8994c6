"""Export to an Argos Translate package (export/argos.py): argostranslate's own package
API installs it into a temporary directory and translates with it, as we do.

argostranslate reads its directories from the environment when it is imported, so it runs
in a child process with HOME, XDG_* and ARGOS_PACKAGES_DIR pointing into tmp_path. Its
default sentence splitter (MiniSBD) downloads a model on first use, which a machine
without internet cannot; the child gives the installed translation a splitter that keeps
each line whole, so that everything else is argostranslate's own path: the package's
metadata, its sentencepiece model, and CTranslate2 on its model directory."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from export_fixtures import our_tokens, task_sentences
from transformer_nmt.cli import main
from transformer_nmt.config import DecodeConfig
from transformer_nmt.errors import UserError
from transformer_nmt.model_dir import EXPORT_FORMAT_VERSION, EXPORT_VERSION_KEY
from transformer_nmt.model_file import load_for_inference

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

from transformer_nmt.export.argos import export_argos  # noqa: E402

NO_ARGOS = importlib.util.find_spec("argostranslate") is None

CHILD = """
import json, sys
from argostranslate import package, translate

package.install_from_path(sys.argv[1])
installed = [(p.from_code, p.to_code, p.package_version) for p in package.get_installed_packages()]
translation = translate.get_translation_from_codes("en", "xx")

class WholeLines:
    def split_sentences(self, text):
        return [text]

translation.underlying.sentencizer = WholeLines()
lines = json.loads(sys.stdin.read())
print(json.dumps({"installed": installed, "translations": [translation.translate(line) for line in lines]}))
"""


def argos_child(package: Path, lines: list[str], home: Path) -> dict:
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
           "ARGOS_PACKAGES_DIR": str(home / "packages"), "ARGOS_DEVICE_TYPE": "cpu"}
    child = subprocess.run([sys.executable, "-c", CHILD, str(package)], input=json.dumps(lines),
                           capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(NO_ARGOS, reason="argostranslate is not installed (pip install "
                    "'transformer-nmt[argos]'; not in `all`: it pulls stanza, spacy and "
                    "onnxruntime)")
def test_argostranslate_installs_the_package_and_translates_as_we_do(trained_model_file,
                                                                     tiny_data, tmp_path):
    package = export_argos(trained_model_file, tmp_path / "en_xx.argosmodel")
    lines = task_sentences(tiny_data)[:12]
    found = argos_child(package, lines, tmp_path / "home")
    assert found["installed"] == [["en", "xx", "1.0"]]
    assert (tmp_path / "home" / "packages" / "en_xx" / "model" / "model.bin").is_file()
    vocab = load_for_inference(trained_model_file).vocab
    # Argos Translate searches with beam 4 and CTranslate2's length penalty 0.2.
    ours = [vocab.decode(tokens) for tokens in
            our_tokens(trained_model_file, lines, DecodeConfig(beam=4, alpha=0.2))]
    assert found["translations"] == ours
    assert all(found["translations"])


def test_the_package_holds_the_model_the_vocabulary_and_metadata(trained_model_file, tmp_path,
                                                                  capsys):
    out = tmp_path / "en_xx.argosmodel"
    assert main(["export", "--model", str(trained_model_file), "--to", "argos", str(out),
                 "--package-version", "2.1"]) == 0
    assert "install_from_path" in capsys.readouterr().out
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        metadata = json.loads(archive.read("en_xx/metadata.json"))
    assert {"en_xx/model/model.bin", "en_xx/model/shared_vocabulary.json",
            "en_xx/sentencepiece.model", "en_xx/metadata.json"} <= names
    assert (metadata["from_code"], metadata["to_code"], metadata["package_version"],
            metadata["type"]) == ("en", "xx", "2.1", "translate")
    record = metadata["transformer_nmt"]
    assert (record["preset"], record["training_steps"]) == ("tiny", 300)
    assert record[EXPORT_VERSION_KEY] == EXPORT_FORMAT_VERSION
    with zipfile.ZipFile(out) as archive:  # the CTranslate2 model inside carries it too
        inner = json.loads(archive.read("en_xx/model/transformer_nmt.json"))
    assert inner[EXPORT_VERSION_KEY] == EXPORT_FORMAT_VERSION


def test_a_model_without_languages_needs_the_codes(model_file, tmp_path):
    with pytest.raises(UserError, match="does not record its source language; give it with "
                       "--from-code"):
        export_argos(model_file, tmp_path / "p.argosmodel")
    out = export_argos(model_file, tmp_path / "p.argosmodel", from_code="en", to_code="de")
    with zipfile.ZipFile(out) as archive:
        assert json.loads(archive.read("p/metadata.json"))["from_code"] == "en"


def test_the_name_must_end_in_argosmodel_and_an_existing_file_is_kept(model_file, tmp_path):
    with pytest.raises(UserError, match="ends with .argosmodel"):
        export_argos(model_file, tmp_path / "p.zip", from_code="en", to_code="de")
    out = tmp_path / "p.argosmodel"
    out.write_text("mine")
    with pytest.raises(UserError, match="already exists"):
        export_argos(model_file, out, from_code="en", to_code="de")
    assert out.read_text() == "mine"
