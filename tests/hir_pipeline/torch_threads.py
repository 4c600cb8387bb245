"""One intra-op thread for the model and training tests (imported by their conftest files):
the CI box has 2 shared cores, and with OpenMP worker threads
competing against other processes tiny kernels wait milliseconds on descheduled threads."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
