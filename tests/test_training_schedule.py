"""The learning rate of eq. (3): linear warm-up, inverse square root decay."""

import pytest
import torch

from transformer_nmt.training.schedule import InverseSqrtSchedule


def test_paper_values():
    schedule = InverseSqrtSchedule(d_model=512, warmup_steps=4000)
    assert schedule(1) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    assert schedule.peak == schedule(4000) == pytest.approx((512 * 4000) ** -0.5)
    assert schedule.peak == pytest.approx(6.988e-4, rel=1e-3)
    assert schedule(16000) == pytest.approx(512 ** -0.5 * 16000 ** -0.5)


def test_linear_then_inverse_sqrt():
    schedule = InverseSqrtSchedule(d_model=256, warmup_steps=100, lr_scale=2.0)
    assert schedule(50) == pytest.approx(schedule(100) / 2)
    assert schedule(400) == pytest.approx(schedule(100) / 2)
    rates = [schedule(step) for step in range(1, 1000)]
    assert max(rates) == schedule(100)
    assert schedule(100) == pytest.approx(2.0 * (256 * 100) ** -0.5)


def test_apply_sets_every_group():
    parameters = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.Adam([{"params": parameters[:1]}, {"params": parameters[1:]}])
    schedule = InverseSqrtSchedule(d_model=512, warmup_steps=10)
    rate = schedule.apply(optimizer, 7)
    assert rate == schedule(7)
    assert [group["lr"] for group in optimizer.param_groups] == [rate, rate]


def test_steps_count_from_one():
    with pytest.raises(ValueError):
        InverseSqrtSchedule(512, 10)(0)


def test_a_given_peak_keeps_the_shape():
    schedule = InverseSqrtSchedule(d_model=512, warmup_steps=500, lr_scale=3.0, peak=1e-4)
    assert schedule.peak == pytest.approx(1e-4)
    assert schedule(250) == pytest.approx(5e-5)
    assert schedule(2000) == pytest.approx(5e-5)
