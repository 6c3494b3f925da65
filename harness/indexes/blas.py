"""Exact maximum-inner-product top-k as numpy BLAS products and a top-k selection.

faiss-cpu 1.15 bundles OpenBLAS 0.3.15, which took 4.7-4.9x as long as numpy's OpenBLAS for the
same float32 product on this project's machines (``bench phrase-search``, ``bench flat-search``
print both). Exact flat search and the IVF coarse step therefore multiply in numpy: the same
inner products (to float rounding), the same top-k as faiss's ``IndexFlatIP`` (ties aside), higher
score first, ties by lower row id.
"""
from __future__ import annotations

import numpy as np

#: bytes of one block of scores (queries x rows, float32): bounds the memory of a large batch
BLOCK_BYTES = 256 << 20


def topk_inner_product(q: np.ndarray, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores [B, k] float32 best first, row ids [B, k] int64) of the ``k`` rows of ``x`` [N, d] with
    the largest inner product with each query of ``q`` [B, d] (k is capped at N)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    n = x.shape[0]
    k = min(int(k), n)
    out_s = np.empty((q.shape[0], k), np.float32)
    out_i = np.empty((q.shape[0], k), np.int64)
    step = max(1, BLOCK_BYTES // max(1, 4 * n))
    for b in range(0, q.shape[0], step):
        S = q[b:b + step] @ x.T
        if k < n:
            part = np.argpartition(S, n - k, axis=1)[:, n - k:]
        else:
            part = np.broadcast_to(np.arange(n), S.shape)
        dis = np.take_along_axis(S, part, 1)
        order = np.lexsort((part, -dis), axis=1)   # higher score first, ties by lower row id
        out_s[b:b + step] = np.take_along_axis(dis, order, 1)
        out_i[b:b + step] = np.take_along_axis(part, order, 1)
    return out_s, out_i
