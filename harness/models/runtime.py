"""Torch and transformers set-up, written once for every method and step.

``torch_for(section)`` imports torch and sets its intra-op threads from the section's
``torch_threads`` (default 2), at most the cores the scheduler gave the job; ``quiet_transformers()`` silences transformers' info logging and
progress bars (the harness reports its own progress with tqdm).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def torch_for(section: Mapping[str, Any] | None = None, threads: int | None = None):
    """torch, with ``torch.set_num_threads`` from ``threads`` or the section's ``torch_threads`` (2), at
    most :func:`granted_threads` (a profile written for a 16-core node, run on 2 cores, would otherwise
    run 16 threads on 2 cores: the paper rehearsal's LightRetriever step took 28 s so, 9 s at 2)."""
    import torch

    n = int(threads if threads is not None else (section or {}).get("torch_threads", 2))
    cap = granted_threads()
    torch.set_num_threads(min(n, cap) if cap else n)
    return torch


def granted_threads() -> int | None:
    """The cores Snakemake gave this job (it exports ``OMP_NUM_THREADS`` as the job's ``threads``,
    which it caps at ``--cores``); None outside a Snakemake job or where the variable is not a count."""
    import os

    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
