"""harness.models.runtime: a job's torch threads are its config's, whatever cores the scheduler granted."""
from __future__ import annotations

import torch

from harness.models.runtime import torch_for


def test_torch_threads_are_the_configs_not_the_schedulers(monkeypatch):
    """Thread counts change a model's bits: a job under Snakemake (OMP_NUM_THREADS = its booked cores,
    1 by default) must train what the same command trains by hand (tests/test_api.py, test_faults.py)."""
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        torch_for({"torch_threads": 3})
        assert torch.get_num_threads() == 3
        torch_for(threads=2)
        assert torch.get_num_threads() == 2
        torch_for({})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
