"""Early stopping (training/early_stopping.py): which value is better for each metric, the
count of validations without improvement, and when patience runs out."""

from transformer_nmt.training.early_stopping import EarlyStopping, better
from transformer_nmt.training.progress import RunProgress


def test_better_is_lower_for_loss_and_higher_for_translation_metrics():
    assert better("loss", 1.0, None) and better("bleu", 0.0, None)
    assert better("loss", 1.0, 2.0) and not better("loss", 2.0, 2.0)
    assert better("bleu", 20.0, 10.0) and not better("chrf", 10.0, 10.0)


def test_patience_counts_validations_in_a_row_without_improvement():
    rule, progress = EarlyStopping("bleu", patience=2), RunProgress()
    assert rule.record(progress, 10.0, step=100)
    assert not rule.record(progress, 9.0, step=200) and not rule.out_of_patience(progress)
    assert rule.record(progress, 11.0, step=300)  # an improvement starts the count again
    assert (progress.best_valid, progress.best_valid_step, progress.bad_validations) == \
        (11.0, 300, 0)
    assert not rule.record(progress, 11.0, step=400)  # equal is no improvement
    assert not rule.record(progress, 5.0, step=500) and rule.out_of_patience(progress)
    assert progress.best_valid_step == 300


def test_without_patience_training_never_stops_early():
    rule, progress = EarlyStopping("loss", patience=0), RunProgress()
    for step, value in enumerate([1.0, 2.0, 3.0, 4.0], start=1):
        rule.record(progress, value, step)
    assert progress.bad_validations == 3 and not rule.out_of_patience(progress)
