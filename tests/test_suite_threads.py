"""The suite's own set-up: each pytest-xdist worker computes with one torch thread (the root conftest.py)."""

from __future__ import annotations

import os

import pytest
import torch


def test_each_xdist_worker_uses_one_torch_thread():
    """Two workers of two threads on two cores made the checks' small-tensor loops up to 40x slower."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("the suite runs in one process here (JOBS=1): torch keeps its own thread count")
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == 1
