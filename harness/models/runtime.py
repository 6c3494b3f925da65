"""Torch and transformers set-up, written once for every method and step.

``torch_for(section)`` imports torch and sets its intra-op threads from the section's
``torch_threads`` (default 2); ``quiet_transformers()`` silences transformers' info logging and
progress bars (the harness reports its own progress with tqdm).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def torch_for(section: Mapping[str, Any] | None = None, threads: int | None = None):
    """torch, with ``torch.set_num_threads`` from ``threads`` or the section's ``torch_threads`` (2).
    Not capped at the cores the scheduler granted (``OMP_NUM_THREADS``): the intra-op thread count
    changes a model's bits, and the default profile books 1 core per job for 2 torch threads, so a
    job run by Snakemake and the same command run by hand would differ."""
    import torch

    torch.set_num_threads(int(threads if threads is not None else (section or {}).get("torch_threads", 2)))
    return torch


def encode_device(section: Mapping[str, Any] | None) -> str:
    """Where a method's index and search jobs encode: its section's ``device``, as its training
    resolves it (:func:`harness.train.resolve_device`: ``auto`` -> cuda where there is one; ``cuda``
    without one fails naming the setting, or under ``device_fallback`` runs on the CPU, recorded in
    meta.json). A section with ``device: cuda`` books a GPU for all its jobs (its index jobs encode
    the corpus: 21M passages on the paper profile). Timing jobs keep their own rule (``timing.device``)."""
    from harness.train import resolve_device

    return resolve_device(str((section or {}).get("device", "cpu")))


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
