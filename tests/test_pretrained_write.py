"""`nmt import`'s writing (pretrained/write.py), around a stand-in reader: what it cannot
read refused before any work, a user's file kept unless --force, the languages given
replacing those the model records, and the model file written whole. (Each toolkit's
reader: tests/test_pretrained_fairseq.py, test_pretrained_huggingface.py and
test_pretrained_marian.py.)"""

from __future__ import annotations

import pytest

from transformer_nmt.errors import UserError
from transformer_nmt.model_file import read_model_file
from transformer_nmt.pretrained import write
from transformer_nmt.pretrained.write import import_model


@pytest.fixture
def marian(model_file, monkeypatch, tmp_path):
    """A Marian release directory whose reader gives the session's model, recording the
    languages `recorded` holds (none at first)."""
    recorded: dict[str, str] = {}

    def read(path):
        return {**read_model_file(model_file), **recorded}

    monkeypatch.setitem(write.READERS, "marian", read)
    (tmp_path / "release").mkdir()
    return tmp_path / "release", recorded


@pytest.mark.parametrize("source, path, options, says", [
    ("onnx", "release", {}, "cannot import from 'onnx'; choose one of huggingface, marian, "
                            "fairseq"),
    ("marian", "missing", {}, "missing: no such directory"),
    ("fairseq", "missing.pt", {}, "missing.pt: no such file; give the fairseq checkpoint"),
    ("marian", "release", {"bpe_codes": "codes"}, "--bpe-codes are for --from fairseq"),
])
def test_what_cannot_be_read_is_refused_before_any_work(marian, tmp_path, source, path,
                                                        options, says):
    with pytest.raises(UserError, match=says):
        import_model(source, tmp_path / path, tmp_path / "out.pt", **options)
    assert not (tmp_path / "out.pt").exists()


def test_a_users_file_is_kept_unless_forced(marian, tmp_path):
    release, _ = marian
    out = tmp_path / "out.pt"
    out.write_text("mine")
    with pytest.raises(UserError, match="out.pt already exists; choose another --out or "
                                        "pass --force"):
        import_model("marian", release, out)
    assert out.read_text() == "mine"
    payload = import_model("marian", release, out, force=True)
    assert read_model_file(out)["vocab"] == payload["vocab"]


def test_the_languages_given_replace_those_recorded_and_both_are_needed(marian, tmp_path):
    release, recorded = marian
    with pytest.raises(UserError, match="give both --src-lang and --tgt-lang"):
        import_model("marian", release, tmp_path / "a.pt", languages=("en", None))
    assert not (tmp_path / "a.pt").exists()
    recorded.update(src_lang="en", tgt_lang="de")
    import_model("marian", release, tmp_path / "b.pt", languages=(None, "fr"))
    stored = read_model_file(tmp_path / "b.pt")
    assert (stored["src_lang"], stored["tgt_lang"]) == ("en", "fr")
