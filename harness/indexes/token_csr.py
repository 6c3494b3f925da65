"""Binary token index T(D) for SVDR beta search (index spec ``token-csr``).

Size (why one file of ~1,100 lines): the layout, the compiled kernel and the class that builds,
saves and searches the index share private invariants (block size, the frequent-token split, the
aligned lane buffers, the posting dtype) that a split would turn into a public interface between
two modules; the file is cut into the sections kernel / helpers / index / backend.

Each passage is the *set* of its token ids: T(d)[v] = 1 when token v occurs in d (SVDR eq. 2).
Beta search scores a sparse vocabulary-space query E(q) against every passage,
``<E(q), T(d)>`` = the sum of the query's weights over the tokens the passage contains, and
returns the top k.

Layout (why). The index is an inverted, *blocked* CSC: passages are cut into blocks of
``BLOCK`` = 65,536 consecutive ids; inside each block every token has a posting list of the
block-local ids (``uint16``) of the passages that contain it. ``indptr[b, t] : indptr[b, t + 1]``
is the slice of ``postings`` for token t in block b (int64 offsets, shape [n_blocks, vocab + 1]).
Compared with the paper's CSR of passages x vocabulary multiplied by a dense query matrix, a
query reads only the posting lists of its active tokens instead of every non-zero of the index
once per query column, and local ids take 2 bytes per (passage, token).

Search (why it is fast on Zipf-distributed tokens). Real queries' top-768 dimensions include the
frequent tokens, whose posting lists are long: scattering each query's weights over them one query
at a time costs ~25x more than for uniformly drawn dims (725 M scatter-adds per batch of 32 at
1M passages, vs 71 M) and made the old kernel only ~2x faster than torch.sparse. The kernel
now splits the vocabulary by document frequency, a property of the index alone:

* *frequent* tokens (in >= ``FREQUENT_DF`` = 1/128 of the passages; ~1,400 of 30,522 ids on the
  bench's Zipf index, holding ~47 % of the postings) are scored passage-major for a *group* of up
  to ``GROUP`` = 32 queries at once: the first search builds, per passage, the list of its
  frequent tokens (``_forward_lists``: 2 bytes per frequent posting, kept on the object, not
  saved); per batch, each frequent token gets a vector of the group's weights (one float32 lane per
  query, 0 where a query lacks it). A passage's row of Bp lanes then adds the vectors of its
  frequent tokens with the running sums held in vector registers (an LLVM intrinsic; one load and
  one store of the row), so a frequent posting is read once per group instead of once per query,
  and costs ~1 ns for all 32 queries;
* the other (*rare*) tokens are scattered query by query into a float32 column of the block's
  scores (65,536 x 4 B = 256 KiB: stays in L2), with the next posting lists prefetched (they are
  short inside a block, so the latency of jumping between them is what would cost);
* per block, the group's columns are transposed into rows of a ``SUB_BLOCK`` x Bp tile before the
  frequent pass adds to them, and each finished row is offered to the per-query top-k heaps (a
  vectorised compare against each query's current k-th best skips almost every row).

A group whose queries hold few frequent tokens (e.g. uniformly drawn dims) scatters its frequent
tokens too, when that reads fewer postings than the passage-major pass (``FORWARD_RATIO``); the
summation order, hence every score, is the same either way. The compiled search runs in parallel
over (passage segment, query group) tasks.

Scores are exact inner products in float32: each score is the sum of the query's float32 weights
over the shared tokens, accumulated in float32 in a fixed *canonical order*: the query's rare
tokens by ascending id, then its frequent tokens by ascending id (``_canonical_order``). The numpy
path adds in the same order, so both paths return identical bits, and a query's scores do not
depend on the other queries of its batch; a passage's score differs from the exactly rounded sum by
at most a few ulps. Results are ordered best first; equal scores are broken by the lower passage
id. Every passage is a candidate, including those with score 0, so with ``k <= n_docs`` exactly k
passages come back; with ``k > n_docs`` the missing slots are padded with score ``-inf`` and id
``-1``.

The compiled kernel (numba) is used when numba is installed, else a pure-numpy path (``np.add.at``
over the gathered postings, one query at a time) that returns the same scores and ids;
``HARNESS_NO_NUMBA=1`` or ``search(..., backend="numpy")`` forces the latter. If the LLVM
intrinsics (prefetch, vector row sums) do not compile on a machine, a copy of the kernel with plain
loops is used (same results, slower). The on-disk format is unchanged (``FORMAT_VERSION`` 1).
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

#: postings per chunk of :meth:`BinaryTokenIndex.from_postings`' order check
_CHECK_CHUNK = 1 << 24
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
FREQUENT_DF = 1 / 128  # tokens in >= this share of the passages: 'frequent' (passage-major pass)
FORWARD_RATIO = 2.0  # passage-major pass when a group's frequent scatters exceed this x all frequent postings
GROUP = 32  # queries per tile (lanes); larger batches are split into groups
SUB_BLOCK = 2048  # passages per tile: 2048 x 32 lanes x 4 B = 256 KiB, in L2 with the postings
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

    def _make_rowacc(width: int, parts: int) -> Any:
        @_intrinsic
        def _rowacc(typingctx, tile, toff, w, woff, stride, fwd, p0, p1):  # pragma: no cover - compiled
            """``tile[toff:toff + n] += w[woff + r * stride : ... + n]`` (n = width * parts) for
            r = fwd[p0], fwd[p0 + 1], ..., fwd[p1 - 1], in that order: the running sums stay in
            ``parts`` vector registers of ``width`` float32 lanes (independent dependency chains),
            one load and one store of the tile row; plain float32 adds, no reassociation."""
            sig = _nbtypes.void(tile, toff, w, woff, stride, fwd, p0, p1)

            def codegen(context, builder, signature, args):
                from llvmlite import ir

                tty, _, wty, _, _, fty, _, _ = signature.args
                t = context.make_array(tty)(context, builder, args[0])
                wa = context.make_array(wty)(context, builder, args[2])
                fa = context.make_array(fty)(context, builder, args[5])
                i64 = ir.IntType(64)
                vt = ir.VectorType(ir.FloatType(), width)
                tbase = builder.gep(t.data, [args[1]])
                tptrs = [builder.bitcast(builder.gep(tbase, [ir.Constant(i64, width * i)]), vt.as_pointer())
                         for i in range(parts)]
                wbase = builder.gep(wa.data, [args[3]])
                stride, first, last = args[4], args[6], args[7]
                acc0 = []
                for ptr in tptrs:
                    v0 = builder.load(ptr)
                    v0.align = 4
                    acc0.append(v0)
                entry = builder.block
                loop = builder.append_basic_block("rowacc.loop")
                done = builder.append_basic_block("rowacc.done")
                builder.cbranch(builder.icmp_signed("<", first, last), loop, done)
                builder.position_at_end(loop)
                p = builder.phi(i64)
                p.add_incoming(first, entry)
                accs = []
                for v0 in acc0:
                    phi = builder.phi(vt)
                    phi.add_incoming(v0, entry)
                    accs.append(phi)
                r = builder.zext(builder.load(builder.gep(fa.data, [p])), i64)
                wrow = builder.gep(wbase, [builder.mul(r, stride)])
                nxt = []
                for i, acc in enumerate(accs):
                    v = builder.load(builder.bitcast(builder.gep(wrow, [ir.Constant(i64, width * i)]), vt.as_pointer()))
                    v.align = 4
                    nxt.append(builder.fadd(acc, v))
                p_next = builder.add(p, ir.Constant(i64, 1))
                p.add_incoming(p_next, loop)
                for acc, a1 in zip(accs, nxt):
                    acc.add_incoming(a1, loop)
                builder.cbranch(builder.icmp_signed("<", p_next, last), loop, done)
                builder.position_at_end(done)
                results = []
                for v0, a1 in zip(acc0, nxt):  # all phi nodes first: LLVM requires them on top
                    res = builder.phi(vt)
                    res.add_incoming(v0, entry)
                    res.add_incoming(a1, loop)
                    results.append(res)
                for ptr, res in zip(tptrs, results):
                    st = builder.store(res, ptr)
                    st.align = 4
                return context.get_dummy_value()

            return sig, codegen

        return _rowacc

    _rowacc8 = _make_rowacc(8, 1)
    _rowacc32 = _make_rowacc(16, 2)

    @_numba.njit(cache=True, inline="always")
    def _no_prefetch(arr, idx):  # pragma: no cover - compiled
        pass

    @_numba.njit(cache=True, inline="always")
    def _rowacc8_plain(tile, toff, w, woff, stride, fwd, p0, p1):  # pragma: no cover - compiled
        for p in range(p0, p1):
            o = woff + np.int64(fwd[p]) * stride
            for j in range(8):
                tile[toff + j] += w[o + j]

    @_numba.njit(cache=True, inline="always")
    def _rowacc32_plain(tile, toff, w, woff, stride, fwd, p0, p1):  # pragma: no cover - compiled
        for p in range(p0, p1):
            o = woff + np.int64(fwd[p]) * stride
            for j in range(32):
                tile[toff + j] += w[o + j]

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

    @_numba.njit(cache=True, parallel=True, nogil=True)
    def _forward_build(indptr, postings, n_docs, f_list, ptr, fwd):  # pragma: no cover - compiled
        """Passage-major lists of the frequent tokens: ``fwd[ptr[d]:ptr[d + 1]]`` are the ranks (in
        ``f_list``, ascending ids) of the frequent tokens of passage d, ascending. With ``fwd``
        empty, only counts each passage's frequent tokens into ``ptr[d + 1]``."""
        fill_only = fwd.shape[0] > 0
        for b in _numba.prange(indptr.shape[0]):
            row = indptr[b]
            base = b * BLOCK
            nb = min(BLOCK, n_docs - base)
            if fill_only:
                pos = ptr[base : base + nb].copy()
                for r in range(f_list.shape[0]):
                    t = f_list[r]
                    for x in postings[row[t] : row[t + 1]]:
                        fwd[pos[x]] = r
                        pos[x] += 1
            else:
                cnt = ptr[base + 1 : base + 1 + nb]
                for r in range(f_list.shape[0]):
                    t = f_list[r]
                    for x in postings[row[t] : row[t + 1]]:
                        cnt[x] += 1

    def _search_kernel_py(indptr, postings, n_docs, q_indptr, q_tok, q_w, n_scatter, slot, f_w, fwd_ptr, fwd,
                          group, sub, n_seg, out_s, out_i):  # pragma: no cover - compiled
        """Top k of each query over each passage segment; out_s/out_i ([n_seg, B, k], preset to
        -inf / sentinel) end as min-heaps. (One function over 80 lines: numba compiles it as one
        parallel kernel; helpers would be calls inside the innermost loops.)

        Tasks = (passage segment, query group of <= ``group`` queries). Per block of passages:
        (1) scatter pass: query by query, the first ``n_scatter[q]`` tokens of its row (canonical
        order: rare tokens, then frequent ones when the group scatters them too) are added into the
        query's column ``col[qi]`` of block-local float32 scores (256 KiB: stays in L2);
        (2) when ``slot[g] >= 0`` (the group's frequent tokens are not scattered), passage-major
        pass in sub-blocks of ``sub`` passages: the columns are transposed into tile rows (one row
        per passage, one lane per query, Bp lanes), then each row adds the weight vectors of the
        passage's frequent tokens (``fwd``, ranks ascending; f_w[slot, rank] = Bp weights, 0 for
        queries without the token) in vector registers; (3) the scores are offered to the heaps.
        """
        n_blocks = indptr.shape[0]
        n_q = q_indptr.shape[0] - 1
        n_groups = slot.shape[0]
        n_f = f_w.shape[1]
        Bp = f_w.shape[2]
        f_flat = f_w.reshape(-1)
        for task in _numba.prange(n_seg * n_groups):
            seg = task // n_groups
            g = task % n_groups
            q0 = g * group
            ng = min(group, n_q - q0)
            b0 = seg * n_blocks // n_seg
            b1 = (seg + 1) * n_blocks // n_seg
            dense = slot[g] >= 0
            goff = max(slot[g], 0) * n_f * Bp
            col = np.zeros((ng if dense else 1, BLOCK), np.float32)
            tile = np.zeros(sub * Bp if dense else 0, np.float32)
            thr = np.full(Bp, np.inf, np.float32)  # lanes beyond ng never qualify
            hs = out_s[seg]
            hi = out_i[seg]
            for b in range(b0, b1):
                row = indptr[b]
                base = b * BLOCK
                nb = min(BLOCK, n_docs - base)
                # (1) scatter pass, query by query (without the passage-major pass, each column is
                # offered to the heaps at once and the next query reuses it: it stays in L2)
                for qi in range(ng):
                    c = col[qi if dense else 0]
                    j0 = q_indptr[q0 + qi]
                    j1 = j0 + n_scatter[q0 + qi]
                    for j in range(j0, min(j0 + PREFETCH_DISTANCE, j1)):
                        s0 = row[q_tok[j]]
                        e0 = row[q_tok[j] + 1]
                        for line in range(PREFETCH_LINES):
                            if s0 + 32 * line < e0:
                                _prefetch(postings, s0 + 32 * line)
                    for j in range(j0, j1):
                        if j + PREFETCH_DISTANCE < j1:
                            t2 = q_tok[j + PREFETCH_DISTANCE]
                            s0 = row[t2]
                            e0 = row[t2 + 1]
                            for line in range(PREFETCH_LINES):
                                if s0 + 32 * line < e0:
                                    _prefetch(postings, s0 + 32 * line)
                        t = q_tok[j]
                        w = q_w[j]
                        for x in postings[row[t] : row[t + 1]]:  # iterating a view: no wrap-around checks
                            c[x] += w
                    if dense:
                        continue
                    # (3) the column to the heap: chunks of 64 with a vectorised count of scores
                    # above the current k-th best, the heap only for chunks with a hit
                    q = q0 + qi
                    t0 = hs[q, 0]
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
                if not dense:
                    continue
                for qi in range(ng):
                    thr[qi] = hs[q0 + qi, 0]
                # (2) passage-major pass over the frequent tokens, sub-block by sub-block
                for lo in range(0, nb, sub):
                    n = min(sub, nb - lo)
                    for qi in range(ng):
                        c = col[qi]
                        for x in range(n):
                            tile[x * Bp + qi] = c[lo + x]
                        c[lo : lo + n] = 0.0
                    for x in range(n):
                        d = base + lo + x
                        p0 = fwd_ptr[d]
                        p1 = fwd_ptr[d + 1]
                        for j in range(0, Bp - 31, 32):  # 32 lanes per pass over the lists
                            _rowacc32(tile, x * Bp + j, f_flat, goff + j, Bp, fwd, p0, p1)
                        for j in range(Bp - Bp % 32, Bp, 8):
                            _rowacc8(tile, x * Bp + j, f_flat, goff + j, Bp, fwd, p0, p1)
                        # (3) the row to the heaps
                        a = tile[x * Bp :]
                        hit = False
                        for j in range(Bp):
                            hit |= a[j] > thr[j]
                        if hit:
                            for qi in range(ng):
                                v = a[qi]
                                if v > thr[qi]:
                                    q = q0 + qi
                                    _heap_replace_root(hs[q], hi[q], v, d)
                                    thr[qi] = hs[q, 0]

    _search_kernel = _numba.njit(cache=True, parallel=True, nogil=True)(_search_kernel_py)
    _search_kernel_plain = None  # the kernel with plain loops instead of intrinsics, compiled only if needed


def _run_kernel(*args: Any) -> None:
    """Run the compiled kernel; if its LLVM intrinsics do not compile here, use a copy with plain loops."""
    global _search_kernel_plain
    if _search_kernel_plain is None:
        try:
            _search_kernel(*args)
            return
        except (_numba.core.errors.NumbaError, RuntimeError) as exc:  # typing/lowering/LLVM failures
            import types
            import warnings

            warnings.warn(f"token-csr: the kernel with LLVM intrinsics (prefetch, vector row sums) failed to "
                          f"compile ({type(exc).__name__}); using the kernel without prefetch, with plain loops",
                          RuntimeWarning, stacklevel=3)
            py = _search_kernel_py
            glob = dict(py.__globals__, _prefetch=_no_prefetch, _rowacc8=_rowacc8_plain, _rowacc32=_rowacc32_plain)
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
    n_q: int, q_indptr: np.ndarray, q_tok: np.ndarray, q_w: np.ndarray, n_rare: np.ndarray,
    f_rank: np.ndarray, df: np.ndarray, f_total: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query group of ``GROUP``: whether its frequent tokens go through the passage-major
    pass (``slot`` >= 0: its weights are ``f_w[slot]``) or are scattered like the rare ones.

    Rows are in canonical order (rare part first). The passage-major pass reads every frequent
    posting once for the group (``f_total``) where scattering reads each query's own frequent
    postings, so it is chosen when those add up to more than ``FORWARD_RATIO * f_total``.
    Returns (n_scatter [B]: leading entries of each row the kernel scatters, slot [n_groups],
    f_w [n_slots, n_frequent, Bp] with lane = query within the group, 0 where a query lacks
    the token)."""
    rows = np.repeat(np.arange(n_q, dtype=np.int64), np.diff(q_indptr))
    freq = np.arange(q_tok.size, dtype=np.int64) - q_indptr[rows] >= n_rare[rows]
    group = min(GROUP, n_q)
    n_groups = -(-n_q // group)
    bp = -(-group // 8) * 8  # lanes: a multiple of 8 floats
    f_scatter = np.bincount(rows[freq] // group, weights=df[q_tok[freq]], minlength=n_groups)
    use = (f_scatter > FORWARD_RATIO * f_total) & (f_total > 0)
    slot = np.full(n_groups, -1, np.int64)
    slot[use] = np.arange(int(use.sum()))
    n_scatter = np.where(use[np.arange(n_q) // group], n_rare, np.diff(q_indptr)).astype(np.int64)
    n_f = int((f_rank >= 0).sum())
    f_w = _aligned_zeros(int(use.sum()) * n_f * bp).reshape(int(use.sum()), n_f, bp)  # rows on 64-byte lines
    sel = freq & use[rows // group]
    f_w[slot[rows[sel] // group], f_rank[q_tok[sel]], rows[sel] % group] = q_w[sel]
    return n_scatter, slot, f_w


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
    def cache_nbytes(self) -> int:
        """Bytes of the passage-major frequent-token lists the compiled search builds on first use."""
        fw = getattr(self, "_forward", None)
        return 0 if fw is None else int(fw[0].nbytes + fw[1].nbytes)

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
            # a pair of neighbours may fall only where a token's postings begin; checked in chunks, so that
            # the check holds a few hundred MB, not 17 bytes a posting (Table 5's synthetic index at the
            # paper profile's 10M passages x 1,024 tokens: 10^10 postings)
            across = indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < doc_ids.size)] - 1
            for s in range(0, doc_ids.size - 1, _CHECK_CHUNK):
                e = min(s + _CHECK_CHUNK, doc_ids.size - 1)
                inc = np.diff(doc_ids[s:e + 1].astype(np.int64)) > 0
                inc[across[(across >= s) & (across < e)] - s] = True
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
            mask, f_rank, df = self._frequent_info()
            n_scatter, slot, f_w = _kernel_inputs(n_q, q_indptr, q_tok, q_w, n_rare, f_rank, df,
                                                  int(df[mask].sum()))
            if (slot >= 0).any():
                fwd_ptr, fwd = self._forward_lists()
            else:
                fwd_ptr, fwd = np.zeros(1, np.int64), np.zeros(0, np.uint16)
            # segments of blocks x query groups: at least one task per thread
            n_groups = slot.size
            n_seg = max(1, min(self.n_blocks, -(-_numba.get_num_threads() // n_groups)))
            out_s = np.full((n_seg, n_q, kk), -np.inf, np.float32)
            out_i = np.full((n_seg, n_q, kk), _SENTINEL, np.int64)
            _run_kernel(self.indptr, self.postings, self.n_docs, q_indptr, q_tok, q_w, n_scatter, slot, f_w,
                        fwd_ptr, fwd, min(GROUP, n_q), SUB_BLOCK, n_seg, out_s, out_i)
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
        return self._frequent_info()[0]

    def _frequent_info(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(frequent mask [vocab], rank of each frequent token among them (-1 for the others),
        document frequency [vocab]); cached per ``FREQUENT_DF``."""
        key = (FREQUENT_DF, self.n_docs)
        if getattr(self, "_frequent", None) is None or self._frequent[0] != key:
            df = np.zeros(self.vocab_size, np.int64)
            for b in range(self.n_blocks):  # row by row: no [n_blocks, vocab] temporary
                df += np.diff(self.indptr[b])
            mask = (df > 0) & (df >= FREQUENT_DF * self.n_docs)
            rank = np.full(self.vocab_size, -1, np.int64)
            rank[mask] = np.arange(int(mask.sum()))
            self._frequent = (key, (mask, rank, df))
            self._forward = None
        return self._frequent[1]

    def prepare(self) -> int:
        """Build now what the compiled search otherwise builds on its first batch with frequent
        tokens (the passage-major frequent-token lists); returns their bytes (0 without numba)."""
        if numba_available():
            self._forward_lists()
        return self.cache_nbytes

    def _forward_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """Passage-major lists of the frequent tokens (ptr int64 [n_docs + 1], ranks), built on
        first use by the compiled kernel and kept (about 2 bytes per frequent posting)."""
        mask, _, _ = self._frequent_info()
        if getattr(self, "_forward", None) is None:
            f_list = np.flatnonzero(mask).astype(np.int64)
            ptr = np.zeros(self.n_docs + 1, np.int64)
            _forward_build(self.indptr, self.postings, self.n_docs, f_list, ptr, np.zeros(0, np.uint16))
            np.cumsum(ptr, out=ptr)
            fwd = np.empty(int(ptr[-1]), np.uint16 if f_list.size <= 1 << 16 else np.int32)
            if fwd.size:
                _forward_build(self.indptr, self.postings, self.n_docs, f_list, ptr, fwd)
            self._forward = (ptr, fwd)
        return self._forward

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
