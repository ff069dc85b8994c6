"""A model's shortlist (decode/runtime/vmap.py, built by `nmt shortlist`): stored beside
the model with its checksum, a stale or damaged one refused in one line, written as
CTranslate2's vocabulary map; the CTranslate2 runtime and the export use it where present
(the conversion's cache key includes it) and --no-shortlist leaves it out."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from train_fixtures import reversal_pairs
from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.shortlist import LexicalMap, build_map
from transformer_nmt.decode.runtime.ct2_cache import model_key
from transformer_nmt.decode.runtime.vmap import (make_shortlist, read_shortlist, save_shortlist,
                                                 shortlist_path, vmap_text)
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import load_for_inference

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

LINES = [source for source, _ in reversal_pairs(12, seed=5, words=(2, 8))]
VOCAB = 64


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture
def model(trained_model_file, tmp_path) -> Path:
    """A copy of the session's trained model, so that a shortlist beside it stays here."""
    return Path(shutil.copy(trained_model_file, tmp_path / "model.pt"))


def _checksum(path: Path) -> str:
    loaded = load_for_inference(path)
    return model_key(loaded.model, loaded.payload_meta)


def _full_map(vocab: int = VOCAB, without: int | None = None) -> LexicalMap:
    """Every piece for every source piece (but `without`, nowhere)."""
    pieces = np.array([p for p in range(vocab) if p != without], np.int32)
    return LexicalMap(pieces[:0], np.arange(vocab + 1, dtype=np.int64) * len(pieces),
                      np.tile(pieces, vocab))


def _tokens(model: Path, shortlist: bool = True) -> list[list[int]]:
    options = TranslatorOptions(DecodeConfig(beam=4, guard=False), engine="ctranslate2",
                                precision="fp32", workers=1, shortlist=shortlist)
    translator = Translator.from_file(model, options)
    try:
        return [nbest[0].tokens for nbest in translator.translate_nbest(LINES)]
    finally:
        translator.close()


def test_stored_beside_the_model_and_read_back(model, tiny_data, tmp_path):
    path, stats = make_shortlist(model, tiny_data, best=2, frequent=3)
    assert path == tmp_path / "model.shortlist.npz" == shortlist_path(model)
    assert shortlist_path(tmp_path) == tmp_path / "shortlist.npz"  # a safetensors directory
    built, _ = build_map(tiny_data, best=2, frequent=3)
    read = read_shortlist(path, _checksum(model), VOCAB, model)
    for name in ("always", "offsets", "targets"):
        assert np.array_equal(getattr(read, name), getattr(built, name))
    with np.load(path, allow_pickle=False) as stored:
        assert str(stored["checksum"]) == _checksum(model)
        assert int(stored["setting_best"]) == 2 and str(stored["setting_split"]) == "train"


def test_a_stale_or_damaged_shortlist_is_refused_in_one_line(model, tmp_path):
    path = tmp_path / "model.shortlist.npz"
    save_shortlist(path, _full_map(), "0" * 64, {})
    with pytest.raises(UserError, match="shortlist of another model") as stale:
        read_shortlist(path, _checksum(model), VOCAB, model)
    assert "\n" not in str(stale.value) and "nmt shortlist --model" in str(stale.value)
    with pytest.raises(UserError, match="shortlist of another model"):
        Translator.from_file(model, TranslatorOptions(engine="ctranslate2"))
    # PyTorch ignores it, as --no-shortlist leaves it alone.
    assert Translator.from_file(model, TranslatorOptions(engine="torch")).ctranslate2 is None
    Translator.from_file(model, TranslatorOptions(engine="ctranslate2", shortlist=False))
    save_shortlist(path, _full_map(VOCAB - 1), _checksum(model), {})
    with pytest.raises(UserError, match="do not fit a vocabulary of 64"):
        read_shortlist(path, _checksum(model), VOCAB, model)
    path.write_bytes(b"not a shortlist")
    with pytest.raises(UserError, match="damaged shortlist"):
        read_shortlist(path, _checksum(model), VOCAB, model)


def test_the_vmap_format():
    lexical_map = LexicalMap(np.array([3, 4], np.int32),
                             np.array([0, 0, 2, 3, 3, 3, 3, 3, 3], np.int64),
                             np.array([5, 7, 4], np.int32))
    assert vmap_text(lexical_map, str) == "\t3 4\n1\t5 7\n2\t4\n"
    assert vmap_text(lexical_map, lambda i: f"p{i}").splitlines()[1] == "p1\tp5 p7"
    with pytest.raises(UserError, match="whitespace"):
        vmap_text(lexical_map, lambda i: f"p {i}")


def test_a_map_of_every_piece_changes_nothing_one_without_a_used_piece_does(model):
    unrestricted = _tokens(model)  # no shortlist beside it yet
    save_shortlist(shortlist_path(model), _full_map(), _checksum(model), {})
    assert _tokens(model) == unrestricted
    used = max({t for tokens in unrestricted for t in tokens}, key=lambda t: sum(
        tokens.count(t) for tokens in unrestricted))
    save_shortlist(shortlist_path(model), _full_map(without=used), _checksum(model), {})
    restricted = _tokens(model)
    assert all(used not in tokens for tokens in restricted)
    assert _tokens(model, shortlist=False) == unrestricted


def test_the_shortlist_is_part_of_the_conversions_cache_key(model):
    save_shortlist(shortlist_path(model), _full_map(), _checksum(model), {})
    translator = Translator.from_file(model, TranslatorOptions(engine="ctranslate2"))
    with_map = translator.ctranslate2.directory
    assert translator.ctranslate2.use_vmap and "-vmap" in with_map.name
    assert (with_map / "vmap.txt").read_text().startswith("0\t0 1 2 ")
    without = Translator.from_file(model, TranslatorOptions(engine="ctranslate2",
                                                            shortlist=False)).ctranslate2
    assert not without.use_vmap and not (without.directory / "vmap.txt").exists()
