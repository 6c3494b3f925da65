"""The max-pooled vocabulary projection's product, one kernel for every method that has one (VDR/SVDR's
E_θ, LightRetriever's sparse side): ``max`` over a segment of token rows of ``tokens @ weight.T + bias``,
with the arg-max row, without the [tokens x vocabulary] logits of more than a block at a time.

Why not torch's matrix product: under ``numerics: portable`` torch multiplies with MKL's SSE2 branch
(``MKL_CBWR=COMPATIBLE``, the only one Intel promises to give the same bits on AMD), 16-17 GFLOP/s a
thread on this project's AMD EPYC (Zen 2), where numpy's OpenBLAS on its Haswell kernels (pinned by
``OPENBLAS_CORETYPE``, the same machine code on every AVX2 CPU) does 31-32 (``python -m harness bench
projection`` prints both). The product is most of a vocabulary-space model's training and encoding on
a CPU (85 % of VDR's passage encoding), so portable runs take this kernel; ``native`` keeps torch.

The same bits for any thread count: OpenBLAS splits one product differently for 1 and 2 threads (see
``harness.indexes.blas``), so every block is multiplied single-threaded and threads take different
blocks (numpy releases the GIL in BLAS and in ``argmax``).
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numpy as np

#: token rows multiplied at once (whole segments; one segment longer than this is its own block)
BLOCK_TOKENS = 1024
#: vocabulary rows per block: [2048 x 1024] float32 logits = 8 MB a thread
BLOCK_VOCAB = 2048


def use_numpy(tensor) -> bool:
    """Whether :func:`segment_max_torch` multiplies ``tensor`` in numpy: a CPU float32 tensor in a
    process whose numerics are portable."""
    from harness import numerics

    return numerics.active() == "portable" and tensor.device.type == "cpu" and str(tensor.dtype) == "torch.float32"


def _blocks(starts: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive segments grouped so that each group spans at most ``budget`` token rows (at least
    one segment): (first segment, end segment) pairs."""
    out: list[tuple[int, int]] = []
    first, B = 0, len(starts) - 1
    for b in range(B):  # segment b joins [first, b) unless that group would outgrow the budget
        if b > first and starts[b + 1] - starts[first] > budget:
            out.append((first, b))
            first = b
    if B > 0:
        out.append((first, B))
    return out


def segment_max(tokens: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, starts: Sequence[int],
                threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(values [B, V] float32, arg [B, V] int64): for segment ``b`` (token rows ``starts[b]`` to
    ``starts[b + 1]`` of ``tokens`` [N, H]), the max over its rows of ``tokens @ weight.T (+ bias)``
    and the row (counted from the segment's start) where it is reached, the first on a tie. An empty
    segment gives -inf and 0. ``threads`` blocks are multiplied side by side; the bits never depend
    on it."""
    from harness.numerics import blas_controller

    tokens = np.ascontiguousarray(tokens, dtype=np.float32)
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    starts = np.asarray(starts, dtype=np.int64)
    B, V = len(starts) - 1, weight.shape[0]
    if tokens.ndim != 2 or weight.ndim != 2 or tokens.shape[1] != weight.shape[1]:
        raise ValueError(f"segment_max: tokens {tokens.shape} and weight {weight.shape} are not [N, H] and [V, H]")
    if B < 0 or starts[0] != 0 or starts[-1] != tokens.shape[0] or np.any(np.diff(starts) < 0):
        raise ValueError(f"segment_max: starts must rise from 0 to {tokens.shape[0]} (got {starts.tolist()[:8]}...)")
    values = np.full((B, V), -np.inf, np.float32)
    arg = np.zeros((B, V), np.int64)
    groups = [(g, v) for g in _blocks(starts, BLOCK_TOKENS) for v in range(0, V, BLOCK_VOCAB)]

    def block(unit: tuple[tuple[int, int], int]) -> None:
        (first, end), v0 = unit
        v1 = min(V, v0 + BLOCK_VOCAB)
        t0 = starts[first]
        logits = weight[v0:v1] @ tokens[t0:starts[end]].T            # [v, tokens]: each row's max is contiguous
        if bias is not None:
            logits += bias[v0:v1, None]
        rows = np.arange(v1 - v0)
        for b in range(first, end):
            s, e = starts[b] - t0, starts[b + 1] - t0
            if e > s:
                a = logits[:, s:e].argmax(1)
                values[b, v0:v1] = logits[rows, s + a]
                arg[b, v0:v1] = a

    workers = max(1, min(int(threads), len(groups)))
    with blas_controller().limit(limits=1), ThreadPoolExecutor(workers) if workers > 1 else nullcontext() as pool:
        if pool is None:
            for unit in groups:
                block(unit)
        else:
            list(pool.map(block, groups))
    return values, arg


def segment_max_torch(tokens, weight, bias, starts: Sequence[int]):
    """:func:`segment_max` of torch tensors (no autograd), as torch tensors on ``tokens``' device: in
    numpy where :func:`use_numpy` says so (threads: torch's intra-op count), else torch's product."""
    import torch

    if use_numpy(tokens):
        b = None if bias is None else bias.detach().float().numpy()
        values, arg = segment_max(tokens.detach().numpy(), weight.detach().float().numpy(), b, starts,
                                  threads=torch.get_num_threads())
        return torch.from_numpy(values), torch.from_numpy(arg)
    return segment_max_torch_product(tokens, weight, bias, starts)


def segment_max_torch_product(tokens, weight, bias, starts: Sequence[int]):
    """:func:`segment_max` with torch's own product and ``max`` (the native path; any device or dtype)."""
    import torch

    B, V = len(starts) - 1, weight.shape[0]
    values = torch.full((B, V), float("-inf"), dtype=tokens.dtype, device=tokens.device)
    arg = torch.zeros((B, V), dtype=torch.long, device=tokens.device)
    st = np.asarray(starts, dtype=np.int64)
    with torch.no_grad():
        for first, end in _blocks(st, BLOCK_TOKENS):
            t0 = int(st[first])
            logits = weight @ tokens[t0:int(st[end])].T
            if bias is not None:
                logits += bias.unsqueeze(1)
            for b in range(first, end):
                s, e = int(st[b]) - t0, int(st[b + 1]) - t0
                if e > s:
                    values[b], arg[b] = logits[:, s:e].max(1)
    return values, arg
