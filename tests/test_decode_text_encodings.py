"""Lines' subword ids, the newest kept (decode/text/encodings.py): a text encoded lately
is not encoded again, texts new to it are encoded together once, and the oldest are
forgotten past ENCODINGS_KEPT."""

from __future__ import annotations

from transformer_nmt.decode.text import encodings
from transformer_nmt.decode.text.encodings import EncodingCache


class CountingVocab:
    """A vocabulary whose ids are the texts' character codes, counting what it encodes."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.calls.append(list(texts))
        return [[ord(char) for char in text] for text in texts]


def test_texts_encoded_lately_are_not_encoded_again():
    vocab = CountingVocab()
    cache = EncodingCache(vocab)
    assert cache.encode(["ab", "c", "ab"]) == [[97, 98], [99], [97, 98]]
    assert vocab.calls == [["ab", "c"]]  # each new text once, all of them in one call
    assert cache.encode(["c", "d", "ab"]) == [[99], [100], [97, 98]]
    assert vocab.calls == [["ab", "c"], ["d"]]
    assert cache.encode(["d"]) == [[100]] and len(vocab.calls) == 2


def test_each_caller_gets_lists_of_its_own():
    cache = EncodingCache(CountingVocab())
    first = cache.encode(["ab"])
    first[0].append(2)  # as a caller appends EOS
    assert cache.encode(["ab"]) == [[97, 98]]


def test_the_oldest_are_forgotten_past_the_limit(monkeypatch):
    monkeypatch.setattr(encodings, "ENCODINGS_KEPT", 2)
    vocab = CountingVocab()
    cache = EncodingCache(vocab)
    cache.encode(["a", "b"])
    cache.encode(["c"])  # "a" is forgotten
    cache.encode(["b", "c"])
    assert vocab.calls == [["a", "b"], ["c"]]
    cache.encode(["a"])
    assert vocab.calls[-1] == ["a"]
