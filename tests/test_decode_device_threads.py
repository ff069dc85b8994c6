"""How decoding shares the CPU among its workers (decode/device/threads.py)."""

import pytest
import torch

from transformer_nmt.decode.device import threads as threads_module
from transformer_nmt.decode.device.threads import decoding_threads, default_workers, torch_threads


@pytest.mark.parametrize("cores, workers", [(1, 1), (2, 2), (8, 2)])
def test_two_workers_by_default_on_a_cpu_with_two_cores_or_more(monkeypatch, cores, workers):
    monkeypatch.setattr(threads_module, "_PROCESS_THREADS", cores)
    assert default_workers("cpu") == workers
    assert default_workers(torch.device("cuda")) == 1


@pytest.mark.parametrize("workers, device, cores, threads", [
    (1, "cpu", 8, 8), (2, "cpu", 8, 4), (3, "cpu", 8, 2), (4, "cpu", 2, 1), (2, "cpu", 2, 1),
    (2, "cuda", 8, 8)])
def test_each_cpu_worker_gets_its_share_of_the_cores(workers, device, cores, threads):
    assert decoding_threads(workers, device, cores) == threads


def test_the_cores_default_to_the_process_threads_at_import(monkeypatch):
    monkeypatch.setattr(threads_module, "_PROCESS_THREADS", 6)
    assert decoding_threads(1, "cpu") == 6 and decoding_threads(2, "cpu") == 3


def test_torch_threads_gives_the_previous_count_back_even_after_an_error():
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with pytest.raises(KeyError), torch_threads(other):
        raise KeyError("stop")
    assert torch.get_num_threads() == before
