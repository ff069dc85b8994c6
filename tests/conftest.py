"""Settings every test gets back as it found them."""

import pytest
import torch


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """Translators with several workers lower the process's thread count; later tests
    should not run on one core because an earlier one translated."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
