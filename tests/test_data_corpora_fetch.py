"""fetch on a small made-up corpus: read in place from a local mirror directory, downloaded
from a file:// URL (a mirror's or the home's) into the cache and reused from there, and
its one-line errors."""

import re
from pathlib import Path

import pytest

from transformer_nmt.data.corpora import SourceOptions
from transformer_nmt.data.corpora.fetch import Remote, fetch
from transformer_nmt.errors import UserError

RELATIVE = "data/raw/train.en"
ENV = "NMT_TEST_FETCH_MIRROR"


def missing(root: Path) -> str:
    return f"{root}: no {RELATIVE}"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A corpus's home as a directory holding RELATIVE; no mirror in the environment."""
    monkeypatch.delenv(ENV, raising=False)
    root = tmp_path / "home"
    (root / "data/raw").mkdir(parents=True)
    (root / RELATIVE).write_text("hello\n")
    return root


def remote(url: str = "https://example.invalid/corpus/") -> Remote:
    return Remote(url=url, env=ENV, cache_name="test-corpus", hint="try --mirror")


def test_a_local_mirror_is_read_in_place(home, tmp_path):
    options = SourceOptions(mirror=str(home), cache_dir=tmp_path / "cache")
    assert fetch(options, remote(), RELATIVE, missing) == home / RELATIVE
    assert not (tmp_path / "cache").exists()


def test_a_local_mirror_may_hold_the_file_elsewhere(home, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "train.en").write_text("hello\n")
    options = SourceOptions(mirror=str(flat))
    assert fetch(options, remote(), RELATIVE, missing, also=["train.en"]) == flat / "train.en"
    with pytest.raises(UserError, match=f"^{re.escape(str(flat))}: no {RELATIVE}$"):
        fetch(options, remote(), RELATIVE, missing)


def test_a_url_mirror_is_downloaded_into_the_cache_once(home, tmp_path, monkeypatch):
    # The mirror in the environment counts as --mirror; a cached file is not fetched again,
    # which the mirror's removal proves.
    monkeypatch.setenv(ENV, home.as_uri())
    options = SourceOptions(cache_dir=tmp_path / "cache")
    cached = tmp_path / "cache/test-corpus" / RELATIVE
    assert fetch(options, remote(), RELATIVE, missing) == cached
    assert cached.read_text() == "hello\n" and not list(tmp_path.rglob("*.part"))
    (home / RELATIVE).unlink()
    assert fetch(options, remote(), RELATIVE, missing) == cached
    assert cached.read_text() == "hello\n"


def test_without_a_mirror_the_home_url_is_downloaded(home, tmp_path):
    options = SourceOptions(cache_dir=tmp_path / "cache")
    # A home URL without its trailing slash still names the directory.
    path = fetch(options, remote(home.as_uri()), RELATIVE, missing)
    assert path == tmp_path / "cache/test-corpus" / RELATIVE


def test_a_failed_download_is_one_line_and_leaves_nothing(tmp_path):
    options = SourceOptions(mirror=(tmp_path / "nowhere").as_uri(), cache_dir=tmp_path / "cache")
    with pytest.raises(UserError, match=r"^cannot download file://.*/nowhere/data/raw/train\.en: "
                                        r".*; try --mirror$") as error:
        fetch(options, remote(), RELATIVE, missing)
    assert "\n" not in str(error.value)
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()]
