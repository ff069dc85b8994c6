"""What training reports: the peak rate behind MFU."""

import torch

from transformer_nmt.training import metrics as metrics_module
from transformer_nmt.training.metrics import PeakFlops, measure_peak_flops


def test_the_peak_rate_is_a_plausible_matmul_rate():
    rate = measure_peak_flops(torch.device("cpu"), torch.float32)
    assert 1e8 < rate < 1e14


def test_refreshing_the_peak_keeps_the_best_measurement(monkeypatch):
    measured = iter([2e9, 8e9, 5e9])
    monkeypatch.setattr(metrics_module, "measure_peak_flops", lambda device, dtype: next(measured))
    peak = PeakFlops(torch.device("cpu"), torch.float32)
    assert peak.value == 2e9  # a start-up measurement while another process held a core
    assert peak.refresh() == 8e9 and peak.value == 8e9
    assert peak.refresh() == 8e9
