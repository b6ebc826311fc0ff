"""One torch thread per test process.

The shared conftest sets OMP_NUM_THREADS, but torch is imported before it runs, so
its thread pool keeps the default (all cores). Tests run side by side on a small,
often busy machine, where two OpenMP threads waiting for each other at every tiny
operation are many times slower than one.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
