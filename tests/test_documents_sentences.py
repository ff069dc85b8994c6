"""Paragraphs cut into sentences and joined back, alignments shifted to the paragraph's
words; and a real tiny model translating a whole document through its Translator."""

from __future__ import annotations

import pytest

from decode_fixtures import SHORT
from document_fixtures import Fake, docx_structure, make_docx
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.documents.formats import translate_file
from transformer_nmt.documents.sentences import (Joined, join_sentences, model_fitting,
                                                 translator_translate)


def test_joined_sentences_shift_their_alignments_to_the_paragraphs_words():
    joined = join_sentences(["The dog runs.", "It sleeps."],
                            [Fake("Der Hund läuft.", [(0, 0), (1, 1), (2, 2)]),
                             Fake("Er schläft.", [(0, 0), (1, 1)])])
    assert joined == Joined("Der Hund läuft. Er schläft.",
                            [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)])


def test_a_sentence_without_alignment_leaves_the_paragraph_without_one():
    assert join_sentences(["One.", "Two."], [Fake("Eins.", [(0, 0)]), "Zwei."]) == \
        Joined("Eins. Zwei.", None)
    assert join_sentences(["One."], [Fake("", None)]) == Joined("", None)


def test_a_real_model_translates_a_word_document_keeping_its_structure(model_file, tmp_path):
    pytest.importorskip("docx")
    translator = Translator.from_file(model_file, TranslatorOptions(SHORT, workers=1))
    translate = translator_translate(translator)
    found = translate(["the house is small . the cat sleeps .", "a dog runs"])
    assert len(found) == 2 and all(result.alignment is not None for result in found)
    source = make_docx(tmp_path / "in.docx")
    target = tmp_path / "out.docx"
    assert translate_file(source, target, translate) == 8
    before, after = docx_structure(source), docx_structure(target)
    assert after.shape == before.shape
    assert after.texts != before.texts and "42" in after.texts


def test_the_length_rule_is_the_models_and_counts_what_it_decodes(model_file):
    translator = Translator.from_file(model_file, TranslatorOptions(SHORT, workers=1))
    fitting = model_fitting(translator)
    assert fitting.limit == translator.src_limit
    assert fitting.encode("the house is small") == \
        translator.vocab.encode("the house is small")
    assert fitting.encode("the house") is fitting.encode("the house")  # encoded once
    assert model_fitting(translator, ">>fra<<").encode("the house") == \
        translator.vocab.encode(">>fra<< the house")
