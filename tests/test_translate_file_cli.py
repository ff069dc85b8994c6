"""`nmt translate --file IN --output OUT`: a whole document, in its own format, on a
tiny random model; its refusals in one line."""

from __future__ import annotations

import pytest

from document_fixtures import make_pptx, pptx_structure
from transformer_nmt.cli import main

FAST = ["--beam", "2", "--max-len-b", "5"]


def test_a_presentation_is_translated_into_output_keeping_its_structure(model_file, tmp_path,
                                                                       capsys):
    pytest.importorskip("pptx")
    source = make_pptx(tmp_path / "slides.pptx")
    output = tmp_path / "out.pptx"
    assert main(["translate", "--model", str(model_file), "--file", str(source),
                 "--output", str(output), *FAST]) == 0
    assert pptx_structure(output).shape == pptx_structure(source).shape
    assert "paragraphs of" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, arguments, says", [
    ("scan.pdf", b"%PDF-1.4", ["--output", "out.pdf"], "PDF is not supported"),
    ("a.docx", b"words", ["--output", "out.docx"], "the name says .docx"),
    ("a.txt", b"words", [], "--file IN needs --output OUT"),
])
def test_refusals_name_the_file_in_one_line(model_file, tmp_path, capsys, monkeypatch, name,
                                            content, arguments, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(content)
    assert main(["translate", "--model", str(model_file), "--file", name, *arguments,
                 *FAST]) == 2
    error = capsys.readouterr().err
    assert says in error and len(error.strip().splitlines()) == 1
    assert not list(tmp_path.glob("out.*"))


def test_the_help_says_which_types(capsys):
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    assert ".docx, .pptx or .odt" in " ".join(capsys.readouterr().out.split())


def test_a_missing_file_is_one_line(model_file, tmp_path, capsys):
    assert main(["translate", "--model", str(model_file), "--file",
                 str(tmp_path / "missing.docx"), "--output", str(tmp_path / "out.docx")]) == 1
    error = capsys.readouterr().err
    assert "missing.docx" in error and len(error.strip().splitlines()) == 1
