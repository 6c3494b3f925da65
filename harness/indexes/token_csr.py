"""Binary token index T(D) for SVDR beta search (index spec ``token-csr``).

Each passage is the *set* of its token ids: T(d)[v] = 1 when token v occurs in d (SVDR eq. 2).
Beta search scores a sparse vocabulary-space query E(q) against every passage,
``<E(q), T(d)>`` = the sum of the query's weights over the tokens the passage contains, and
returns the top k.

Layout (why). The index is an inverted, *blocked* CSC: passages are cut into blocks of
``BLOCK`` = 65,536 consecutive ids; inside each block every token has a posting list of the
block-local ids (``uint16``) of the passages that contain it. ``indptr[b, t] : indptr[b, t + 1]``
is the slice of ``postings`` for token t in block b (int64 offsets, shape [n_blocks, vocab + 1]).
Compared with the paper's CSR of passages x vocabulary multiplied by a dense query matrix:

* a query reads only the posting lists of its active tokens (~2.5 % of the index for 768 of
  30,522 dims) instead of every non-zero of the index once per query column;
* a block's float32 score accumulator (65,536 x 4 B = 256 KiB) stays in the L2 cache while the
  posting lists stream past, so the scatter-adds hit cache, not DRAM;
* local ids take 2 bytes per (passage, token): half of int32 postings and a fifth of a CSR with
  int64 column indices plus fp16 values;
* the kernel prefetches the next posting lists of the query (they are short inside a block), which
  hides the DRAM latency of jumping from list to list.

Scores are exact inner products in float32: each score is the sum of the query's float32 weights
over the shared tokens, accumulated in float32 in ascending token order (the numpy path adds in
the same order, so both paths return identical bits; a passage's score differs from the exactly
rounded sum by at most a few ulps). Results are ordered best first; equal scores are broken by the
lower passage id. Every passage is a candidate, including those with score 0, so with
``k <= n_docs`` exactly k passages come back; with ``k > n_docs`` the missing slots are padded with
score ``-inf`` and id ``-1``.

Search runs a compiled kernel (numba; parallel over queries, and over passage segments when a batch
has fewer queries than threads) when numba is installed, else a pure-numpy path (``np.add.at`` over
the gathered postings, one query at a time) that returns the same scores and ids;
``HARNESS_NO_NUMBA=1`` or ``search(..., backend="numpy")`` forces the latter.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice, pairwise
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, DataError

BLOCK_BITS = 16
BLOCK = 1 << BLOCK_BITS  # passages per block; block-local ids fit in uint16
MAGIC = b"HTOKCSR1"
FORMAT_VERSION = 1
_ALIGN = 64
_SENTINEL = np.iinfo(np.int64).max  # id of an empty top-k slot inside the kernels

try:  # optional compiled kernel; the numpy path below is the reference and the fallback
    import numba as _numba
except ImportError:  # pragma: no cover - exercised by forcing backend="numpy" in the tests
    _numba = None


# --------------------------------------------------------------------------------------------
# compiled search kernel
# --------------------------------------------------------------------------------------------
FREQUENT_DF = 1 / 64  # tokens in >= this share of the passages go through the batched tile pass
GROUP = 32  # queries per tile (lanes); larger batches are split into groups
SUB_BLOCK = 2048  # passages per tile: 2048 x 32 lanes x 4 B = 256 KiB, in L2 with the postings
FREQ_PREFETCH = 4  # frequent lists ahead whose current cache lines are prefetched in the tile pass
PREFETCH_DISTANCE = 8  # posting lists ahead whose first cache lines are prefetched
PREFETCH_LINES = 6  # cache lines (of 32 postings) prefetched per list; a list averages ~6 per block

if _numba is not None:
    from numba import types as _nbtypes
    from numba.core import cgutils as _cgutils
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _prefetch(typingctx, arr, idx):  # pragma: no cover - compiled
        """``prefetcht0 &arr[idx]`` (LLVM's llvm.prefetch: read, high locality, data cache)."""
        sig = _nbtypes.void(arr, idx)

        def codegen(context, builder, signature, args):
            from llvmlite import ir

            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = _cgutils.get_item_pointer(
                context, builder, aryty, ary, [args[1]], wraparound=False, boundscheck=False
            )
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = _cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    def _make_vadd(width: int) -> Any:
        @_intrinsic
        def _vadd(typingctx, dst, doff, src, soff):  # pragma: no cover - compiled
            """``dst[doff:doff + width] += src[soff:soff + width]`` as one LLVM vector load/add/store
            (float32; numba's own loop re-checks aliasing per call and runs ~2x slower)."""
            sig = _nbtypes.void(dst, doff, src, soff)

            def codegen(context, builder, signature, args):
                from llvmlite import ir

                dty, _, sty, _ = signature.args
                d = context.make_array(dty)(context, builder, args[0])
                s = context.make_array(sty)(context, builder, args[2])
                dp = _cgutils.get_item_pointer(context, builder, dty, d, [args[1]], wraparound=False, boundscheck=False)
                sp = _cgutils.get_item_pointer(context, builder, sty, s, [args[3]], wraparound=False, boundscheck=False)
                vp = ir.VectorType(ir.FloatType(), width).as_pointer()
                dvp = builder.bitcast(dp, vp)
                a = builder.load(dvp)
                a.align = 4
                b = builder.load(builder.bitcast(sp, vp))
                b.align = 4
                st = builder.store(builder.fadd(a, b), dvp)
                st.align = 4
                return context.get_dummy_value()

            return sig, codegen

        return _vadd

    _vadd8 = _make_vadd(8)
    _vadd16 = _make_vadd(16)

    @_numba.njit(cache=True, inline="always")
    def _no_prefetch(arr, idx):  # pragma: no cover - compiled
        pass

    @_numba.njit(cache=True, inline="always")
    def _vadd8_plain(dst, doff, src, soff):  # pragma: no cover - compiled
        for j in range(8):
            dst[doff + j] += src[soff + j]

    @_numba.njit(cache=True, inline="always")
    def _vadd16_plain(dst, doff, src, soff):  # pragma: no cover - compiled
        for j in range(16):
            dst[doff + j] += src[soff + j]

    @_numba.njit(cache=True, inline="always")
    def _worse(hs, hi, a, b):  # pragma: no cover - compiled
        """True when heap slot a ranks below slot b (lower score, or equal score and higher id)."""
        return hs[a] < hs[b] or (hs[a] == hs[b] and hi[a] > hi[b])

    @_numba.njit(cache=True)
    def _heap_replace_root(hs, hi, score, doc):  # pragma: no cover - compiled
        """Put (score, doc) at the root of the min-heap of the current top k and sift it down."""
        k = hs.shape[0]
        hs[0] = score
        hi[0] = doc
        i = 0
        while True:
            c = 2 * i + 1
            if c >= k:
                break
            if c + 1 < k and _worse(hs, hi, c + 1, c):
                c += 1
            if _worse(hs, hi, c, i):
                hs[i], hs[c] = hs[c], hs[i]
                hi[i], hi[c] = hi[c], hi[i]
                i = c
            else:
                break

    def _search_kernel_py(indptr, postings, n_docs, r_indptr, r_tok, r_w, f_ptr, f_tok, f_w, group, sub,
                          n_seg, out_s, out_i):  # pragma: no cover - compiled
        """Top k of each query over each passage segment; out_s/out_i ([n_seg, B, k], preset to
        -inf / sentinel) end as min-heaps.

        Per (segment, query group of <= ``group`` queries), per block: (1) the *rare* pass: each
        query's rare tokens (``r_*``, CSR by query, ascending ids) are scatter-added into that
        query's column ``col[qi]`` of block-local float32 scores; (2) the *frequent* pass, in
        sub-blocks of ``sub`` passages: the columns are transposed into a tile [sub, Bp] (one row
        per passage, one lane per query), every frequent token of the group (``f_tok``, ascending,
        weights ``f_w[u]`` = a Bp-vector with 0 for queries without it) adds its weight vector to
        the rows of its postings (SIMD), and the rows are offered to the per-query heaps.
        A score is therefore the float32 sum over the query's rare tokens, then its frequent
        tokens, each in ascending id order (the numpy path adds in the same order).
        """
        n_blocks = indptr.shape[0]
        n_q = r_indptr.shape[0] - 1
        n_groups = f_ptr.shape[0] - 1
        Bp = f_w.shape[0] // max(1, f_tok.shape[0])
        for task in _numba.prange(n_seg * n_groups):
            seg = task // n_groups
            g = task % n_groups
            q0 = g * group
            ng = min(group, n_q - q0)
            b0 = seg * n_blocks // n_seg
            b1 = (seg + 1) * n_blocks // n_seg
            u0 = f_ptr[g]
            u1 = f_ptr[g + 1]
            col = np.zeros((ng, BLOCK), np.float32)
            tile = np.zeros(sub * Bp, np.float32)
            thr = np.full(Bp, np.inf, np.float32)  # lanes beyond ng never qualify
            cur = np.empty(u1 - u0, np.int64)
            hs = out_s[seg]
            hi = out_i[seg]
            for b in range(b0, b1):
                row = indptr[b]
                base = b * BLOCK
                nb = min(BLOCK, n_docs - base)
                # (1) rare tokens, query by query: the column (256 KiB) stays in L2
                for qi in range(ng):
                    c = col[qi]
                    j0 = r_indptr[q0 + qi]
                    j1 = r_indptr[q0 + qi + 1]
                    for j in range(j0, min(j0 + PREFETCH_DISTANCE, j1)):
                        s0 = row[r_tok[j]]
                        e0 = row[r_tok[j] + 1]
                        for line in range(PREFETCH_LINES):
                            if s0 + 32 * line < e0:
                                _prefetch(postings, s0 + 32 * line)
                    for j in range(j0, j1):
                        if j + PREFETCH_DISTANCE < j1:
                            t2 = r_tok[j + PREFETCH_DISTANCE]
                            s0 = row[t2]
                            e0 = row[t2 + 1]
                            for line in range(PREFETCH_LINES):
                                if s0 + 32 * line < e0:
                                    _prefetch(postings, s0 + 32 * line)
                        t = r_tok[j]
                        w = r_w[j]
                        for x in postings[row[t] : row[t + 1]]:  # iterating a view: no wrap-around checks
                            c[x] += w
                for qi in range(ng):
                    thr[qi] = hs[q0 + qi, 0]
                if u1 == u0:
                    # no frequent token in this group: offer the columns to the heaps directly
                    for qi in range(ng):
                        c = col[qi]
                        q = q0 + qi
                        t0 = thr[qi]
                        nfull = nb - nb % 64
                        for d0 in range(0, nfull, 64):
                            hits = 0
                            for i in range(64):
                                hits += c[d0 + i] > t0
                            if hits:
                                for d in range(d0, d0 + 64):
                                    v = c[d]
                                    if v > t0:
                                        _heap_replace_root(hs[q], hi[q], v, base + d)
                                        t0 = hs[q, 0]
                        for d in range(nfull, nb):
                            v = c[d]
                            if v > t0:
                                _heap_replace_root(hs[q], hi[q], v, base + d)
                                t0 = hs[q, 0]
                        c[:nb] = 0.0
                    continue
                # (2) frequent tokens, sub-block by sub-block on a [sub, Bp] tile
                for u in range(u0, u1):
                    cur[u - u0] = row[f_tok[u]]
                for lo in range(0, nb, sub):
                    n = min(sub, nb - lo)
                    hi_ = lo + n
                    for qi in range(ng):
                        c = col[qi]
                        for x in range(n):
                            tile[x * Bp + qi] = c[lo + x]
                        c[lo:hi_] = 0.0
                    for u in range(u0, u1):
                        if u + FREQ_PREFETCH < u1:  # the lists are far apart: fetch ahead
                            pf = cur[u + FREQ_PREFETCH - u0]
                            _prefetch(postings, pf)
                            _prefetch(postings, pf + 32)
                        p0 = cur[u - u0]
                        e = row[f_tok[u] + 1]
                        p1 = p0
                        while p1 < e and postings[p1] < hi_:
                            p1 += 1
                        cur[u - u0] = p1
                        wo = u * Bp
                        for x in postings[p0:p1]:
                            o = (np.int64(x) - lo) * Bp
                            for j in range(0, Bp - 15, 16):  # the row's lanes: vector adds
                                _vadd16(tile, o + j, f_w, wo + j)
                            if Bp % 16:
                                _vadd8(tile, o + Bp - 8, f_w, wo + Bp - 8)
                    for x in range(n):
                        a = tile[x * Bp :]
                        hit = False
                        for j in range(Bp):
                            hit |= a[j] > thr[j]
                        if hit:
                            for qi in range(ng):
                                v = a[qi]
                                if v > thr[qi]:
                                    q = q0 + qi
                                    _heap_replace_root(hs[q], hi[q], v, base + lo + x)
                                    thr[qi] = hs[q, 0]

    _search_kernel = _numba.njit(cache=True, parallel=True, nogil=True)(_search_kernel_py)
    _search_kernel_plain = None  # the same kernel without prefetch, compiled only if the intrinsic fails


def _run_kernel(*args: Any) -> None:
    """Run the compiled kernel; if the prefetch intrinsic does not compile here, use a copy without it."""
    global _search_kernel_plain
    if _search_kernel_plain is None:
        try:
            _search_kernel(*args)
            return
        except (_numba.core.errors.NumbaError, RuntimeError) as exc:  # typing/lowering/LLVM failures
            import types
            import warnings

            warnings.warn(f"token-csr: prefetching kernel failed to compile ({type(exc).__name__}); "
                          "using the kernel without prefetch", RuntimeWarning, stacklevel=3)
            py = _search_kernel_py
            glob = dict(py.__globals__, _prefetch=_no_prefetch, _vadd8=_vadd8_plain, _vadd16=_vadd16_plain)
            _search_kernel_plain = _numba.njit(parallel=True, nogil=True)(
                types.FunctionType(py.__code__, glob, py.__name__, py.__defaults__, py.__closure__)
            )
    _search_kernel_plain(*args)


def numba_available() -> bool:
    """Whether the compiled kernel can be used (numba installed and not disabled)."""
    return _numba is not None and not os.environ.get("HARNESS_NO_NUMBA")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _check_vocab_size(vocab_size: Any) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise ConfigError(f"token-csr: vocab_size must be a positive integer, got {vocab_size!r}")
    if vocab_size >= 2**31 - 1:
        raise ConfigError(f"token-csr: vocab_size {vocab_size} is too large (limit 2**31 - 2)")
    return int(vocab_size)


def _flatten_block(chunk: list[Any], start: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a list of documents as one int64 array, plus each document's length."""
    try:
        lens = np.fromiter((len(d) for d in chunk), dtype=np.int64, count=len(chunk))
    except TypeError:
        for i, d in enumerate(chunk):
            if not hasattr(d, "__len__"):
                raise ConfigError(
                    f"token-csr: document {start + i} is not a sequence of token ids (got {type(d).__name__})"
                ) from None
        raise
    if all(isinstance(d, np.ndarray) for d in chunk):
        flat = np.concatenate([d.ravel() for d in chunk]) if chunk else np.zeros(0, np.int64)
    else:
        flat = np.array(list(chain.from_iterable(chunk)))
    if flat.size == 0:
        return np.zeros(0, np.int64), lens
    if flat.dtype.kind not in "iu" or flat.size != int(lens.sum()):
        # name the first document whose ids are not plain integers
        for i, d in enumerate(chunk):
            a = np.asarray(d)
            if a.size and (a.dtype.kind not in "iu" or a.ndim != 1):
                raise ConfigError(
                    f"token-csr: document {start + i} holds non-integer token ids (dtype {a.dtype})",
                    fix="pass lists of int token ids",
                )
        raise ConfigError(f"token-csr: documents {start}..{start + len(chunk) - 1} hold non-integer token ids")
    return flat.astype(np.int64, copy=False), lens


def _block_csc(flat: np.ndarray, lens: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-token sorted, de-duplicated local ids of one block: (counts [vocab], postings uint16)."""
    local = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
    small = vocab_size <= (2**31 - 1) >> BLOCK_BITS
    key = (flat << BLOCK_BITS) | local
    if small:
        key = key.astype(np.int32)
    key = np.sort(key)  # by (token, local id); np.unique would hash first, several times slower
    if key.size > 1:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]  # a repeated token counts once
    counts = np.bincount((key >> BLOCK_BITS).astype(np.int64), minlength=vocab_size)
    return counts, (key & (BLOCK - 1)).astype(np.uint16)


def _as_query_csr(queries: Any, vocab_size: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """(B, indptr, token ids, float32 weights) of the queries' non-zero entries, row by row."""
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover
        sp = None
    if sp is not None and sp.issparse(queries):
        if queries.ndim != 2 or queries.shape[1] != vocab_size:
            raise ConfigError(f"token-csr: queries have shape {queries.shape}, expected [B, {vocab_size}]")
        m = sp.csr_matrix(queries, dtype=np.float32, copy=True)
        m.sum_duplicates()
        m.eliminate_zeros()
        m.sort_indices()
        indptr, tok, w = m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data
    else:
        q = np.asarray(queries)
        if q.dtype.kind not in "fiub":
            raise ConfigError(f"token-csr: queries must be a float array or a scipy sparse matrix, got {q.dtype}")
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != vocab_size:
            raise ConfigError(f"token-csr: queries have shape {q.shape}, expected [B, {vocab_size}]")
        q = q.astype(np.float32, copy=False)
        rows, tok = np.nonzero(q)
        w = q[rows, tok]
        indptr = np.zeros(q.shape[0] + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=q.shape[0]), out=indptr[1:])
        tok = tok.astype(np.int64)
    if not np.all(np.isfinite(w)):
        bad = int(np.searchsorted(indptr, int(np.flatnonzero(~np.isfinite(w))[0]), side="right") - 1)
        raise ConfigError(f"token-csr: query {bad} has a non-finite weight (nan or inf)")
    return int(indptr.size - 1), indptr, tok, np.ascontiguousarray(w, dtype=np.float32)


def _order_results(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row best first (score desc, id asc); empty slots become (-inf, -1) at the end."""
    order = np.lexsort((ids, -scores.astype(np.float64)), axis=-1)
    scores = np.take_along_axis(scores, order, axis=-1)
    ids = np.take_along_axis(ids, order, axis=-1)
    ids[ids == _SENTINEL] = -1
    return scores, ids


def _topk_row(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k of one float32 score row: score desc, ties by lower id (unsorted output)."""
    n = s.size
    if k >= n:
        idx = np.arange(n, dtype=np.int64)
    else:
        kth = -np.partition(-s, k - 1)[k - 1]
        above = np.flatnonzero(s > kth)
        ties = np.flatnonzero(s == kth)[: k - above.size]
        idx = np.concatenate([above, ties]).astype(np.int64)
    return s[idx], idx


def _aligned_zeros(n: int) -> np.ndarray:
    """float32 zeros whose first element sits on a 64-byte boundary (numpy only promises 16)."""
    raw = np.zeros(n + 16, np.float32)
    start = (-(raw.ctypes.data // 4)) % 16
    return raw[start : start + n]


def _kernel_inputs(
    n_q: int, q_indptr: np.ndarray, q_tok: np.ndarray, q_w: np.ndarray, n_rare: np.ndarray, vocab: int
) -> tuple[np.ndarray, ...]:
    """The kernel's query arrays from canonically ordered rows (rare part first in each row):
    rare tokens as CSR by query; frequent tokens per query group of ``GROUP`` (ascending ids, one
    Bp-vector of weights each, lane = query within the group, 0 for queries without the token)."""
    rows = np.repeat(np.arange(n_q, dtype=np.int64), np.diff(q_indptr))
    pos = np.arange(q_tok.size, dtype=np.int64) - q_indptr[rows]
    rare = pos < n_rare[rows]
    r_indptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(n_rare, out=r_indptr[1:])
    group = min(GROUP, n_q)
    n_groups = -(-n_q // group)
    bp = -(-group // 8) * 8  # lanes: a multiple of 8 floats (one AVX register)
    fr = ~rare
    f_rows, f_tok_all, f_w_all = rows[fr], q_tok[fr], q_w[fr]
    key = (f_rows // group) * vocab + f_tok_all
    uniq, inv = np.unique(key, return_inverse=True)
    f_w = _aligned_zeros(max(1, uniq.size) * bp).reshape(-1, bp)  # rows on 64-byte lines (vector loads)
    f_w[inv, f_rows % group] = f_w_all
    f_w = f_w.ravel()  # flat [n_frequent * bp]
    f_ptr = np.searchsorted(uniq // vocab, np.arange(n_groups + 1)).astype(np.int64)
    return (r_indptr, np.ascontiguousarray(q_tok[rare]), np.ascontiguousarray(q_w[rare]), f_ptr,
            (uniq % vocab).astype(np.int64), f_w)


# --------------------------------------------------------------------------------------------
# the index
# --------------------------------------------------------------------------------------------
class BinaryTokenIndex:
    """Binary bag-of-tokens passage index with exact top-k inner-product search (see module doc)."""

    def __init__(self, indptr: np.ndarray, postings: np.ndarray, n_docs: int, vocab_size: int) -> None:
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.postings = np.ascontiguousarray(postings, dtype=np.uint16)
        self._n_docs = int(n_docs)
        self._vocab_size = _check_vocab_size(vocab_size)
        problem = self._structure_problem()
        if problem:
            raise DataError(f"token-csr: inconsistent index arrays: {problem}")

    # ---- properties -----------------------------------------------------------------------
    @property
    def n_docs(self) -> int:
        return self._n_docs

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def nnz(self) -> int:
        """Number of (passage, token) pairs stored."""
        return int(self.postings.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held in memory (offsets + postings)."""
        return int(self.indptr.nbytes + self.postings.nbytes)

    @property
    def n_blocks(self) -> int:
        return int(self.indptr.shape[0])

    def __repr__(self) -> str:
        return (
            f"BinaryTokenIndex(n_docs={self.n_docs}, vocab_size={self.vocab_size}, nnz={self.nnz}, "
            f"nbytes={self.nbytes})"
        )

    def _structure_problem(self) -> str | None:
        """Describe the first broken invariant of the arrays, or None (O(n_blocks * vocab))."""
        n_blocks = -(-self._n_docs // BLOCK) if self._n_docs > 0 else 0
        ip = self.indptr
        if self._n_docs < 0:
            return f"n_docs is {self._n_docs}"
        if ip.ndim != 2 or ip.shape != (n_blocks, self._vocab_size + 1):
            return f"offsets have shape {ip.shape}, expected {(n_blocks, self._vocab_size + 1)}"
        if self.postings.ndim != 1:
            return "postings are not 1-d"
        if n_blocks == 0:
            return None if self.postings.size == 0 else "postings present but no passages"
        if ip[0, 0] != 0 or ip[-1, -1] != self.postings.size:
            return f"offsets span [{ip[0, 0]}, {ip[-1, -1]}], expected [0, {self.postings.size}]"
        if np.any(np.diff(ip, axis=1) < 0) or np.any(ip[1:, 0] != ip[:-1, -1]):
            return "offsets are not non-decreasing"
        last = self.postings[ip[-1, 0]:]
        last_n = self._n_docs - (n_blocks - 1) * BLOCK
        if last.size and int(last.max()) >= last_n:
            return f"a posting of the last block points past passage {self._n_docs - 1}"
        return None

    # ---- building -------------------------------------------------------------------------
    @classmethod
    def from_token_ids(cls, docs: Iterable[Sequence[int]], vocab_size: int) -> BinaryTokenIndex:
        """Build from each passage's token ids (repeats count once); streams BLOCK passages at a time.

        Raises ConfigError naming the passage position for ids outside [0, vocab_size).
        """
        vocab_size = _check_vocab_size(vocab_size)
        it = iter(docs)
        counts_list: list[np.ndarray] = []
        postings_list: list[np.ndarray] = []
        n_docs = 0
        while True:
            chunk = list(islice(it, BLOCK))
            if not chunk:
                break
            flat, lens = _flatten_block(chunk, n_docs)
            if flat.size:
                bad = (flat < 0) | (flat >= vocab_size)
                if bad.any():
                    first = int(np.argmax(bad))
                    doc = n_docs + int(np.searchsorted(np.cumsum(lens), first, side="right"))
                    raise ConfigError(
                        f"token-csr: document {doc} has token id {int(flat[first])} outside [0, {vocab_size})",
                        fix="build with the tokenizer's full vocabulary size",
                    )
            counts, post = _block_csc(flat, lens, vocab_size)
            counts_list.append(counts)
            postings_list.append(post)
            n_docs += len(chunk)
            if len(chunk) < BLOCK:
                break
        return cls._assemble(counts_list, postings_list, n_docs, vocab_size)

    @classmethod
    def _assemble(
        cls, counts_list: list[np.ndarray], postings_list: list[np.ndarray], n_docs: int, vocab_size: int
    ) -> BinaryTokenIndex:
        n_blocks = len(counts_list)
        flat_counts = np.concatenate(counts_list) if n_blocks else np.zeros(0, np.int64)
        starts = np.zeros(flat_counts.size + 1, np.int64)
        np.cumsum(flat_counts, out=starts[1:])
        indptr = np.empty((n_blocks, vocab_size + 1), np.int64)
        for b in range(n_blocks):
            indptr[b] = starts[b * vocab_size : (b + 1) * vocab_size + 1]
        postings = np.concatenate(postings_list) if postings_list else np.zeros(0, np.uint16)
        return cls(indptr, postings, n_docs, vocab_size)

    @classmethod
    def from_postings(
        cls, indptr: np.ndarray, doc_ids: np.ndarray, n_docs: int, vocab_size: int, *, chunk: int = 1 << 22
    ) -> BinaryTokenIndex:
        """Build from token-major CSC postings: token t's sorted, distinct passage ids are
        ``doc_ids[indptr[t]:indptr[t + 1]]`` (e.g. a scipy CSC matrix's indptr/indices)."""
        vocab_size = _check_vocab_size(vocab_size)
        indptr = np.asarray(indptr, dtype=np.int64)
        doc_ids = np.asarray(doc_ids)
        if indptr.shape != (vocab_size + 1,) or indptr[0] != 0 or indptr[-1] != doc_ids.size:
            raise ConfigError(f"token-csr: postings offsets must have shape [{vocab_size + 1}] and span the ids")
        if np.any(np.diff(indptr) < 0):
            raise ConfigError("token-csr: postings offsets are not non-decreasing")
        if doc_ids.size and (doc_ids.dtype.kind not in "iu" or doc_ids.min() < 0 or doc_ids.max() >= n_docs):
            raise ConfigError(f"token-csr: posting ids must be integers in [0, {n_docs})")
        if doc_ids.size > 1:
            inc = np.diff(doc_ids.astype(np.int64)) > 0
            inc[indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < doc_ids.size)] - 1] = True
            if not inc.all():
                raise ConfigError("token-csr: each token's posting ids must be sorted and distinct")
        n_blocks = -(-n_docs // BLOCK) if n_docs > 0 else 0
        lengths = np.diff(indptr)
        # token chunks of about `chunk` postings
        bounds = [0]
        cum = indptr[1:]
        while bounds[-1] < vocab_size:
            nxt = int(np.searchsorted(cum, indptr[bounds[-1]] + chunk, side="right"))
            bounds.append(max(nxt, bounds[-1] + 1))
        bounds[-1] = min(bounds[-1], vocab_size)
        counts = np.zeros((n_blocks, vocab_size), np.int64)
        for t0, t1 in pairwise(bounds):
            d = doc_ids[indptr[t0] : indptr[t1]].astype(np.int64)
            tok = np.repeat(np.arange(t1 - t0, dtype=np.int64), lengths[t0:t1])
            c = np.bincount((d >> BLOCK_BITS) * (t1 - t0) + tok, minlength=n_blocks * (t1 - t0))
            counts[:, t0:t1] = c.reshape(n_blocks, t1 - t0)
        starts = np.zeros(n_blocks * vocab_size + 1, np.int64)
        np.cumsum(counts.ravel(), out=starts[1:])
        blocked = starts[:-1].reshape(n_blocks, vocab_size)
        # global position of the first posting of (token, block) in the token-major input
        gstart = indptr[:-1][None, :] + np.cumsum(counts, axis=0) - counts
        offset = blocked - gstart  # destination = source position + offset[block, token]
        postings = np.empty(doc_ids.size, np.uint16)
        for t0, t1 in pairwise(bounds):
            lo, hi = int(indptr[t0]), int(indptr[t1])
            d = doc_ids[lo:hi].astype(np.int64)
            tok = np.repeat(np.arange(t0, t1, dtype=np.int64), lengths[t0:t1])
            dest = np.arange(lo, hi, dtype=np.int64) + offset[d >> BLOCK_BITS, tok]
            postings[dest] = d & (BLOCK - 1)
        full = np.empty((n_blocks, vocab_size + 1), np.int64)
        full[:, :vocab_size] = blocked
        full[:, vocab_size] = starts[vocab_size :: vocab_size][:n_blocks] if n_blocks else 0
        return cls(full, postings, n_docs, vocab_size)

    @classmethod
    def from_scipy(cls, matrix: Any) -> BinaryTokenIndex:
        """Build from a scipy sparse [n_docs, vocab] matrix; every stored non-zero means 'present'."""
        import scipy.sparse as sp

        if not sp.issparse(matrix) or matrix.ndim != 2:
            raise ConfigError("token-csr: from_scipy needs a 2-d scipy sparse matrix [n_docs, vocab]")
        m = sp.csc_matrix(matrix, copy=True)
        m.sum_duplicates()
        m.eliminate_zeros()
        m.sort_indices()
        return cls.from_postings(m.indptr, m.indices, m.shape[0], m.shape[1])

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        tokenizer: Any,
        max_length: int | None = None,
        batch_size: int = 1024,
    ) -> BinaryTokenIndex:
        """Tokenise (no special tokens; truncated to max_length when given) and build.

        A HF *fast* tokenizer encodes each batch on all cores (Rust, rayon), so larger batches
        parallelise better; no model is run. vocab_size is ``len(tokenizer)``.
        """
        if batch_size < 1:
            raise ConfigError(f"token-csr: batch_size must be >= 1, got {batch_size}")
        return cls.from_token_ids(
            _tokenize(texts, tokenizer, max_length, batch_size), vocab_size=len(tokenizer)
        )

    def to_scipy_csr(self, dtype: Any = np.float32) -> Any:
        """The index as a scipy CSR matrix [n_docs, vocab] with int32 indices (ones as values)."""
        import scipy.sparse as sp

        blocks = []
        for b in range(self.n_blocks):
            row = self.indptr[b]
            nb = min(BLOCK, self.n_docs - b * BLOCK)
            seg = self.postings[row[0] : row[-1]].astype(np.int32)
            csc = sp.csc_matrix(
                (np.ones(seg.size, dtype), seg, (row - row[0]).astype(np.int64)), shape=(nb, self.vocab_size)
            )
            blocks.append(csc.tocsr())
        if not blocks:
            return sp.csr_matrix((0, self.vocab_size), dtype=dtype)
        out = sp.vstack(blocks, format="csr")
        out.indices = out.indices.astype(np.int32)
        out.indptr = out.indptr.astype(np.int64 if out.nnz >= 2**31 else np.int32)
        return out

    # ---- search ---------------------------------------------------------------------------
    def search(self, queries: Any, k: int, *, backend: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of ``<query, T(d)>`` for each query row.

        ``queries``: float array [B, vocab] (or [vocab]) or scipy sparse matrix; weights are read
        as float32 and may be any finite values. Returns (scores float32, ids int64), both [B, k],
        best first, ties by the lower id, padded with (-inf, -1) beyond n_docs.
        ``backend``: "numba", "numpy" or None (numba when available).
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ConfigError(f"token-csr: k must be a non-negative integer, got {k!r}")
        k = int(k)
        n_q, q_indptr, q_tok, q_w = _as_query_csr(queries, self.vocab_size)
        if backend is None:
            backend = "numba" if numba_available() else "numpy"
        if backend not in ("numba", "numpy"):
            raise ConfigError(f"token-csr: unknown search backend {backend!r} (known: numba, numpy)")
        if backend == "numba" and _numba is None:
            raise ConfigError("token-csr: backend 'numba' requested but numba is not installed",
                              fix="pip install numba==0.68.1")
        scores = np.full((n_q, k), -np.inf, np.float32)
        ids = np.full((n_q, k), -1, np.int64)
        kk = min(k, self.n_docs)  # slots beyond n_docs stay (-inf, -1)
        if n_q == 0 or kk == 0:
            return scores, ids
        q_tok, q_w, n_rare = self._canonical_order(n_q, q_indptr, q_tok, q_w)
        if backend == "numba":
            args = _kernel_inputs(n_q, q_indptr, q_tok, q_w, n_rare, self.vocab_size)
            # segments of blocks x query groups: at least one task per thread
            n_groups = args[3].shape[0] - 1
            n_seg = max(1, min(self.n_blocks, -(-_numba.get_num_threads() // n_groups)))
            out_s = np.full((n_seg, n_q, kk), -np.inf, np.float32)
            out_i = np.full((n_seg, n_q, kk), _SENTINEL, np.int64)
            _run_kernel(self.indptr, self.postings, self.n_docs, *args, GROUP, SUB_BLOCK, n_seg, out_s, out_i)
            top_s, top_i = _order_results(out_s.transpose(1, 0, 2).reshape(n_q, -1),
                                          out_i.transpose(1, 0, 2).reshape(n_q, -1))
        else:
            top_s = np.empty((n_q, kk), np.float32)
            top_i = np.empty((n_q, kk), np.int64)
            for q in range(n_q):
                s = self._scores_one(q_tok[q_indptr[q] : q_indptr[q + 1]], q_w[q_indptr[q] : q_indptr[q + 1]])
                top_s[q], top_i[q] = _topk_row(s, kk)
            top_s, top_i = _order_results(top_s, top_i)
        scores[:, :kk] = top_s[:, :kk]
        ids[:, :kk] = top_i[:, :kk]
        return scores, ids

    def scores(self, queries: Any) -> np.ndarray:
        """All scores [B, n_docs] (float32) with the numpy path; for checks on small indexes."""
        n_q, q_indptr, q_tok, q_w = _as_query_csr(queries, self.vocab_size)
        q_tok, q_w, _ = self._canonical_order(n_q, q_indptr, q_tok, q_w)
        out = np.zeros((n_q, self.n_docs), np.float32)
        for q in range(n_q):
            out[q] = self._scores_one(q_tok[q_indptr[q] : q_indptr[q + 1]], q_w[q_indptr[q] : q_indptr[q + 1]])
        return out

    def frequent_tokens(self) -> np.ndarray:
        """Mask [vocab] of the *frequent* tokens: those in at least ``FREQUENT_DF`` of the passages.

        A property of the index alone (not of a query batch), so a query's summation order, hence
        its float32 scores, does not depend on the other queries it is batched with."""
        key = (FREQUENT_DF, self.n_docs)
        if getattr(self, "_frequent", None) is None or self._frequent[0] != key:
            df = np.zeros(self.vocab_size, np.int64)
            for b in range(self.n_blocks):  # row by row: no [n_blocks, vocab] temporary
                df += np.diff(self.indptr[b])
            mask = (df > 0) & (df >= FREQUENT_DF * self.n_docs)
            self._frequent = (key, mask)
        return self._frequent[1]

    def _canonical_order(
        self, n_q: int, q_indptr: np.ndarray, q_tok: np.ndarray, q_w: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each query's entries reordered into the summation order of both paths: its rare tokens
        (ascending ids), then its frequent tokens (ascending). Also returns each row's rare count."""
        freq = self.frequent_tokens()[q_tok]
        rows = np.repeat(np.arange(n_q, dtype=np.int64), np.diff(q_indptr))
        order = np.lexsort((freq, rows))  # stable: ascending ids kept inside each part
        n_rare = np.bincount(rows[~freq], minlength=n_q).astype(np.int64)
        return q_tok[order], q_w[order], n_rare

    def _scores_one(self, tok: np.ndarray, w: np.ndarray) -> np.ndarray:
        """One query's float32 scores over all passages, added in the given token order (the
        canonical order of :meth:`_canonical_order`, as the kernel adds them)."""
        ip = self.indptr
        acc = np.zeros(self.n_docs, np.float32)
        if tok.size == 0 or self.n_blocks == 0:
            return acc
        starts = ip[:, tok]  # [n_blocks, n_active]
        lens = ip[:, tok + 1] - starts
        # order (token, block): np.add.at adds in array order, so each passage's terms come in
        # query-token order, the order of the compiled kernel; both give the same float32 sums
        starts_t, lens_t = starts.T.ravel(), lens.T.ravel()
        total = int(lens_t.sum())
        if total == 0:
            return acc
        base_t = np.tile(np.arange(self.n_blocks, dtype=np.int64) * BLOCK, tok.size)
        ends = np.cumsum(lens_t)
        pos = np.arange(total, dtype=np.int64) + np.repeat(starts_t - (ends - lens_t), lens_t)
        docs = self.postings[pos].astype(np.int64) + np.repeat(base_t, lens_t)
        weights = np.repeat(np.repeat(w.astype(np.float32), self.n_blocks), lens_t)
        np.add.at(acc, docs, weights)
        return acc

    # ---- persistence ----------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write one file (header + arrays + CRC32s) via a temporary name and an atomic rename."""
        path = Path(path)
        arrays = {"indptr": self.indptr, "postings": self.postings}
        entries = []
        offset = 0  # relative to the data start
        for name, arr in arrays.items():
            offset = -(-offset // _ALIGN) * _ALIGN
            entries.append({
                "name": name, "dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset,
                "nbytes": int(arr.nbytes), "crc32": zlib.crc32(arr.reshape(-1).view(np.uint8)),
            })
            offset += arr.nbytes
        header = json.dumps({
            "format": FORMAT_VERSION, "kind": "token-csr", "n_docs": self.n_docs,
            "vocab_size": self.vocab_size, "block": BLOCK, "nnz": self.nnz, "arrays": entries,
        }).encode()
        data_start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                f.write(MAGIC + struct.pack("<Q", len(header)) + header)
                for entry, arr in zip(entries, arrays.values()):
                    f.write(b"\0" * (data_start + entry["offset"] - f.tell()))
                    arr.tofile(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BinaryTokenIndex:
        """Read a file written by save(); DataError naming the file if it is truncated or corrupt."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"token-csr index file {path} does not exist")
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + 8)
            if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
                raise DataError(f"{path} is not a token-csr index file (bad magic or truncated header)")
            (hlen,) = struct.unpack("<Q", head[len(MAGIC) :])
            if hlen > size:
                raise DataError(f"token-csr index file {path} is truncated or corrupt (header length {hlen})")
            try:
                meta = json.loads(f.read(hlen).decode())
                entries = {e["name"]: e for e in meta["arrays"]}
                n_docs, vocab_size = int(meta["n_docs"]), int(meta["vocab_size"])
                if meta.get("format") != FORMAT_VERSION or meta.get("block") != BLOCK:
                    raise DataError(
                        f"token-csr index file {path} has format {meta.get('format')}/block {meta.get('block')};"
                        f" this code reads format {FORMAT_VERSION}/block {BLOCK}",
                        fix="rebuild the index",
                    )
                data_start = -(-(len(MAGIC) + 8 + hlen) // _ALIGN) * _ALIGN
                expected = max(data_start + e["offset"] + e["nbytes"] for e in entries.values())
            except DataError:
                raise
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
                raise DataError(f"token-csr index file {path} has a corrupt header ({exc})") from None
            if size != expected:
                raise DataError(
                    f"token-csr index file {path} is truncated or corrupt: {size} bytes, expected {expected}",
                    fix="rebuild the index",
                )
            arrays = {}
            for name in ("indptr", "postings"):
                if name not in entries:
                    raise DataError(f"token-csr index file {path} lacks the array {name!r}")
                e = entries[name]
                try:
                    dtype = np.dtype(e["dtype"])
                    count = int(np.prod(e["shape"], dtype=np.int64))
                except (TypeError, ValueError) as exc:
                    raise DataError(f"token-csr index file {path} has a corrupt header ({exc})") from None
                if count * dtype.itemsize != e["nbytes"]:
                    raise DataError(f"token-csr index file {path} has a corrupt header (array {name})")
                f.seek(data_start + e["offset"])
                arr = np.fromfile(f, dtype=dtype, count=count)
                if arr.size != count or zlib.crc32(arr.view(np.uint8)) != e["crc32"]:
                    raise DataError(
                        f"token-csr index file {path} is corrupt: checksum mismatch in {name!r}",
                        fix="rebuild the index",
                    )
                arrays[name] = arr.reshape(e["shape"])
        try:
            return cls(arrays["indptr"], arrays["postings"], n_docs, vocab_size)
        except (DataError, ConfigError) as exc:
            raise DataError(f"token-csr index file {path} is corrupt: {exc}") from None


def _tokenize(texts: Iterable[str], tokenizer: Any, max_length: int | None, batch_size: int) -> Iterator[list[int]]:
    """Token ids of each text, encoded batch by batch (fast tokenizers use every core per batch)."""
    it = iter(texts)
    kwargs: dict[str, Any] = {"add_special_tokens": False, "return_attention_mask": False,
                              "return_token_type_ids": False}
    if max_length is not None:
        kwargs.update(truncation=True, max_length=int(max_length))
    while True:
        batch = list(islice(it, batch_size))
        if not batch:
            return
        yield from tokenizer(batch, **kwargs)["input_ids"]


# --------------------------------------------------------------------------------------------
# the uniform backend interface (harness.indexes)
# --------------------------------------------------------------------------------------------
INDEX_FILE = "index.tcsr"  # the file inside an index folder (SVDR's token index uses the same name)


class TokenCSRAdapter:
    """A :class:`BinaryTokenIndex` behind the uniform interface: ``save``/``load`` take the index
    folder (the file is ``INDEX_FILE`` inside it); ``search`` is :meth:`BinaryTokenIndex.search`."""

    def __init__(self, index: BinaryTokenIndex) -> None:
        self.index = index

    @property
    def spec(self) -> str:
        """``token-csr`` when the object is a binary token index (the spec has no part)."""
        if not isinstance(self.index, BinaryTokenIndex):
            raise ConfigError(f"token-csr adapter holds a {type(self.index).__name__}, not a BinaryTokenIndex")
        return "token-csr"

    @property
    def nbytes(self) -> int:
        return self.index.nbytes

    @property
    def ntotal(self) -> int:
        return self.index.n_docs

    def save(self, folder: str | os.PathLike[str]) -> Path:
        return self.index.save(Path(folder) / INDEX_FILE)

    def search(self, queries: Any, k: int, **options: Any) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of <query, T(d)>; queries float [B, vocab] or scipy sparse (see the class)."""
        return self.index.search(queries, k, **options)


class TokenCSRBackend:
    """Backend ``token-csr``: each passage's token ids -> the binary token index T(D)."""

    name = "token-csr"

    @staticmethod
    def check_spec(part: str) -> None:
        from harness.indexes import check_no_part

        check_no_part("token-csr", part)

    @staticmethod
    def build(part: str, payload: Iterable[Sequence[int]], *, vocab_size: int) -> TokenCSRAdapter:
        """:meth:`BinaryTokenIndex.from_token_ids` (repeats count once; ids in [0, vocab_size))."""
        TokenCSRBackend.check_spec(part)
        return TokenCSRAdapter(BinaryTokenIndex.from_token_ids(payload, vocab_size=vocab_size))

    @staticmethod
    def load(folder: str | os.PathLike[str], part: str = "") -> TokenCSRAdapter:
        TokenCSRBackend.check_spec(part)
        return TokenCSRAdapter(BinaryTokenIndex.load(Path(folder) / INDEX_FILE))
