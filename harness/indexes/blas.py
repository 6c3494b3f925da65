"""Exact maximum-inner-product top-k as numpy BLAS products and a top-k selection.

faiss-cpu 1.15 bundles OpenBLAS 0.3.15, which took 4.7-4.9x as long as numpy's OpenBLAS for the
same float32 product on this project's machines (``bench phrase-search``, ``bench flat-search``
print both). Exact flat search and the IVF coarse step therefore multiply in numpy: the same
inner products (to float rounding), the same top-k as faiss's ``IndexFlatIP`` (ties aside), higher
score first, ties by lower row id.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numpy as np

from harness.numerics import blas_controller

#: database rows per product. Fixed, and each product single-threaded, so that a score never depends
#: on the thread count: OpenBLAS splits a product differently for 1 and 2 threads and the last bits
#: move (a run written by a 1-thread Snakemake job and by a 2-thread ``python -m harness search``
#: differed at 1e-7). Threads work on different chunks instead (numpy releases the GIL in BLAS).
CHUNK_ROWS = 1 << 16
#: bytes of one chunk's block of scores (queries x rows, float32): bounds the memory of a large batch
BLOCK_BYTES = 64 << 20


def blas_threads() -> int:
    """The thread count numpy's BLAS was given (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, or the cores)."""
    return max(1, max((int(i["num_threads"]) for i in blas_controller().info()), default=1))


def _top(S: np.ndarray, rows: np.ndarray | int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best of scores ``S`` [B, n] (row ids ``rows`` + column), best first, ties by lower id."""
    n = S.shape[1]
    if k < n:
        part = np.argpartition(S, n - k, axis=1)[:, n - k:]
    else:
        part = np.broadcast_to(np.arange(n), S.shape)
    dis = np.take_along_axis(S, part, 1)
    ids = part + rows if isinstance(rows, int) else np.take_along_axis(rows, part, 1)
    order = np.lexsort((ids, -dis), axis=1)   # higher score first, ties by lower row id
    return np.take_along_axis(dis, order, 1), np.take_along_axis(ids, order, 1).astype(np.int64, copy=False)


def topk_inner_product(q: np.ndarray, x: np.ndarray, k: int,
                       threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores [B, k] float32 best first, row ids [B, k] int64) of the ``k`` rows of ``x`` [N, d] with
    the largest inner product with each query of ``q`` [B, d] (k is capped at N). The same bits for
    any ``threads`` (default: :func:`blas_threads`); chunks of :data:`CHUNK_ROWS` rows are multiplied
    single-threaded, side by side, and their top-k merged (exact)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    n = x.shape[0]
    k = min(int(k), n)
    out_s = np.empty((q.shape[0], k), np.float32)
    out_i = np.empty((q.shape[0], k), np.int64)
    chunks = list(range(0, n, CHUNK_ROWS))
    step = max(1, BLOCK_BYTES // (4 * min(n, CHUNK_ROWS)))
    workers = min(len(chunks), threads or blas_threads())
    with blas_controller().limit(limits=1), ThreadPoolExecutor(workers) if workers > 1 else nullcontext() as pool:
        for b in range(0, q.shape[0], step):
            qb = q[b:b + step]

            def chunk_top(c: int, qb: np.ndarray = qb) -> tuple[np.ndarray, np.ndarray]:
                S = qb @ x[c:c + CHUNK_ROWS].T
                return _top(S, c, min(k, S.shape[1]))

            parts = list(pool.map(chunk_top, chunks)) if pool is not None else [chunk_top(c) for c in chunks]
            if len(parts) == 1:
                out_s[b:b + step], out_i[b:b + step] = parts[0]
            else:
                out_s[b:b + step], out_i[b:b + step] = _top(np.concatenate([p[0] for p in parts], 1),
                                                            np.concatenate([p[1] for p in parts], 1), k)
    return out_s, out_i
