"""Stopping a training cleanly (training/signals.py): the first SIGINT or SIGTERM asks the
loop to stop after its step, a second one goes to the handler that was there before, and
leaving puts the old handlers back. Each test sets the handlers it relies on first."""

from __future__ import annotations

import signal
import threading

import pytest

from transformer_nmt.training.signals import StopSignals


@pytest.fixture
def recorded():
    """SIGINT and SIGTERM recorded by a handler of the test's own, restored after."""
    calls: list[int] = []
    previous = {number: signal.signal(number, lambda n, frame: calls.append(n))
                for number in (signal.SIGINT, signal.SIGTERM)}
    yield calls
    for number, handler in previous.items():
        signal.signal(number, handler)


def test_the_first_signal_is_a_request_and_the_old_handlers_come_back(recorded, capsys):
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert stop.received is None
        signal.raise_signal(signal.SIGTERM)
        assert stop.received == "SIGTERM" and recorded == []
    assert "SIGTERM received: finishing this step" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_goes_to_the_handler_from_before(recorded, capsys):
    with StopSignals() as stop:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
    assert stop.received == "SIGINT" and recorded == [signal.SIGINT]


def test_off_the_main_thread_no_handler_is_installed(recorded):
    before = signal.getsignal(signal.SIGINT)
    seen = []

    def enter() -> None:
        with StopSignals():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == [before]
