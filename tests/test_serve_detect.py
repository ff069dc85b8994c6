"""Which of the languages the server translates from a text is in (serve/detect.py): the
served languages ranked by the classifier's probability, averaged over texts with letters;
a text without letters claims nothing; without py3langid, a refusal saying what to install."""

from __future__ import annotations

import pytest

from transformer_nmt.serve import detect
from transformer_nmt.serve.detect import (MISSING, DetectionUnavailable, LanguageDetector,
                                          has_letters)

ENGLISH = "A man in a blue shirt is riding his bicycle down the street."
GERMAN = "Ein Mann in einem blauen Hemd fährt mit seinem Fahrrad die Straße hinunter."
FRENCH = "Un homme en chemise bleue descend la rue à vélo."


def test_each_sentence_is_found_in_its_language_among_those_served():
    detector = LanguageDetector(["en", "de", "fr"])
    for sentence, language in ((ENGLISH, "en"), (GERMAN, "de"), (FRENCH, "fr")):
        found = detector.detect([sentence])
        assert [entry["language"] for entry in found][0] == language
        assert found[0]["confidence"] > 90
        assert [entry["confidence"] for entry in found] == sorted(
            (entry["confidence"] for entry in found), reverse=True)


def test_only_served_languages_are_named_with_their_unrenormalized_probability():
    detector = LanguageDetector(["en"])
    [english] = detector.detect([ENGLISH])
    [german] = detector.detect([GERMAN])
    assert english["language"] == german["language"] == "en"
    assert english["confidence"] > 90 and german["confidence"] < 5


def test_several_texts_average_and_regional_codes_use_their_language():
    detector = LanguageDetector(["de-CH", "en"])
    found = detector.detect([GERMAN, ENGLISH])
    assert {entry["language"] for entry in found} == {"de-CH", "en"}
    assert all(40 < entry["confidence"] < 60 for entry in found)
    assert LanguageDetector([]).detect([ENGLISH]) == []


def test_texts_without_letters_count_for_no_language_and_alone_get_confidence_0():
    detector = LanguageDetector(["de", "en"])
    assert detector.detect([ENGLISH, "", "12345 67890", "!?"]) == detector.detect([ENGLISH])
    assert detector.detect(["", "  \n", "3.14"]) == [{"language": "de", "confidence": 0.0}]


def test_at_most_three_candidates_and_only_those_asked_among():
    detector = LanguageDetector(["en", "de", "fr", "es", "en"])
    assert detector.languages == ("en", "de", "fr", "es")
    assert len(detector.detect([ENGLISH])) == detect.MOST_CANDIDATES
    assert [entry["language"] for entry in detector.detect([GERMAN], among=["fr", "de"])] == [
        "de", "fr"]
    assert detector.detect([GERMAN], among=["it"]) == []


def test_letters_of_any_script_count_and_digits_and_marks_do_not():
    assert has_letters("Ж") and has_letters("漢字") and has_letters("a1")
    assert not has_letters("12 + 3 = 15 !?") and not has_letters("")


def test_without_py3langid_a_text_with_letters_is_refused_saying_what_to_install(
        monkeypatch):
    monkeypatch.setattr(detect, "LanguageIdentifier", None)
    detector = LanguageDetector(["en", "de"])
    assert detector.detect(["123"]) == [{"language": "en", "confidence": 0.0}]
    with pytest.raises(DetectionUnavailable, match="pip install") as refused:
        detector.detect([ENGLISH])
    assert str(refused.value) == MISSING
