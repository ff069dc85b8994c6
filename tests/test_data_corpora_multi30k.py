"""The multi30k recipe on the shared mirror: read in place, downloaded from a URL into the
cache, and its one-line errors."""

import pytest

from corpus_paths import MULTI30K, needs_multi30k
from transformer_nmt.data.corpora import SourceOptions, get_corpus
from transformer_nmt.errors import UserError


@needs_multi30k
def test_multi30k_from_a_local_mirror():
    corpus = get_corpus("multi30k", "de", "en", SourceOptions(mirror=str(MULTI30K)))
    sizes = {split: sum(1 for _ in corpus.pairs(split)) for split in corpus.splits}
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    assert next(corpus.pairs("test"))[1] == "A man in an orange hat starring at something."


@needs_multi30k
def test_multi30k_downloads_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NMT_MULTI30K_MIRROR", MULTI30K.resolve().as_uri())
    corpus = get_corpus("multi30k", "en", "fr", SourceOptions(cache_dir=tmp_path))
    assert sum(1 for _ in corpus.pairs("valid")) == 1014
    assert (tmp_path / "multi30k/data/task1/raw/val.fr.gz").is_file()
    assert not list(tmp_path.rglob("*.part"))


def test_multi30k_download_failure_is_one_line(tmp_path):
    corpus = get_corpus("multi30k", "en", "de", SourceOptions(
        mirror=(tmp_path / "nowhere").as_uri(), cache_dir=tmp_path / "cache"))
    with pytest.raises(UserError, match=r"cannot download .*val\.en\.gz.*; set mirror") as error:
        next(corpus.pairs("valid"))
    assert "\n" not in str(error.value)
    with pytest.raises(UserError, match="no such file; the mirror must be a copy"):
        next(get_corpus("multi30k", "en", "de", SourceOptions(mirror=str(tmp_path))).pairs("test"))
