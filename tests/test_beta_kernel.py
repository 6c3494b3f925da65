"""The compiled beta-search kernel (harness/indexes/token_csr.py) against the numpy reference path on
Zipf-distributed indexes and queries: both of its passes (frequent tokens passage-major for a group
of queries, the rest scattered per query), ties, k > n_docs, empty queries, batch sizes 1..many
(several query groups), block and sub-block boundaries, and the intrinsics' plain fallback.

Equality is exact (bitwise scores and ids): both paths add a query's weights in the same canonical
order (rare tokens, then frequent ones, each by ascending id)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.indexes import token_csr
from harness.indexes.token_csr import BLOCK, BinaryTokenIndex

pytestmark = pytest.mark.skipif(token_csr._numba is None, reason="numba not installed")


# ---------------------------------------------------------------------------------------------
# Zipf-like data
# ---------------------------------------------------------------------------------------------
def zipf_p(vocab: int, doc_tokens: float, rng: np.random.Generator, a: float = 0.8) -> np.ndarray:
    """Per-token document frequency min(1, c r^-a) over a random permutation of the ids."""
    base = np.arange(1, vocab + 1, dtype=np.float64) ** -a
    c = doc_tokens / base.sum()
    for _ in range(60):  # raise c until the capped sum reaches doc_tokens
        c *= doc_tokens / np.minimum(1.0, c * base).sum()
    p = np.empty(vocab)
    p[rng.permutation(vocab)] = np.minimum(1.0, c * base)
    return p


def zipf_index(n_docs: int, vocab: int, doc_tokens: float, seed: int) -> tuple[BinaryTokenIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = zipf_p(vocab, doc_tokens, rng)
    lists = [np.sort(rng.choice(n_docs, rng.binomial(n_docs, pt), replace=False)).astype(np.int64) for pt in p]
    indptr = np.zeros(vocab + 1, np.int64)
    np.cumsum([x.size for x in lists], out=indptr[1:])
    return BinaryTokenIndex.from_postings(indptr, np.concatenate(lists), n_docs, vocab), p


def zipf_queries(n_q: int, vocab: int, active: int, p: np.ndarray, rng: np.random.Generator,
                 dyadic: bool = False) -> np.ndarray:
    """Dims drawn in proportion to document frequency; Exp(1) weights, or k/8 (exact sums: real ties)."""
    q = np.zeros((n_q, vocab), np.float32)
    for i in range(n_q):
        dims = rng.choice(vocab, min(active, vocab), replace=False, p=p / p.sum())
        q[i, dims] = rng.integers(1, 5, dims.size) / 8.0 if dyadic else rng.exponential(1.0, dims.size)
    return q


def assert_same(index: BinaryTokenIndex, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    got_s, got_i = index.search(queries, k, backend="numba")
    want_s, want_i = index.search(queries, k, backend="numpy")
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_s, want_s)
    return got_s, got_i


@pytest.fixture(scope="module")
def zipf3() -> tuple[BinaryTokenIndex, np.ndarray]:
    """Three blocks (the last one partial), 3,000 tokens (~600 of them frequent), ~25 distinct
    tokens per passage."""
    return zipf_index(2 * BLOCK + 777, 3000, 25.0, seed=11)


# modes of the kernel: which tokens are "frequent" and when a group takes the passage-major pass
MODES = {
    "auto": {},  # the module's defaults
    "all-forward": {"FORWARD_RATIO": 0.0},  # every group with a frequent token: passage-major
    "many-frequent": {"FREQUENT_DF": 1 / 3000, "FORWARD_RATIO": 0.0},
    "all-scatter": {"FORWARD_RATIO": 1e30},  # frequent tokens scattered per query too
    "no-frequent": {"FREQUENT_DF": 2.0},
}


@pytest.fixture(params=list(MODES))
def mode(request, monkeypatch) -> str:
    for name, value in MODES[request.param].items():
        monkeypatch.setattr(token_csr, name, value)
    return request.param


# ---------------------------------------------------------------------------------------------
# exactness against the numpy reference
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_q", [1, 3, 32, 45])
def test_zipf_batches_match_reference(zipf3, mode: str, n_q: int) -> None:
    index, p = zipf3
    rng = np.random.default_rng(n_q)
    queries = zipf_queries(n_q, index.vocab_size, 60, p, rng)
    s, i = assert_same(index, queries, 50)
    assert np.all(np.diff(s, axis=1) <= 0) and np.all(i >= 0)
    if mode == "all-forward":  # the passage-major pass really ran
        assert index.cache_nbytes > 0


def test_paths_really_differ_in_what_they_run(zipf3, monkeypatch) -> None:
    """The frequent set and the pass choice are what the modes above claim (else they test nothing)."""
    index, p = zipf3
    rng = np.random.default_rng(0)
    q = zipf_queries(8, index.vocab_size, 60, p, rng)
    n_q, ip, tok, w = token_csr._as_query_csr(q, index.vocab_size)
    tok, w, n_rare = index._canonical_order(n_q, ip, tok, w)
    mask, f_rank, df = index._frequent_info()
    assert 0 < mask.sum() < index.vocab_size
    assert np.all(n_rare > 0) and np.all(n_rare < np.diff(ip))  # each query has both kinds
    n_sc, slot, f_w = token_csr._kernel_inputs(n_q, ip, tok, w, n_rare, f_rank, df, int(df[mask].sum()))
    assert slot.tolist() == [0]  # Zipf queries: the group takes the passage-major pass
    np.testing.assert_array_equal(n_sc, n_rare)
    assert f_w.shape == (1, mask.sum(), 8) and np.count_nonzero(f_w) == np.diff(ip).sum() - n_rare.sum()
    monkeypatch.setattr(token_csr, "FORWARD_RATIO", 1e30)
    n_sc, slot, _ = token_csr._kernel_inputs(n_q, ip, tok, w, n_rare, f_rank, df, int(df[mask].sum()))
    assert slot.tolist() == [-1]
    np.testing.assert_array_equal(n_sc, np.diff(ip))


@pytest.mark.parametrize("seed", [0, 1])
def test_dyadic_ties_match_truth(zipf3, mode: str, seed: int) -> None:
    """Weights k/8: sums are exact in any order, so many passages tie; ties go to the lower id."""
    index, p = zipf3
    rng = np.random.default_rng(100 + seed)
    queries = zipf_queries(33, index.vocab_size, 30, p, rng, dyadic=True)
    s, i = assert_same(index, queries, 200)
    csr = index.to_scipy_csr(np.float64)
    full = np.asarray((csr @ queries.astype(np.float64).T).T)
    for q in range(queries.shape[0]):
        order = np.lexsort((np.arange(index.n_docs), -full[q]))[:200]
        np.testing.assert_array_equal(i[q], order)
        np.testing.assert_array_equal(s[q], full[q, order].astype(np.float32))
    assert any(np.any(np.diff(s[q]) == 0) for q in range(queries.shape[0]))  # ties really occur


def test_k_beyond_n_docs_and_empty_queries(mode: str) -> None:
    index, p = zipf_index(700, 120, 12.0, seed=3)
    rng = np.random.default_rng(5)
    queries = zipf_queries(9, index.vocab_size, 20, p, rng)
    queries[[0, 4, 8]] = 0.0  # empty rows inside the batch: every score 0, ids in order
    for k in (1, 699, 700, 701, 1000):
        s, i = assert_same(index, queries, k)
        kk = min(k, 700)
        assert np.all(i[:, kk:] == -1) and np.all(s[:, kk:] == -np.inf)
        assert np.all(s[0, :kk] == 0.0) and i[0, :kk].tolist() == list(range(kk))
    s, i = assert_same(index, np.zeros((3, index.vocab_size), np.float32), 5)
    assert i.tolist() == [[0, 1, 2, 3, 4]] * 3


def test_only_frequent_or_only_rare_tokens(zipf3, mode: str) -> None:
    index, _ = zipf3
    mask = index.frequent_tokens()
    rng = np.random.default_rng(9)
    q = np.zeros((6, index.vocab_size), np.float32)
    freq, rare = np.flatnonzero(mask), np.flatnonzero(~mask)
    for r in range(3):  # rows 0-2: frequent tokens only; rows 3-5: rare only (when the mode has any)
        for row, pool, n in ((r, freq, 10), (3 + r, rare, 40)):
            if pool.size:
                q[row, rng.choice(pool, min(n, pool.size), replace=False)] = rng.exponential(1.0, min(n, pool.size))
    assert_same(index, q, 30)


def test_block_and_sub_block_boundaries(mode: str) -> None:
    """Passages at the edges of blocks and of the kernel's sub-blocks hold a marker token; a query
    weighting it heavily finds exactly them first."""
    n = 2 * BLOCK + 10
    index0, p = zipf_index(n, 150, 15.0, seed=21)
    marker = int(np.argmin(p))  # the rarest token: rebuild its posting list
    edges = sorted({0, token_csr.SUB_BLOCK - 1, token_csr.SUB_BLOCK, BLOCK - 1, BLOCK, BLOCK + 1,
                    2 * BLOCK - 1, 2 * BLOCK, n - 1})
    csc = index0.to_scipy_csr(np.float32).tocsc()
    lists = [csc.indices[csc.indptr[t] : csc.indptr[t + 1]].astype(np.int64) for t in range(150)]
    lists[marker] = np.array(edges, np.int64)
    indptr = np.zeros(151, np.int64)
    np.cumsum([x.size for x in lists], out=indptr[1:])
    index = BinaryTokenIndex.from_postings(indptr, np.concatenate(lists), n, 150)
    rng = np.random.default_rng(2)
    q = zipf_queries(5, 150, 25, p, rng)
    q[:, marker] = 1000.0
    _, i = assert_same(index, q, 40)
    assert [sorted(r) for r in i[:, : len(edges)].tolist()] == [edges] * 5


def test_batch_independent_results(zipf3) -> None:
    """A query's scores and ids do not depend on the batch it is searched with (summation order is
    fixed per query), whichever pass its group takes."""
    index, p = zipf3
    rng = np.random.default_rng(4)
    batch = zipf_queries(40, index.vocab_size, 60, p, rng)
    s_all, i_all = index.search(batch, 25, backend="numba")
    for q in (0, 17, 39):
        s1, i1 = index.search(batch[q], 25, backend="numba")
        np.testing.assert_array_equal(s1[0], s_all[q])
        np.testing.assert_array_equal(i1[0], i_all[q])


def test_forward_lists_are_the_transposed_frequent_postings(zipf3) -> None:
    index, _ = zipf3
    mask = index.frequent_tokens()
    ptr, fwd = index._forward_lists()
    csr = index.to_scipy_csr(np.float32)
    f_list = np.flatnonzero(mask)
    sub = csr[:, f_list].tocsr()
    sub.sort_indices()
    np.testing.assert_array_equal(ptr, sub.indptr)
    np.testing.assert_array_equal(fwd, sub.indices)
    assert index.cache_nbytes == ptr.nbytes + fwd.nbytes


def test_plain_fallback_kernel_matches(zipf3, monkeypatch) -> None:
    """If the LLVM intrinsics do not compile, the copy of the kernel with plain loops gives the same."""
    index, p = zipf3

    def broken(*args):
        raise RuntimeError("no intrinsics here")

    monkeypatch.setattr(token_csr, "_search_kernel", broken)
    monkeypatch.setattr(token_csr, "_search_kernel_plain", None)
    monkeypatch.setattr(token_csr, "FORWARD_RATIO", 0.0)
    rng = np.random.default_rng(8)
    q = zipf_queries(35, index.vocab_size, 50, p, rng)  # lanes 32 + 8: both row widths
    with pytest.warns(RuntimeWarning, match="without prefetch"):
        got = index.search(q, 20, backend="numba")
    want = index.search(q, 20, backend="numpy")
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_reference_order_is_rare_then_frequent(zipf3) -> None:
    """The documented summation order: a query's rare tokens, then its frequent ones, by id."""
    index, _ = zipf3
    mask = index.frequent_tokens()
    tok = np.flatnonzero(mask)[:3].tolist() + np.flatnonzero(~mask)[-3:].tolist()
    tok = np.array(sorted(tok), np.int64)
    n_q, ip, t, w = 1, np.array([0, 6]), tok, np.arange(6, dtype=np.float32)
    t2, w2, n_rare = index._canonical_order(n_q, ip, t, w)
    assert n_rare[0] == (~mask[tok]).sum()
    assert t2.tolist() == sorted(tok[~mask[tok]].tolist()) + sorted(tok[mask[tok]].tolist())
    assert dict(zip(t2.tolist(), w2.tolist())) == dict(zip(tok.tolist(), w.tolist()))
