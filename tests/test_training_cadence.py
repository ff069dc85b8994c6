"""When a session logs, validates and saves (training/cadence.py): every so many steps,
every so many minutes, once at the end, never twice for one step number, and no
validation when a signal stops the session."""

import dataclasses

from transformer_nmt.config import PRESETS
from transformer_nmt.training.cadence import Cadence


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def cadence(clock=None, can_validate=True, **settings):
    cfg = dataclasses.replace(PRESETS["tiny"].train, **settings)
    return Cadence(cfg, can_validate, clock or Clock())


def test_step_numbered_work_is_due_at_multiples_and_not_after_a_skipped_update():
    every = cadence(log_every=10, valid_every=20, save_every=30)
    assert every.log_due(10, stopping=False) and not every.log_due(11, stopping=False)
    assert every.validation_due(40, stopping=False, signalled=False)
    assert not every.validation_due(30, stopping=False, signalled=False)
    assert every.save_due(60, stopping=False, save_time_up=False)
    assert not every.save_due(20, stopping=False, save_time_up=False)
    # None: the step's update was skipped, so its number was already handled.
    assert not every.log_due(None, stopping=False)
    assert not every.validation_due(None, stopping=False, signalled=False)
    assert not every.save_due(None, stopping=False, save_time_up=False)


def test_zero_means_never_and_stopping_does_everything_once_more():
    never = cadence(valid_every=0, save_every=0)
    assert not never.validation_due(1000, stopping=False, signalled=False)
    assert not never.save_due(1000, stopping=False, save_time_up=False)
    assert never.log_due(None, stopping=True)
    assert never.validation_due(None, stopping=True, signalled=False)
    assert never.save_due(None, stopping=True, save_time_up=False)


def test_a_signal_saves_without_validating_and_no_valid_split_never_validates():
    every = cadence(valid_every=10)
    assert not every.validation_due(10, stopping=True, signalled=True)
    assert every.save_due(None, stopping=True, save_time_up=False)
    assert not cadence(can_validate=False).validation_due(10, stopping=True, signalled=False)


def test_saving_by_the_clock_counts_from_the_last_save():
    clock = Clock()
    timed = cadence(clock, save_every_minutes=2.0)
    clock.now = 119.0
    assert not timed.save_time_up()
    clock.now = 120.0
    assert timed.save_time_up()
    assert timed.save_due(7, stopping=False, save_time_up=True)
    timed.restart_clock()
    clock.now = 200.0
    assert not timed.save_time_up()
    clock.now = 1e6
    assert not cadence(clock, save_every_minutes=0).save_time_up()
