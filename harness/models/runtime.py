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


def encode_autocast(section: Mapping[str, Any] | None, device: str):
    """The context an index or search job encodes in: autocast to the section's ``encode_precision``
    (fp32: none; bf16 on CUDA or on a CPU with a bf16 matmul; fp16 on CUDA), resolved as training
    resolves ``precision`` (:func:`harness.train.resolve_precision`: where the machine lacks it, a
    job under ``device_fallback`` encodes in fp32, recorded in meta.json). Returns (context, the
    precision it runs at). Vectors leave the encoders as float32 either way."""
    import contextlib

    import torch

    from harness.train import resolve_precision

    want = str((section or {}).get("encode_precision", "fp32"))
    got = resolve_precision(want, device, "encode_precision")
    if got == "fp32":
        return contextlib.nullcontext(), got
    dtype = torch.bfloat16 if got == "bf16" else torch.float16
    return torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=dtype), got


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
