"""The wmt14-en-de recipe on the shared newstest files and a small fake mirror: SGML
reading, training text from plain files and archives, and its one-line errors."""

import pytest

from corpus_paths import WMT14, needs_wmt14
from transformer_nmt.data.corpora import SourceOptions, get_corpus
from transformer_nmt.data.corpora.wmt14 import read_sgml, zip_sgml
from transformer_nmt.data.text import read_lines
from transformer_nmt.errors import UserError


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


@needs_wmt14
def test_wmt14_training_text_from_files_and_archives(tmp_path, fake_wmt14_mirror):
    mirror = fake_wmt14_mirror(tmp_path / "mirror")
    corpus = get_corpus("wmt14-en-de", "de", "en", SourceOptions(mirror=str(mirror)))
    train = list(corpus.pairs("train"))
    assert len(train) == 90
    de = list(read_lines(WMT14 / "train-sample10k.tok.de"))
    assert [s for s, _ in train] == de[:90]


def test_wmt14_has_only_english_and_german():
    with pytest.raises(UserError, match="wmt14-en-de has no language 'fr'"):
        get_corpus("wmt14-en-de", "en", "fr")
