"""The shared BPE vocabulary: fixed special ids, round trips, serialization, bad sizes."""

import random

import pytest

from transformer_nmt.data.vocab import Vocab, train_vocab
from transformer_nmt.errors import UserError

from integrity_fixtures import cut_after_pieces, proto_fields

WORDS = ("the house is small and the garden is green where children play every day "
         "das Haus ist klein und der Garten ist grün wo Kinder jeden Tag spielen").split()


def write_corpus(path, lines=300, seed=0):
    rng = random.Random(seed)
    path.write_text("".join(" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + "\n"
                            for _ in range(lines)))
    return path


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    inputs = [write_corpus(folder / "a.txt"), write_corpus(folder / "b.txt", seed=1)]
    return train_vocab(inputs, folder / "spm", 120, sample_sentences=1000)


def test_special_ids_are_fixed(vocab):
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert [vocab.processor.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert len(vocab) == 120


def test_round_trip(vocab):
    text = "the garden is green und das Haus ist klein"
    ids = vocab.encode(text)
    assert all(i > 3 for i in ids)
    assert vocab.decode(ids) == text
    assert vocab.decode([vocab.bos_id] + ids + [vocab.eos_id, vocab.pad_id, vocab.pad_id]) == text
    assert "".join(vocab.pieces(text)).replace("▁", " ").strip() == text


def test_encode_batch_equals_encode(vocab):
    texts = ["the house", "", "Kinder spielen jeden Tag", "zzz unknown ❤"]
    assert vocab.encode_batch(texts) == [vocab.encode(t) for t in texts]
    assert vocab.encode_batch(texts, threads=1) == vocab.encode_batch(texts)
    assert vocab.unk_id in vocab.encode("❤")


def test_bytes_round_trip(vocab, tmp_path):
    copy = Vocab.from_bytes(vocab.to_bytes())
    assert copy.encode("das Haus ist grün") == vocab.encode("das Haus ist grün")
    assert len(copy) == len(vocab)
    with pytest.raises(UserError, match="embedded vocabulary"):
        Vocab.from_bytes(b"not a model")
    (tmp_path / "x.model").write_bytes(b"not a model")
    with pytest.raises(UserError, match="not a sentencepiece model"):
        Vocab.load(tmp_path / "x.model")


def test_a_vocabulary_cut_short_is_refused_wherever_it_is_read(vocab, tmp_path):
    complete = vocab.to_bytes()
    (tmp_path / "cut.model").write_bytes(cut_after_pieces(complete, 50))
    with pytest.raises(UserError, match=r"cut.model: incomplete sentencepiece model: it ends "
                                        r"after 50 pieces, without its trainer_spec and "
                                        r"normalizer_spec \(the file was cut short\)"):
        Vocab.load(tmp_path / "cut.model")
    with pytest.raises(UserError, match="embedded vocabulary: incomplete sentencepiece model"):
        Vocab.from_bytes(cut_after_pieces(complete, 50))
    fields = proto_fields(complete)
    without_normalizer = b"".join(field for number, field in fields if number != 3)
    with pytest.raises(UserError, match="ends after 120 pieces, without its normalizer_spec"):
        Vocab.from_bytes(without_normalizer)
    # Pieces removed from the middle of a complete model: fewer than it was trained for.
    thinned = b"".join(field for _, field in fields[:100] + fields[120:])
    with pytest.raises(UserError, match="it holds 100 pieces but was trained for 120"):
        Vocab.from_bytes(thinned)


def test_vocabulary_too_large_suggests_a_size(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt")
    with pytest.raises(UserError, match=r"vocab_size=5000 is larger than this corpus can "
                                        r"support \(at most \d+ pieces\); use vocab_size=\d+"):
        train_vocab([corpus], tmp_path / "spm", 5000)


def test_vocabulary_too_small_says_why(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt")
    with pytest.raises(UserError, match=r"smaller than the \d+ pieces .* characters"):
        train_vocab([corpus], tmp_path / "spm", 20)
