"""A request's work without the HTTP (serve/service.py): its limits, its sentences, the
reassembly of their translations; and the one rule for an overlong sentence, the same
through the server's texts and files and through `nmt translate --file`."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient

from decode_fixtures import make_model_file
from serve_fixtures import FAST, make_app, with_languages
from transformer_nmt.cli import main
from transformer_nmt.data.text import normalize
from transformer_nmt.decode.text.job import Translation
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.serve.batcher import Batcher
from transformer_nmt.serve.service import Search, TooLarge, TranslationService
from transformer_nmt.serve.settings import ServeSettings

OVERLONG = " ".join(["the dog runs in the green garden and the cat sleeps on a warm roof"] * 3)
"""Far more subword tokens than the short model's 17."""


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """An English-German model of 24 positions: with FAST's outputs of up to the
    input + 6 tokens, a sentence of more than 17 tokens is too long for it."""
    directory = tmp_path_factory.mktemp("short")
    return with_languages(make_model_file(directory, max_positions=24), directory / "served")


class EchoBatcher:
    """A batcher whose translation of a sentence is the sentence in brackets; it notes
    what it was given."""

    def __init__(self) -> None:
        self.items: list = []
        self.tokens: list[int] = []
        self.in_decoder: list = []

    async def translate(self, items, tokens, key):
        self.items += items
        self.tokens += tokens
        return [[Translation(f"[{item}]", 0.0, [])] for item in items]

    async def run_in_decoder(self, function, *args):
        self.in_decoder.append(args)
        return [None] * len(args[0])


def service_of(model, **settings) -> tuple[TranslationService, EchoBatcher]:
    translator = Translator.from_file(model, FAST)
    batcher = EchoBatcher()
    return TranslationService(translator, batcher, ServeSettings(**settings), "en"), batcher


def test_texts_come_back_in_their_frame_sentence_by_sentence(short_model):
    service, batcher = service_of(short_model)
    texts = ["the dog runs . the cat sleeps .\n\n  a warm roof  ", "", "   "]
    results = asyncio.run(service.translate_texts(texts, Search()))
    assert batcher.items == ["the dog runs .", "the cat sleeps .", "a warm roof"]
    assert [result["text"] for result in results] == [
        "[the dog runs .] [the cat sleeps .]\n\n  [a warm roof]  ", "", "   "]
    assert [s["source"] for s in results[0]["sentences"]] == batcher.items


def test_sentences_cut_already_are_not_cut_again(short_model):
    service, batcher = service_of(short_model)
    asyncio.run(service.translate_texts(["the dog runs . a cat ."],
                                        Search(already_split=True)))
    assert batcher.items == ["the dog runs . a cat ."]


@pytest.mark.parametrize("already_split", [False, True])
def test_an_overlong_sentence_is_halved_and_no_text_is_lost(short_model, already_split):
    service, batcher = service_of(short_model)
    [result] = asyncio.run(service.translate_texts([OVERLONG], Search(
        already_split=already_split)))
    limit = service.translator.src_limit
    assert len(batcher.items) > 1 and all(count <= limit for count in batcher.tokens)
    assert " ".join(batcher.items) == OVERLONG
    assert result["text"] == " ".join(f"[{item}]" for item in batcher.items)


def test_each_sentence_is_encoded_once_and_its_ids_reach_the_attention(short_model,
                                                                       monkeypatch):
    service, batcher = service_of(short_model)
    vocab = service.translator.vocab
    encoded = []

    def counting(texts, **options):
        encoded.extend(texts)
        return type(vocab).encode_batch(vocab, texts, **options)
    monkeypatch.setattr(vocab, "encode_batch", counting)
    asyncio.run(service.translate_texts(["the dog runs . the cat sleeps ."],
                                        Search(attention=True)))
    assert sorted(encoded) == ["the cat sleeps .", "the dog runs ."]
    [(ids, _)] = batcher.in_decoder
    assert ids == [type(vocab).encode(vocab, normalize(sentence))
                   for sentence in batcher.items]
    assert batcher.tokens == [len(sentence_ids) for sentence_ids in ids]


def test_requests_over_the_limits_are_refused_naming_them(short_model):
    service, batcher = service_of(short_model, max_characters=30, max_sentences=2)
    with pytest.raises(TooLarge, match="max_characters"):
        asyncio.run(service.translate_texts(["x" * 31], Search()))
    with pytest.raises(TooLarge, match="max_sentences"):
        asyncio.run(service.translate_texts(["a dog . a cat . a roof ."], Search()))
    assert batcher.items == []


def test_an_overlong_sentence_is_cut_alike_by_the_server_and_translate_file(
        short_model, tmp_path, monkeypatch):
    """The one rule: the server's text, the server's file and `nmt translate --file`
    send the model the same parts of a sentence too long for it, all its words."""
    served: list[str] = []
    real_translate = Batcher.translate

    async def noting(self, lines, tokens, key):
        served.extend(lines)
        return await real_translate(self, lines, tokens, key)
    monkeypatch.setattr(Batcher, "translate", noting)
    text = f"the house is small . {OVERLONG} ."
    with TestClient(make_app(short_model)) as client:
        answer = client.post("/v1/translate", json={"text": text})
        assert answer.status_code == 200
        from_text, served[:] = list(served), []
        upload = client.post("/translate_file", files={"file": ("a.txt", text.encode())},
                             data={"source": "en", "target": "de"})
        assert upload.status_code == 200
        from_file = list(served)

    decoded: list[str] = []
    real_nbest = Translator.translate_nbest

    def noting_nbest(self, lines, *args, **kwargs):
        lines = list(lines)
        decoded.extend(lines)
        return real_nbest(self, lines, *args, **kwargs)
    monkeypatch.setattr(Translator, "translate_nbest", noting_nbest)
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    assert main(["translate", "--model", str(short_model), "--file", str(tmp_path / "a.txt"),
                 "--output", str(tmp_path / "out.txt"), "--beam", "2", "--max-len-b",
                 "6"]) == 0
    assert from_text == from_file == decoded
    assert len(decoded) > 2 and " ".join(decoded).split() == text.split()
