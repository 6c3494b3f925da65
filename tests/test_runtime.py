"""harness.models.runtime: a job's torch threads are its section's, at most the cores it was granted."""
from __future__ import annotations

import torch

from harness.models.runtime import granted_threads, torch_for


def test_torch_threads_are_capped_at_the_cores_snakemake_granted(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert granted_threads() is None
        torch_for({"torch_threads": 3})
        assert torch.get_num_threads() == 3           # outside a Snakemake job: the section's value
        monkeypatch.setenv("OMP_NUM_THREADS", "1")    # what Snakemake exports for a job given 1 core
        torch_for({"torch_threads": 16})
        assert torch.get_num_threads() == 1
        torch_for(threads=4)
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "8")
        torch_for({"torch_threads": 2})
        assert torch.get_num_threads() == 2           # a cap, never a raise
        monkeypatch.setenv("OMP_NUM_THREADS", "two")
        assert granted_threads() is None
    finally:
        torch.set_num_threads(before)
