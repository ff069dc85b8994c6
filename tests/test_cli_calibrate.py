"""`nmt calibrate` (cli/calibrate.py): its help, and its mistakes as one-line errors."""

from __future__ import annotations

import pytest

from transformer_nmt.cli import main


def test_the_command_and_its_mistakes(tiny_model_file, tiny_data, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["calibrate", "--help"])
    assert stopped.value.code == 0 and "chrF2" in capsys.readouterr().out
    assert main(["calibrate", "--model", str(tiny_model_file), "--data", str(tiny_data),
                 "--threshold", "150"]) == 2
    assert "--threshold" in capsys.readouterr().err
    assert main(["calibrate", "--model", str(tiny_model_file), "--data", str(tiny_data),
                 "--split", "nowhere", "--out", str(tmp_path / "m.pt")]) == 2
    assert "no such file" in capsys.readouterr().err
