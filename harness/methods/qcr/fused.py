"""Eq. 3 on the CPU in one pass: QCR's late interaction without its distance matrix (numba).

``sum_i max_j -||q_i - d_j||_2`` for every query-document pair grows as B^2 K^2: at the paper's last
stage (batch 2,048, K 250) 2.6e11 distances, which :func:`harness.methods.qcr.model.late_interaction`
computed on the CPU through ``torch.cdist`` (exact differences) in checkpointed row chunks: 2.1-2.7 h
projected for one step's loss on a 2-core CPU (``python -m harness bench qcr-loss``), why no
batch-2,048 QCR training had run on a CPU. Here one kernel walks each (query, document) pair, keeps the
smallest squared exact difference over the document's codes and its index, and square-roots only that
minimum (sqrt is monotonic: the same value as cdist's maximum of negated distances); the backward pass
reads the kept index (one byte per (query, code, document) for K <= 256: 1 GB at the paper's last
stage, where the distances would be 1 TB) and sends each minimum's gradient to its two codes, 0 at
distance 0 as cdist's.

Every sum runs in a fixed order (compiled without fast-math: the compiler may not reorder them); scores
and gradients accumulate in float64 and are returned in float32. The harness takes this path on the CPU
only where the loss would otherwise be chunked (``LOSS_CHUNK_ELEMENTS``): every smoke, small and ci
batch keeps cdist's bits. tests/test_qcr.py compares values and gradients with the cdist path, ties and
exact zeros included.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def _forward(q, dt, idx, out):  # pragma: no cover - compiled
    """q [B, K, D] float32, dt [P, D, K2] (the documents' codes transposed: the inner loop runs over
    contiguous codes); fills idx [B, K, P] with each minimum's code and out [B, P] with the scores."""
    b_n, k_n, dim = q.shape
    p_n, _, k2 = dt.shape
    for b in numba.prange(b_n):
        acc = np.empty(k2, np.float32)
        for p in range(p_n):
            s = 0.0
            for i in range(k_n):
                x = q[b, i, 0]
                for j in range(k2):
                    t = x - dt[p, 0, j]
                    acc[j] = t * t
                for c in range(1, dim):
                    x = q[b, i, c]
                    for j in range(k2):
                        t = x - dt[p, c, j]
                        acc[j] += t * t
                best = acc[0]
                bj = 0
                for j in range(1, k2):
                    if acc[j] < best:  # the first of equal minima, as torch's max picks
                        best = acc[j]
                        bj = j
                idx[b, i, p] = bj
                s += np.sqrt(np.float64(best))
            out[b, p] = -s


@numba.njit(cache=True, inline="always")
def _pull(q, d, b, i, p, j, w, diff):  # pragma: no cover - compiled
    """diff <- w (q[b, i] - d[p, j]) / ||q[b, i] - d[p, j]|| (float64); False at distance 0 (cdist's
    gradient there is 0)."""
    sq = 0.0
    for c in range(q.shape[2]):
        diff[c] = np.float64(q[b, i, c]) - np.float64(d[p, j, c])
        sq += diff[c] * diff[c]
    if sq == 0.0:
        return False
    r = w / np.sqrt(sq)
    for c in range(q.shape[2]):
        diff[c] *= r
    return True


@numba.njit(parallel=True, cache=True)
def _grad_q(q, d, idx, g, gq):  # pragma: no cover - compiled
    """gq [B, K, D] = sum_p d score[b, p] / d q[b, i] x g[b, p] = -g (q_i - d_j*) / ||q_i - d_j*||."""
    b_n, k_n, dim = q.shape
    for b in numba.prange(b_n):
        diff = np.empty(dim, np.float64)
        for i in range(k_n):
            for c in range(dim):
                gq[b, i, c] = 0.0
            for p in range(d.shape[0]):
                if g[b, p] != 0.0 and _pull(q, d, b, i, p, idx[b, i, p], g[b, p], diff):
                    for c in range(dim):
                        gq[b, i, c] -= diff[c]


@numba.njit(parallel=True, cache=True)
def _grad_d(q, d, idx, g, gd):  # pragma: no cover - compiled
    """gd [P, K2, D] = sum over every (b, i) whose minimum is d[p, j] of g (q_i - d_j) / ||q_i - d_j||."""
    b_n, k_n, dim = q.shape
    for p in numba.prange(d.shape[0]):
        diff = np.empty(dim, np.float64)
        for j in range(d.shape[1]):
            for c in range(dim):
                gd[p, j, c] = 0.0
        for b in range(b_n):
            if g[b, p] == 0.0:
                continue
            for i in range(k_n):
                j = idx[b, i, p]
                if _pull(q, d, b, i, p, j, g[b, p], diff):
                    for c in range(dim):
                        gd[p, j, c] += diff[c]


def index_dtype(codes: int) -> np.dtype:
    """The kept minimum's code index: one byte up to 256 codes a document, two up to 65,536."""
    return np.dtype(np.uint8 if codes <= 1 << 8 else np.uint16 if codes <= 1 << 16 else np.uint32)


def supports(q, d) -> bool:
    """Whether the fused kernel takes these tensors: CPU float32, [B, K, D] and [P, K', D] alike."""
    return (not q.is_cuda and not d.is_cuda and q.dtype == d.dtype and str(q.dtype) == "torch.float32"
            and q.dim() == 3 and d.dim() == 3 and q.shape[2] == d.shape[2])


def _function():
    import torch

    class LateInteraction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, d):
            qn = q.detach().contiguous().numpy()
            dn = d.detach().contiguous().numpy()
            idx = np.empty((qn.shape[0], qn.shape[1], dn.shape[0]), index_dtype(dn.shape[1]))
            out = np.empty((qn.shape[0], dn.shape[0]), np.float64)
            _forward(qn, np.ascontiguousarray(dn.transpose(0, 2, 1)), idx, out)
            ctx.save_for_backward(q, d)
            ctx.idx = idx
            return torch.from_numpy(out.astype(np.float32))

        @staticmethod
        def backward(ctx, g):
            q, d = ctx.saved_tensors
            qn, dn = q.detach().contiguous().numpy(), d.detach().contiguous().numpy()
            gn = g.detach().contiguous().numpy().astype(np.float64)
            gq = gd = None
            if ctx.needs_input_grad[0]:
                out = np.empty(qn.shape, np.float64)
                _grad_q(qn, dn, ctx.idx, gn, out)
                gq = torch.from_numpy(out.astype(np.float32))
            if ctx.needs_input_grad[1]:
                out = np.empty(dn.shape, np.float64)
                _grad_d(qn, dn, ctx.idx, gn, out)
                gd = torch.from_numpy(out.astype(np.float32))
            return gq, gd

    return LateInteraction


_FN = None


def late_interaction(q, d):
    """Eq. 3 for every query-document pair: q [B, K, D], d [P, K', D] float32 CPU tensors -> [B, P],
    ``sum_i max_j -||q_i - d_j||_2``, differentiable in both (:func:`supports` says which tensors)."""
    global _FN
    if not supports(q, d):
        raise ValueError(f"fused Eq. 3 takes CPU float32 [B, K, D] and [P, K', D] tensors, "
                         f"not {q.dtype} {tuple(q.shape)} on {q.device} and {d.dtype} {tuple(d.shape)} on {d.device}")
    if _FN is None:
        _FN = _function()
    return _FN.apply(q, d)
