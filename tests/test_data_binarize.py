"""Token ids to memory-mapped .bin/.idx files and back."""

import pickle

import numpy as np
import pytest

from transformer_nmt.data.binarize import IdsWriter, ParallelData, ids_dtype, load_split, read_ids
from transformer_nmt.data.manifest import bin_path, idx_path
from transformer_nmt.errors import UserError

from data_fixtures import SRC, TGT, make_split


def test_dtype_follows_vocabulary_size():
    assert ids_dtype(8000) == np.uint16 and ids_dtype(65535) == np.uint16
    assert ids_dtype(65536) == np.int32


def test_round_trip_through_memory_map(tmp_path):
    make_split(tmp_path)
    data = load_split(tmp_path, "train")
    assert len(data) == 4 and (data.src_lang, data.tgt_lang) == ("en", "de")
    for i in range(4):
        src, tgt = data.pair(i)
        assert src.tolist() == SRC[i] and tgt.tolist() == TGT[i]
    assert data.src_lengths.tolist() == [3, 0, 1, 4]
    assert data.tgt_lengths.tolist() == [1, 2, 0, 2]
    assert data.src_text_path == tmp_path / "train.en"
    with pytest.raises(IndexError):
        data.pair(4)


def test_large_ids_use_int32(tmp_path):
    make_split(tmp_path, src=[[70000, 1]], tgt=[[65536]], dtype=ids_dtype(80000),
               vocab_size=80000)
    src, tgt = load_split(tmp_path, "train").pair(0)
    assert src.tolist() == [70000, 1] and tgt.tolist() == [65536]


def test_empty_split_and_empty_files(tmp_path):
    make_split(tmp_path, src=[[], []], tgt=[[], []])
    data = load_split(tmp_path, "train")
    assert len(data) == 2 and data.pair(1)[0].size == 0
    ids, offsets = read_ids(bin_path(tmp_path, "train", "en"), idx_path(tmp_path, "train", "en"),
                            np.dtype("<u2"))
    assert ids.size == 0 and offsets.tolist() == [0, 0, 0]


def test_pickles_as_a_reference_not_as_data(tmp_path):
    make_split(tmp_path)
    data = load_split(tmp_path, "train")
    blob = pickle.dumps(data)
    assert len(blob) < 500
    assert pickle.loads(blob).pair(3)[0].tolist() == SRC[3]


def test_writer_leaves_nothing_when_interrupted(tmp_path):
    with pytest.raises(RuntimeError):
        with IdsWriter(tmp_path / "a.bin", tmp_path / "a.idx", np.dtype("<u2")) as writer:
            writer.add([[1, 2]])
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_unfinished_or_missing_data_is_refused(tmp_path):
    with pytest.raises(UserError, match="not a prepared data directory"):
        load_split(tmp_path, "train")
    make_split(tmp_path)
    with pytest.raises(UserError, match="no 'test' split; it has train"):
        load_split(tmp_path, "test")
    idx_path(tmp_path, "train", "de").write_bytes(np.array([0, 1], "<i8").tobytes())
    with pytest.raises(UserError, match="does not match"):
        load_split(tmp_path, "train")


def test_misaligned_sides_are_refused(tmp_path):
    make_split(tmp_path, src=[[1], [2]], tgt=[[3]])
    with pytest.raises(UserError, match="2 en and 1 de sentences"):
        ParallelData(tmp_path, "train", "en", "de", np.dtype("<u2"))


def test_token_ids_outside_the_vocabulary_are_refused_when_the_split_is_opened(tmp_path):
    make_split(tmp_path, vocab_size=24)
    with pytest.raises(UserError, match=r"train\.de\.bin: token id 24 is outside the "
                                        "vocabulary of 24"):
        load_split(tmp_path, "train")
