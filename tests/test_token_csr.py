"""Binary token index (harness/indexes/token_csr.py) against exact dense/sparse ground truth."""
from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp

from harness.errors import ConfigError, DataError
from harness.indexes import token_csr
from harness.indexes.token_csr import BLOCK, BinaryTokenIndex

BACKENDS = ["numpy"] + (["numba"] if token_csr._numba is not None else [])


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def random_docs(rng: np.random.Generator, n: int, vocab: int, max_len: int) -> list[list[int]]:
    """Documents with repeated tokens and some empty ones."""
    return [rng.integers(0, vocab, rng.integers(0, max_len + 1)).tolist() for _ in range(n)]


def binary_matrix(docs: list[list[int]], vocab: int) -> sp.csr_matrix:
    rows = np.repeat(np.arange(len(docs)), [len(d) for d in docs])
    cols = np.concatenate([np.asarray(d, dtype=np.int64) for d in docs]) if docs else np.zeros(0, np.int64)
    m = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(len(docs), vocab))
    m.data[:] = 1.0  # duplicates were summed: a token present is 1
    return m


def dyadic_queries(rng: np.random.Generator, n_q: int, vocab: int, density: float) -> np.ndarray:
    """Weights k/8, k in 1..16: every sum is exact in float32, so ties are real ties."""
    mask = rng.random((n_q, vocab)) < density
    return (mask * rng.integers(1, 17, (n_q, vocab)) / 8.0).astype(np.float32)


def truth(matrix: sp.csr_matrix, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top k in float64: score desc, id asc; padded with (-inf, -1)."""
    scores = np.asarray((matrix @ queries.astype(np.float64).T).T)
    n_q, n = scores.shape
    ids = np.broadcast_to(np.arange(n), scores.shape)
    order = np.lexsort((ids, -scores), axis=-1)[:, :k]
    top_s = np.take_along_axis(scores, order, axis=-1)
    out_s = np.full((n_q, k), -np.inf)
    out_i = np.full((n_q, k), -1, np.int64)
    out_s[:, : order.shape[1]] = top_s
    out_i[:, : order.shape[1]] = order
    return out_s, out_i


# ---------------------------------------------------------------------------------------------
# exactness
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_against_dense_ground_truth(backend: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vocab = 40
    docs = random_docs(rng, 300, vocab, 15)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    queries = dyadic_queries(rng, 7, vocab, 0.3)
    for k in (1, 5, 17, 300):
        scores, ids = index.search(queries, k, backend=backend)
        want_s, want_i = truth(binary_matrix(docs, vocab), queries, k)
        assert scores.dtype == np.float32 and ids.dtype == np.int64
        np.testing.assert_array_equal(ids, want_i)
        np.testing.assert_array_equal(scores, want_s.astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_float_weights(backend: str) -> None:
    """Non-dyadic weights: scores within float32 rounding; the returned set is a true top k."""
    rng = np.random.default_rng(5)
    vocab, k = 200, 25
    docs = random_docs(rng, 2000, vocab, 40)
    matrix = binary_matrix(docs, vocab)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    queries = (rng.random((6, vocab)) * (rng.random((6, vocab)) < 0.2)).astype(np.float32)
    scores, ids = index.search(queries, k, backend=backend)
    exact = np.asarray((matrix @ queries.astype(np.float64).T).T)
    for q in range(len(queries)):
        np.testing.assert_allclose(scores[q], exact[q, ids[q]], rtol=1e-6, atol=1e-6)
        assert np.all(np.diff(scores[q]) <= 0)
        rest = np.setdiff1d(np.arange(len(docs)), ids[q])
        assert exact[q, rest].max() <= exact[q, ids[q]].min() + 1e-5
        assert len(set(ids[q].tolist())) == k


def test_backends_agree_bitwise() -> None:
    if "numba" not in BACKENDS:
        pytest.skip("numba not installed")
    rng = np.random.default_rng(11)
    vocab = 500
    docs = random_docs(rng, 5000, vocab, 60)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    queries = (rng.exponential(1.0, (9, vocab)) * (rng.random((9, vocab)) < 0.1)).astype(np.float32)
    a = index.search(queries, 50, backend="numba")
    b = index.search(queries, 50, backend="numpy")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_blocks_and_ties_across_blocks(backend: str) -> None:
    """> 2 blocks with a partial last block; identical passages in different blocks tie."""
    rng = np.random.default_rng(3)
    vocab = 64
    n = 2 * BLOCK + 1234
    docs = random_docs(rng, n, 50, 6)  # token 60 only in the planted passages
    for pos in (5, BLOCK - 1, BLOCK, 2 * BLOCK + 1000, n - 1):
        docs[pos] = [1, 2, 3, 60]  # the best passage for the first query, five times over
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    assert index.n_docs == n and index.n_blocks == 3
    queries = dyadic_queries(rng, 4, vocab, 0.5)
    queries[0] = 0
    queries[0, [1, 2, 3, 60]] = 4.0
    scores, ids = index.search(queries, 40, backend=backend)
    want_s, want_i = truth(binary_matrix(docs, vocab), queries, 40)
    np.testing.assert_array_equal(ids, want_i)
    np.testing.assert_array_equal(scores, want_s.astype(np.float32))
    assert ids[0, :5].tolist() == [5, BLOCK - 1, BLOCK, 2 * BLOCK + 1000, n - 1]


def test_single_query_uses_segments_and_matches() -> None:
    """A batch smaller than the thread count is split over passage segments; same answer."""
    if "numba" not in BACKENDS:
        pytest.skip("numba not installed")
    rng = np.random.default_rng(4)
    vocab = 50
    docs = random_docs(rng, 3 * BLOCK, vocab, 5)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    query = dyadic_queries(rng, 1, vocab, 0.4)[0]  # 1-d query
    a = index.search(query, 30, backend="numba")
    b = index.search(query[None, :], 30, backend="numpy")
    _, want_i = truth(binary_matrix(docs, vocab), query[None, :], 30)
    np.testing.assert_array_equal(a[1], want_i)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_scipy_sparse_queries(backend: str, fmt: str) -> None:
    rng = np.random.default_rng(7)
    vocab = 30
    docs = random_docs(rng, 100, vocab, 8)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    dense = dyadic_queries(rng, 5, vocab, 0.3)
    # the same weights as COO with a duplicate entry (summed) and an explicit zero
    rows, cols = np.nonzero(dense)
    vals = dense[rows, cols].copy()
    vals[0] /= 2
    rows = np.append(rows, [rows[0], 4])
    cols = np.append(cols, [cols[0], 0 if dense[4, 0] == 0 else 1])
    vals = np.append(vals, [vals[0], 0.0]).astype(np.float32)
    if dense[4, cols[-1]] != 0:
        vals[-1] = 0.0
    coo = sp.coo_matrix((vals, (rows, cols)), shape=dense.shape)
    queries = {"csr": coo.tocsr(), "csc": coo.tocsc(), "coo": coo}[fmt]
    got = index.search(queries, 12, backend=backend)
    want = index.search(dense, 12, backend=backend)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_edge_cases(backend: str) -> None:
    rng = np.random.default_rng(8)
    vocab = 20
    docs = random_docs(rng, 10, vocab, 6)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    queries = dyadic_queries(rng, 3, vocab, 0.5)
    s, i = index.search(queries, 0, backend=backend)
    assert s.shape == (3, 0) and i.shape == (3, 0)
    s, i = index.search(queries, 10, backend=backend)
    assert sorted(i[0].tolist()) == list(range(10))
    s, i = index.search(queries, 13, backend=backend)  # k > n_docs: padded
    assert s.shape == (3, 13)
    assert np.all(i[:, 10:] == -1) and np.all(np.isneginf(s[:, 10:]))
    assert np.all(i[:, :10] >= 0) and np.all(np.isfinite(s[:, :10]))
    want_s, want_i = truth(binary_matrix(docs, vocab), queries, 13)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(s, want_s.astype(np.float32))
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(ConfigError):
            index.search(queries, bad, backend=backend)
    s, i = index.search(np.zeros((0, vocab), np.float32), 5, backend=backend)
    assert s.shape == (0, 5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_docs_zero_queries_and_empty_index(backend: str) -> None:
    vocab = 10
    docs: list[list[int]] = [[], [1, 2], [], [3], []]
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    q = np.zeros((2, vocab), np.float32)
    q[0, 2] = 1.0
    s, i = index.search(q, 5, backend=backend)
    assert i[0].tolist() == [1, 0, 2, 3, 4] and s[0].tolist() == [1, 0, 0, 0, 0]
    assert i[1].tolist() == [0, 1, 2, 3, 4] and s[1].tolist() == [0] * 5  # all-zero query
    empty = BinaryTokenIndex.from_token_ids([], vocab)
    assert empty.n_docs == 0 and empty.nnz == 0
    s, i = empty.search(q, 3, backend=backend)
    assert np.all(i == -1) and np.all(np.isneginf(s))


def test_repeated_tokens_count_once() -> None:
    index = BinaryTokenIndex.from_token_ids([[4, 4, 4, 2], [2, 4], [4]], 5)
    assert index.nnz == 5
    q = np.zeros(5, np.float32)
    q[4], q[2] = 1.5, 0.25
    for backend in BACKENDS:
        s, i = index.search(q, 3, backend=backend)
        assert s[0].tolist() == [1.75, 1.75, 1.5] and i[0].tolist() == [0, 1, 2]


def test_negative_weights_allowed() -> None:
    index = BinaryTokenIndex.from_token_ids([[0], [1], [0, 1], []], 2)
    q = np.array([[1.0, -2.0]], np.float32)
    for backend in BACKENDS:
        s, i = index.search(q, 4, backend=backend)
        assert i[0].tolist() == [0, 3, 2, 1] and s[0].tolist() == [1, 0, -1, -2]


# ---------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------
def test_builders_agree() -> None:
    rng = np.random.default_rng(9)
    vocab = 70
    docs = random_docs(rng, BLOCK + 500, vocab, 8)
    a = BinaryTokenIndex.from_token_ids(docs, vocab)
    a2 = BinaryTokenIndex.from_token_ids((np.asarray(d, dtype=np.int32) for d in docs), vocab)
    m = binary_matrix(docs, vocab)
    b = BinaryTokenIndex.from_scipy(m)
    csc = m.tocsc()
    c = BinaryTokenIndex.from_postings(csc.indptr, csc.indices, len(docs), vocab, chunk=1000)
    for other in (a2, b, c):
        np.testing.assert_array_equal(other.indptr, a.indptr)
        np.testing.assert_array_equal(other.postings, a.postings)
    back = a.to_scipy_csr()
    assert back.shape == m.shape and (back != m).nnz == 0


def test_from_postings_rejects_unsorted() -> None:
    with pytest.raises(ConfigError, match="sorted and distinct"):
        BinaryTokenIndex.from_postings(np.array([0, 2, 3]), np.array([3, 1, 0]), 4, 2)
    with pytest.raises(ConfigError):
        BinaryTokenIndex.from_postings(np.array([0, 1, 2]), np.array([0, 9]), 4, 2)


def test_bad_token_ids_name_the_document() -> None:
    docs = [[1, 2], [3], [0, 10], [4]]
    with pytest.raises(ConfigError, match=r"document 2 has token id 10 outside \[0, 10\)"):
        BinaryTokenIndex.from_token_ids(docs, 10)
    with pytest.raises(ConfigError, match="document 1 has token id -1"):
        BinaryTokenIndex.from_token_ids([[1], [-1]], 10)
    far = [[1]] * (BLOCK + 3) + [[99]]
    with pytest.raises(ConfigError, match=f"document {BLOCK + 3} has token id 99"):
        BinaryTokenIndex.from_token_ids(far, 10)
    with pytest.raises(ConfigError, match="document 1 holds non-integer"):
        BinaryTokenIndex.from_token_ids([[1], [1.5, 2]], 10)
    with pytest.raises(ConfigError, match="vocab_size"):
        BinaryTokenIndex.from_token_ids([[1]], 0)


def test_bad_queries() -> None:
    index = BinaryTokenIndex.from_token_ids([[1], [2]], 5)
    with pytest.raises(ConfigError, match="shape"):
        index.search(np.zeros((2, 4), np.float32), 1)
    with pytest.raises(ConfigError, match="shape"):
        index.search(sp.csr_matrix((2, 6), dtype=np.float32), 1)
    q = np.zeros((3, 5), np.float32)
    q[2, 1] = np.nan
    with pytest.raises(ConfigError, match="query 2 has a non-finite"):
        index.search(q, 1)
    with pytest.raises(ConfigError, match="unknown search backend"):
        index.search(np.zeros((1, 5), np.float32), 1, backend="gpu")


def test_nbytes_plausible() -> None:
    rng = np.random.default_rng(10)
    vocab = 100
    docs = random_docs(rng, BLOCK + 10, vocab, 10)
    index = BinaryTokenIndex.from_token_ids(docs, vocab)
    distinct = sum(len(set(d)) for d in docs)
    assert index.nnz == distinct
    assert index.nbytes == index.indptr.nbytes + index.postings.nbytes
    assert index.nbytes == 2 * distinct + 8 * 2 * (vocab + 1)
    assert index.vocab_size == vocab and index.n_docs == len(docs)


def test_from_texts_with_real_tokenizer() -> None:
    cognition = pytest.importorskip("cognition")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(cognition.__file__), "model"))
    texts = ["The cat sat on the mat, the cat.", "", "Binary token index for semi-parametric retrieval."] * 3
    index = BinaryTokenIndex.from_texts(texts, tok, max_length=6, batch_size=2)
    ids = [tok(t, add_special_tokens=False, truncation=True, max_length=6)["input_ids"] for t in texts]
    want = BinaryTokenIndex.from_token_ids(ids, len(tok))
    assert index.vocab_size == len(tok) == 30522
    np.testing.assert_array_equal(index.postings, want.postings)
    np.testing.assert_array_equal(index.indptr, want.indptr)
    assert tok.cls_token_id not in {t for d in ids for t in d}


# ---------------------------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------------------------
def small_index() -> BinaryTokenIndex:
    rng = np.random.default_rng(12)
    return BinaryTokenIndex.from_token_ids(random_docs(rng, BLOCK + 77, 300, 12), 300)


def test_save_load_roundtrip(tmp_path) -> None:
    index = small_index()
    path = index.save(tmp_path / "t.tokcsr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.tokcsr"]  # no temp file left
    back = BinaryTokenIndex.load(path)
    assert (back.n_docs, back.vocab_size, back.nbytes) == (index.n_docs, index.vocab_size, index.nbytes)
    np.testing.assert_array_equal(back.indptr, index.indptr)
    np.testing.assert_array_equal(back.postings, index.postings)
    q = dyadic_queries(np.random.default_rng(0), 3, 300, 0.1)
    for a, b in zip(back.search(q, 10), index.search(q, 10)):
        np.testing.assert_array_equal(a, b)
    empty = BinaryTokenIndex.from_token_ids([], 7)
    assert BinaryTokenIndex.load(empty.save(tmp_path / "e.tokcsr")).n_docs == 0


def test_load_truncated_or_corrupt(tmp_path) -> None:
    path = small_index().save(tmp_path / "t.tokcsr")
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) - 100],
        "header-only": data[:40],
        "flipped": data[:-50] + bytes([data[-50] ^ 0xFF]) + data[-49:],
        "magic": b"XXXXXXXX" + data[8:],
        "empty": b"",
    }
    for name, blob in cases.items():
        bad = tmp_path / f"{name}.tokcsr"
        bad.write_bytes(blob)
        with pytest.raises(DataError, match=str(bad).replace("\\", "\\\\")):
            BinaryTokenIndex.load(bad)
    with pytest.raises(DataError, match="does not exist"):
        BinaryTokenIndex.load(tmp_path / "missing.tokcsr")


# ---------------------------------------------------------------------------------------------
# the numpy fallback when numba is absent or its prefetch intrinsic fails
# ---------------------------------------------------------------------------------------------
def test_without_numba(monkeypatch) -> None:
    index = BinaryTokenIndex.from_token_ids([[1, 2], [2], [0]], 3)
    q = np.array([[0.5, 1.0, 2.0]], np.float32)
    monkeypatch.setattr(token_csr, "_numba", None)
    assert not token_csr.numba_available()
    s, i = index.search(q, 2)  # numpy path
    assert i.tolist() == [[0, 1]] and s.tolist() == [[3.0, 2.0]]
    with pytest.raises(ConfigError, match="numba"):
        index.search(q, 2, backend="numba")


def test_env_var_disables_numba(monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_NO_NUMBA", "1")
    assert not token_csr.numba_available()


def test_kernel_without_prefetch(monkeypatch) -> None:
    """If the prefetch intrinsic does not compile, a copy of the kernel without it is used."""
    if "numba" not in BACKENDS:
        pytest.skip("numba not installed")

    def broken(*args):
        raise RuntimeError("no prefetch here")

    monkeypatch.setattr(token_csr, "_search_kernel", broken)
    monkeypatch.setattr(token_csr, "_search_kernel_plain", None)
    rng = np.random.default_rng(13)
    docs = random_docs(rng, BLOCK + 100, 40, 6)
    index = BinaryTokenIndex.from_token_ids(docs, 40)
    q = dyadic_queries(rng, 3, 40, 0.3)
    with pytest.warns(RuntimeWarning, match="without prefetch"):
        s, i = index.search(q, 9, backend="numba")
    want_s, want_i = truth(binary_matrix(docs, 40), q, 9)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(s, want_s.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# the benchmark, tiny
# ---------------------------------------------------------------------------------------------
def test_bench_smoke(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    import json

    from harness.bench import beta_search

    out = tmp_path / "b.json"
    rc = beta_search.main([
        "--n-docs", "3000", "--vocab", "2000", "--doc-tokens", "20", "--query-active", "50",
        "--batch", "4", "--k", "10", "--repeats", "3", "--skip-build", "--json", str(out),
    ])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["check"]["same_topk_scores"] is True
    assert set(res["runs"]) == {"uniform", "df"}  # both query kinds by default
    assert all(r["check"]["same_topk_scores"] for r in res["runs"].values())
    assert res["index"]["nnz"] > 0 and res["search"]["ours"]["mean_ms"] > 0
    assert res["target"]["queries"] == "df" and isinstance(res["target"]["met"], bool)
    text = capsys.readouterr().out
    assert "ratio" in text and ("MET" in text) and "reproduce: python -m harness bench beta-search --n-docs 3000" in text


def test_bench_scale_run_small(tmp_path, capsys) -> None:
    """--scale-n-docs: a second index generated block by block, ours timed, torch skipped past the budget."""
    import json

    from harness.bench import beta_search

    out = tmp_path / "s.json"
    rc = beta_search.main([
        "--n-docs", "2000", "--vocab", "1500", "--doc-tokens", "20", "--query-active", "40", "--batch", "3",
        "--k", "5", "--repeats", "3", "--skip-build", "--skip-baseline", "--query-dims", "df",
        "--scale-n-docs", str(BLOCK + 50), "--scale-repeats", "3", "--json", str(out),
    ])
    assert rc == 0
    scale = json.loads(out.read_text())["scale"]
    assert scale["n_docs"] == BLOCK + 50 and scale["nnz"] > 0
    assert abs(scale["density"] - 20 / 1500) < 0.002
    assert scale["runs"]["df"]["search"]["ours"]["mean_ms"] > 0 and scale["peak_rss_bytes"] > 0
    assert "torch not run" in capsys.readouterr().out


def test_bench_scale_generator_is_bernoulli() -> None:
    """The block generator's postings: sorted distinct ids per (block, token), df close to p."""
    from harness.bench import beta_search

    if not token_csr.numba_available():
        pytest.skip("numba not installed")
    p = np.array([1.0, 0.5, 0.01, 0.0, 0.2])
    index = beta_search.synthetic_index_blocks(BLOCK + 1000, p, seed=1, say=lambda *a: None)
    csc = index.to_scipy_csr(np.float32).tocsc()
    df = np.diff(csc.indptr) / index.n_docs
    assert df[0] == 1.0 and df[3] == 0.0
    np.testing.assert_allclose(df, p, atol=0.01)
    for b in range(index.n_blocks):
        for t in range(p.size):
            seg = index.postings[index.indptr[b, t] : index.indptr[b, t + 1]]
            assert np.all(np.diff(seg.astype(np.int64)) > 0)
    with pytest.raises(ConfigError):
        beta_search.main(["--k", "0"])


def test_from_postings_checks_the_order_in_chunks_across_their_edges(monkeypatch) -> None:
    """The order check runs in chunks of _CHECK_CHUNK neighbours (it held 17 bytes a posting at once):
    with chunks of 2, a descent that straddles a chunk's edge is still refused, and a token boundary
    at a chunk's edge (where ids may fall) is still allowed; the index is the one built in one piece."""
    import harness.indexes.token_csr as tc

    indptr, ids = np.array([0, 3, 5, 7]), np.array([0, 2, 3, 1, 2, 0, 3])  # tokens start at 3 and 5
    whole = BinaryTokenIndex.from_postings(indptr, ids, 4, 3)
    for size in (1, 2, 3, 4):
        monkeypatch.setattr(tc, "_CHECK_CHUNK", size)
        small = BinaryTokenIndex.from_postings(indptr, ids, 4, 3)
        np.testing.assert_array_equal(small.postings, whole.postings)
        np.testing.assert_array_equal(small.indptr, whole.indptr)
        with pytest.raises(ConfigError, match="sorted and distinct"):  # token 0's 2, 1 descend (positions 1-2)
            BinaryTokenIndex.from_postings(indptr, np.array([0, 2, 1, 1, 2, 0, 3]), 4, 3)
        with pytest.raises(ConfigError, match="sorted and distinct"):  # token 2's 3, 3 repeat (positions 5-6)
            BinaryTokenIndex.from_postings(indptr, np.array([0, 2, 3, 1, 2, 3, 3]), 4, 3)
