"""Stage 2 of `nmt distill`: the candidate closest to the reference is kept, the worst share
by the teacher's per-token cross-entropy is dropped, and a filter that would drop every
sentence is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from transformer_nmt.distill.select import choose, filter_worst, read_nbest, select
from transformer_nmt.errors import UserError


def candidate(text: str, *token_scores: float) -> dict:
    return {"text": text, "token_scores": list(token_scores), "score": sum(token_scores)}


def test_the_candidate_closest_to_the_reference_is_kept():
    nbest = [[candidate("the cat sat", -0.1, -0.1), candidate("the dog sat", -1.0, -1.0)]]
    (choice, rank), = choose(["src"], nbest, ["the dog sat"])
    assert (choice.target, rank) == ("the dog sat", 1)
    assert choice.cross_entropy == pytest.approx(1.0)


def test_without_a_reference_the_teachers_best_is_kept():
    nbest = [[candidate("first", -2.0), candidate("second", -0.5)]]
    (choice, rank), = choose(["src"], nbest, None)
    assert (choice.target, rank, choice.cross_entropy) == ("first", 0, 2.0)


def test_equal_candidates_keep_the_teachers_order():
    nbest = [[candidate("same", -0.3), candidate("same", -0.1)]]
    (choice, rank), = choose(["src"], nbest, ["other words"])
    assert rank == 0


def test_the_worst_share_and_empty_translations_are_dropped():
    cross_entropy = np.arange(10, dtype=np.float64)
    empty = np.zeros(10, dtype=bool)
    empty[3] = True
    keep, selection = filter_worst(cross_entropy, empty, 0.2, "train")
    assert np.flatnonzero(keep).tolist() == [0, 1, 2, 4, 5, 6, 7]
    assert (selection.sentences, selection.kept, selection.empty, selection.worst) == (10, 7, 1, 2)
    assert selection.threshold == 8.0
    assert "dropped 1 empty translations and 2 as the worst 20%" in selection.summary(0.2)


def test_equal_scores_drop_the_same_sentences_every_time():
    keep, _ = filter_worst(np.ones(4), np.zeros(4, dtype=bool), 0.5, "train")
    assert keep.tolist() == [False, False, True, True]


@pytest.mark.parametrize("drop", [1.0, 0.99])
def test_a_filter_that_drops_everything_is_refused_in_one_line(drop):
    with pytest.raises(UserError, match="would drop all 10 translations of train") as raised:
        filter_worst(np.arange(10, dtype=np.float64), np.zeros(10, dtype=bool), drop, "train")
    assert "\n" not in str(raised.value)


def test_select_writes_parallel_files_whole(tmp_path):
    sources = tmp_path / "train.en"
    sources.write_text("a\nb\n", encoding="utf-8")
    references = tmp_path / "train.de"
    references.write_text("x y\nz\n", encoding="utf-8")
    nbest = tmp_path / "out" / "train.en"
    nbest.parent.mkdir()
    nbest.write_text("".join(json.dumps({"nbest": line}) + "\n" for line in (
        [candidate("x", -0.2), candidate("x y", -0.4)], [candidate("z", -0.1)])),
        encoding="utf-8")
    selection = select([(sources, nbest, references)], 0.0, tmp_path / "s" / "train.en",
                       tmp_path / "s" / "train.de")
    assert (tmp_path / "s" / "train.en").read_text(encoding="utf-8") == "a\nb\n"
    assert (tmp_path / "s" / "train.de").read_text(encoding="utf-8") == "x y\nz\n"
    assert (selection.kept, selection.closest_not_first) == (2, 1)


def test_a_damaged_nbest_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "train.en"
    path.write_text('{"nbest": [{"text": "a", "token_scores": [-1.0]}]}\n{"text": "b"}\n',
                    encoding="utf-8")
    with pytest.raises(UserError, match=r"train.en line 2: not a JSON n-best line"):
        list(read_nbest(path))


def test_files_of_different_lengths_are_refused(tmp_path):
    sources = tmp_path / "train.en"
    sources.write_text("a\nb\n", encoding="utf-8")
    nbest = tmp_path / "out" / "train.en"
    nbest.parent.mkdir()
    nbest.write_text(json.dumps({"nbest": [candidate("x", -0.2)]}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="not the same number of lines"):
        select([(sources, nbest, None)], 0.0, tmp_path / "a", tmp_path / "b")
    assert not (tmp_path / "a").exists()
