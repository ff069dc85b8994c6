"""What `nmt distill` does and from what (distill/options.py): its defaults, and every
option that cannot be run refused in one line naming the flag, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from distill_fixtures import options
from transformer_nmt.distill.options import DEFAULT_QUANTIZATION, DistillOptions
from transformer_nmt.errors import UserError


def test_the_defaults_are_a_tiny_student_from_beam_4_exported_to_ctranslate2():
    chosen = DistillOptions(("t.pt",), Path("data"), Path("out"))
    assert (chosen.student, chosen.beam, chosen.nbest, chosen.drop) == ("student-tiny", 4, 4,
                                                                        0.05)
    assert chosen.average_last == 2  # a short run still improving, as the quickstart's
    assert (chosen.exports, chosen.quantization, chosen.backend) == (
        ("ctranslate2",), DEFAULT_QUANTIZATION, "local")
    exported = DistillOptions(("t.pt",), Path("data"), Path("out"), exports=("ctranslate2",),
                              quantization="float16")
    assert exported.quantization == "float16"  # with an export, any of CTranslate2's types


@pytest.mark.parametrize("changes, message", [
    ({"drop": 1.5}, "--drop is a share of the sentences, from 0 to 1, not 1.5"),
    ({"nbest": 5}, "--nbest 5 is more candidates than --beam 2"),
    ({"teachers": ()}, "give at least one --teacher"),
    ({"average_last": 0}, "--average-last must be at least 1, not 0"),
    ({"shard_lines": 0}, "--shard-lines must be at least 1, not 0"),
    ({"workers": 0}, "--workers must be at least 1, not 0"),
    ({"backend": "slurm"}, "backend must be one of 'local', 'ray', not 'slurm'"),
    ({"quantization": "float16", "exports": ()}, "--quantization float16 is for the export "
                                                 "stage, which --export none skips"),
    ({"exports": ("argos", "argos")}, "--export argos argos names a format twice"),
    ({"exports": ("onnx",)}, "--export 'onnx' is not a format nmt distill exports to; "
                             "give ctranslate2 or argos"),
])
def test_bad_options_are_refused_in_one_line(tmp_path, changes, message):
    with pytest.raises(UserError, match=message):
        options(tmp_path / "t.pt", tmp_path, tmp_path / "out", **changes)
