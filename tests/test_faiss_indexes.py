"""faiss dense and binary index backends and BPR's two-stage search, against exact search."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.bench.bpr_index import main as bench_main
from harness.bench.bpr_index import recall_at, synthetic_embeddings
from harness.errors import ConfigError
from harness.indexes.faiss_binary import (
    BinaryFaissIndex,
    binarize,
    rerank_candidates,
    two_stage_search,
    unpack_pm1,
)
from harness.indexes.faiss_dense import DenseFaissIndex

D = 64


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    """Clustered vectors (the benchmark's generator, small): passages and queries near them."""
    X, Q, _ = synthetic_embeddings(4000, 40, D, seed=1, n_clusters=40, query_noise=1.0)
    return X, Q


def exact_ip(X: np.ndarray, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    S = Q @ X.T
    ids = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(S, ids, axis=1), ids


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Numpy popcount ground truth: [na, nb] Hamming distances between packed codes."""
    return np.unpackbits(a[:, None, :] ^ b[None, :, :], axis=2).sum(axis=2).astype(np.int64)


# --- dense ------------------------------------------------------------------------------------------


def test_flat_is_exact(data):
    X, Q = data
    S, ids = DenseFaissIndex.build("Flat", X).search(Q, 10)
    S_ref, ids_ref = exact_ip(X, Q, 10)
    np.testing.assert_array_equal(ids, ids_ref)
    np.testing.assert_allclose(S, S_ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("spec", ["HNSW32", "HNSW512"])
def test_hnsw_ip_transform_recall_and_scores(data, spec):
    X, Q = data
    index = DenseFaissIndex.build(spec, X)
    assert index.index.d == D + 1 and index.index.metric_type == 1  # METRIC_L2 over d + 1 dims
    assert index.index.hnsw.efConstruction == 200 and index.ef_search == 128
    S, ids = index.search(Q, 10)
    _, ids_ref = exact_ip(X, Q, 10)
    assert recall_at(ids, ids_ref, 10) >= 0.9
    # scores come back as inner products of the returned rows
    np.testing.assert_allclose(S, np.einsum("qd,qkd->qk", Q, X[ids]), rtol=1e-4, atol=1e-2)
    assert np.all(np.diff(S, axis=1) <= 1e-3)


def test_hnsw_adds_in_chunks_with_one_augmentation_and_no_copy_of_the_whole_corpus(data, monkeypatch):
    """DPR's HNSW of the 21M passages would hold an augmented copy of every vector (60 GiB) beside the
    vectors and the graph: it augments and adds a chunk at a time, every chunk with the corpus's one
    largest norm (so inner products still rank as L2 over d + 1 dims: exact-search recall and scores
    hold), and its numpy allocations stay below a chunk's few copies (tracemalloc sees numpy's)."""
    import tracemalloc

    from harness.indexes import faiss_dense

    X, Q = data
    monkeypatch.setattr(faiss_dense, "HNSW_ADD_CHUNK", 500)
    tracemalloc.start()
    index = DenseFaissIndex.build("HNSW32", X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert index.index.ntotal == len(X) and index.max_sq_norm == pytest.approx(float((X * X).sum(1).max()), rel=1e-5)
    assert peak < X.nbytes / 2, (peak, X.nbytes)  # one chunk of 500 x 65 floats, not 4,000 x 65
    S, ids = index.search(Q, 10)
    assert recall_at(ids, exact_ip(X, Q, 10)[1], 10) >= 0.9
    np.testing.assert_allclose(S, np.einsum("qd,qkd->qk", Q, X[ids]), rtol=1e-4, atol=1e-2)


def test_dpr_baselines_read_the_flat_indexs_vectors_without_a_copy(data, tmp_path):
    """The baselines' builder reads DPR's Flat index back: its vectors are used in place (a copy of the
    21M passages' would be another 60 GiB), and an LSH built from them equals one built from the array."""
    import tracemalloc

    import faiss

    from harness.artifacts import DOCIDS
    from harness.methods.bpr.index import build_dpr_baseline

    X, Q = data
    flat = tmp_path / "flat"
    flat.mkdir()
    DenseFaissIndex.build("Flat", X).save(flat)
    (flat / DOCIDS).write_text("".join(f"d{i}\n" for i in range(len(X))))
    (tmp_path / "lsh").mkdir()
    tracemalloc.start()
    info = build_dpr_baseline("faiss:LSH", flat, tmp_path / "lsh")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert info["documents"] == len(X) and peak < X.nbytes / 2, (peak, X.nbytes)
    got = faiss.read_index(str(tmp_path / "lsh" / "index.faiss"))
    want = DenseFaissIndex.build("LSH", X).index
    assert np.array_equal(faiss.vector_to_array(got.codes), faiss.vector_to_array(want.codes))


@pytest.mark.parametrize("spec, per_vector", [("PQ8x8np", 8), ("LSH", D // 8), ("Flat", 4 * D)])
def test_fixed_bytes_are_what_does_not_grow_with_the_corpus(data, tmp_path, spec, per_vector):
    """A PQ's codebooks (8 x 256 x 8 floats here; 786 KB for BPR Table 1's PQ96x8 over 768 dimensions)
    do not grow with the corpus: the index records them apart (the trained index before any vector),
    so the cost estimate scales only the rest to the 21M passages. The rest is the vectors' codes."""
    X, _ = data
    index = DenseFaissIndex.build(spec, X)
    size = index.save(tmp_path).stat().st_size
    assert size - index.fixed_bytes == len(X) * per_vector
    if spec.startswith("PQ"):
        assert index.fixed_bytes >= 8 * 256 * (D // 8) * 4


def test_hnsw_without_transform_would_rank_by_l2(data):
    """The transform matters: plain L2 neighbours differ from inner-product neighbours here."""
    X, Q = data
    _, ids_ip = exact_ip(X, Q, 10)
    l2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    ids_l2 = np.argsort(l2, axis=1)[:, :10]
    assert recall_at(ids_l2, ids_ip, 10) < 0.95
    _, ids = DenseFaissIndex.build("HNSW32", X).search(Q, 10)
    assert recall_at(ids, ids_ip, 10) > recall_at(ids_l2, ids_ip, 10)


def test_lsh_scores_are_negative_hamming_of_sign_codes(data):
    X, Q = data
    index = DenseFaissIndex.build("LSH", X)
    assert index.index.nbits == D and not index.index.rotate_data
    S, ids = index.search(Q, 20)
    truth = hamming(binarize(Q), binarize(X))  # Hamming does not depend on the bit order
    np.testing.assert_array_equal(-S, np.take_along_axis(truth, ids, axis=1))
    np.testing.assert_array_equal(-S, np.sort(truth, axis=1)[:, :20])


@pytest.mark.parametrize("spec,nbits,rotate", [("LSHr", D, True), ("LSH128r", 128, True), ("LSH32", 32, False)])
def test_lsh_variants(data, spec, nbits, rotate):
    X, Q = data
    index = DenseFaissIndex.build(spec, X)
    assert (index.index.nbits, bool(index.index.rotate_data)) == (nbits, rotate)
    _, ids = index.search(Q, 100)
    _, ids_ref = exact_ip(X, Q, 100)
    assert recall_at(ids, ids_ref, 100) > 5 * 100 / len(X)  # far better than chance


def test_pq_recall_and_approximate_scores(data):
    X, Q = data
    index = DenseFaissIndex.build("PQ8x8np", X)  # 8 bytes per vector = D bits, BPR's code size
    S, ids = index.search(Q, 100)
    _, ids_ref = exact_ip(X, Q, 100)
    assert recall_at(ids, ids_ref, 100) >= 0.3
    exact = np.einsum("qd,qkd->qk", Q, X[ids])
    assert np.corrcoef(S.ravel(), exact.ravel())[0, 1] > 0.9


@pytest.mark.parametrize("spec", ["Flat", "HNSW32", "LSH", "LSH128r", "PQ8x8np"])
def test_dense_save_load_round_trip(data, tmp_path, spec):
    X, Q = data
    index = DenseFaissIndex.build(spec, X)
    if spec == "HNSW32":
        index.ef_search = 64
    index.save(tmp_path)
    loaded = DenseFaissIndex.load(tmp_path, spec)
    assert loaded.ntotal == len(X)
    S1, I1 = index.search(Q, 10)
    S2, I2 = loaded.search(Q, 10)
    np.testing.assert_array_equal(I1, I2)
    np.testing.assert_allclose(S1, S2, rtol=1e-5, atol=1e-4)
    if spec == "HNSW32":
        assert loaded.ef_search == 64
        assert loaded.max_sq_norm == pytest.approx(index.max_sq_norm, rel=1e-5)


def test_dense_load_refuses_another_spec(data, tmp_path):
    X, _ = data
    DenseFaissIndex.build("Flat", X[:500]).save(tmp_path)
    with pytest.raises(ConfigError, match="not faiss:PQ8x8"):
        DenseFaissIndex.load(tmp_path, "PQ8x8")


@pytest.mark.parametrize(
    "spec,expect",
    [("HNWS32", "HNSW32"), ("Flatt", "Flat"), ("PQ8", "PQ8x8"), ("LSHx", "LSH"), ("LSH999", "nbits")],
)
def test_dense_bad_specs(data, spec, expect):
    X, _ = data
    with pytest.raises(ConfigError, match=expect):
        DenseFaissIndex.build(spec, X[:500])


def test_dense_bad_queries(data):
    X, Q = data
    index = DenseFaissIndex.build("Flat", X[:500])
    with pytest.raises(ConfigError, match="dims"):
        index.search(Q[:, :10], 5)
    with pytest.raises(ConfigError, match="k must be"):
        index.search(Q, 0)


# --- binary -----------------------------------------------------------------------------------------


def test_binarize_bit_order_is_numpy_packbits_of_positive():
    e = np.zeros((4, 16), dtype=np.float32)
    e[0, 0] = 1.0  # first dimension -> most significant bit of byte 0
    e[1, 7] = 0.5  # eighth dimension -> least significant bit of byte 0
    e[2, 8] = 2.0  # ninth dimension -> most significant bit of byte 1
    e[3, :] = -1.0
    e[3, 15] = 0.0  # zero counts as negative (sign(0) = -1 in BPR)
    codes = binarize(e)
    assert codes.dtype == np.uint8 and codes.shape == (4, 2)
    np.testing.assert_array_equal(codes, [[128, 0], [1, 0], [0, 128], [0, 0]])
    np.testing.assert_array_equal(codes, np.packbits(e > 0, axis=1))
    pm1 = unpack_pm1(codes)
    np.testing.assert_array_equal(pm1, np.where(e > 0, 1.0, -1.0))


def test_binarize_bad_input():
    with pytest.raises(ConfigError, match="multiple of 8"):
        binarize(np.zeros((3, 10), dtype=np.float32))


@pytest.fixture(scope="module")
def bdata(data):
    X, Q = data
    rng = np.random.default_rng(2)
    X = np.hstack([X] * 12)[:, :768] + rng.normal(0, 0.5, (len(X), 768)).astype(np.float32)
    Q = np.hstack([Q] * 12)[:, :768] + rng.normal(0, 0.5, (len(Q), 768)).astype(np.float32)
    return X, Q, binarize(X), binarize(Q)


def test_bflat_distances_equal_popcount(bdata):
    _, _, codes, qcodes = bdata
    index = BinaryFaissIndex.build("BFlat", codes)
    Dh, ids = index.search(qcodes, 50)
    truth = hamming(qcodes, codes)
    np.testing.assert_array_equal(Dh, np.take_along_axis(truth, ids, axis=1))
    np.testing.assert_array_equal(Dh, np.sort(truth, axis=1)[:, :50])


def _near_duplicates(n: int, nq: int, nbytes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random codes and queries that are copies of some of them with 0-4 bits flipped."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    bits = np.unpackbits(codes[rng.integers(0, n, nq)], axis=1)
    for row in bits:
        flip = rng.choice(bits.shape[1], rng.integers(0, 5), replace=False)
        row[flip] ^= 1
    return codes, np.packbits(bits, axis=1)


@pytest.mark.parametrize(
    "spec,nflip,radius,k", [("BHash16", 3, 3, 200), ("BHash4x16", 0, 3, 200), ("BHash8", 8, 64, 3000)]
)
def test_bhash_finds_every_neighbour_within_radius(spec, nflip, radius, k):
    """Within ``radius`` the bucket probe is exact: b-bit keys within nflip bits, or (multi-hash,
    pigeonhole) some substring key identical when radius < nhash; nflip = b visits every bucket."""
    codes, qcodes = _near_duplicates(3000, 30, 8, seed=3)
    index = BinaryFaissIndex.build(spec, codes, nflip=nflip)
    Dh, ids = index.search(qcodes, k)
    truth = hamming(qcodes, codes)
    found_any = False
    for q in range(len(qcodes)):
        ok = ids[q] >= 0
        np.testing.assert_array_equal(Dh[q][ok], truth[q, ids[q][ok]])  # distances are exact
        within = set(np.flatnonzero(truth[q] <= radius).tolist())
        got = {int(i) for i, dist in zip(ids[q], Dh[q]) if i >= 0 and dist <= radius}
        assert got == within
        found_any |= bool(within)
    assert found_any


def test_bhash768_returns_true_hamming_distances(bdata):
    _, _, codes, qcodes = bdata
    index = BinaryFaissIndex.build("BHash768", codes)
    Dh, ids = index.search(qcodes, 100)
    truth = hamming(qcodes, codes)
    ok = ids >= 0
    np.testing.assert_array_equal(Dh[ok], np.take_along_axis(truth, np.maximum(ids, 0), axis=1)[ok])
    with pytest.raises(ConfigError, match="nflip"):
        index.set_nflip(1)  # faiss keys on <= 64 bits; flips over 768 bits are undefined


def test_two_stage_rerank_scores_are_dense_query_times_pm1_codes(bdata):
    _, Q, codes, qcodes = bdata
    index = BinaryFaissIndex.build("BFlat", codes)
    S, ids = two_stage_search(index, qcodes, Q, codes, k=20, n_candidates=300)
    pm1 = unpack_pm1(codes)
    np.testing.assert_allclose(S, np.einsum("qd,qkd->qk", Q, pm1[ids]), rtol=1e-5, atol=1e-3)
    # and they are the best 20 of the 300 Hamming candidates
    _, cand = index.search(qcodes, 300)
    cand_scores = np.einsum("qd,qkd->qk", Q, pm1[cand])
    np.testing.assert_allclose(S, -np.sort(-cand_scores, axis=1)[:, :20], rtol=1e-5, atol=1e-3)


def test_two_stage_without_rerank_is_hamming_order(bdata):
    _, Q, codes, qcodes = bdata
    index = BinaryFaissIndex.build("BFlat", codes)
    S, ids = two_stage_search(index, qcodes, Q, codes, k=30, rerank=False)
    truth = hamming(qcodes, codes)
    dist = np.take_along_axis(truth, ids, axis=1)
    np.testing.assert_array_equal(-S, dist)
    assert np.all(np.diff(dist, axis=1) >= 0)
    np.testing.assert_array_equal(dist, np.sort(truth, axis=1)[:, :30])


def test_no_candidate_generation_equals_full_rerank(bdata):
    _, Q, codes, qcodes = bdata
    S_all, ids_all = two_stage_search(None, None, Q, codes, k=25, n_candidates=None)
    index = BinaryFaissIndex.build("BFlat", codes)
    S_full, ids_full = two_stage_search(index, qcodes, Q, codes, k=25, n_candidates=len(codes))
    np.testing.assert_array_equal(ids_all, ids_full)
    np.testing.assert_allclose(S_all, S_full, rtol=1e-5, atol=1e-3)
    exact = Q @ unpack_pm1(codes).T
    np.testing.assert_array_equal(ids_all, np.argsort(-exact, axis=1, kind="stable")[:, :25])


def test_rerank_drops_missing_candidates():
    rng = np.random.default_rng(4)
    codes = binarize(rng.standard_normal((50, 16)).astype(np.float32))
    q = rng.standard_normal((2, 16)).astype(np.float32)
    cand = np.array([[3, -1, 7, -1], [-1, -1, -1, 5]])
    S, ids = rerank_candidates(cand, q, codes, k=4)
    assert set(ids[0, :2].tolist()) == {3, 7} and ids[0, 2:].tolist() == [-1, -1]
    assert ids[1, 0] == 5 and np.isneginf(S[1, 1:]).all()


@pytest.mark.parametrize("spec,nflip", [("BFlat", 0), ("BHash768", 0), ("BHash16", 2), ("BHash4x16", 1)])
def test_binary_save_load_round_trip(bdata, tmp_path, spec, nflip):
    _, _, codes, qcodes = bdata
    index = BinaryFaissIndex.build(spec, codes, nflip=nflip)
    index.save(tmp_path)
    loaded = BinaryFaissIndex.load(tmp_path, spec)
    assert loaded.ntotal == len(codes) and getattr(loaded.index, "nflip", 0) == nflip
    D1, I1 = index.search(qcodes, 20)
    D2, I2 = loaded.search(qcodes, 20)
    np.testing.assert_array_equal(D1, D2)
    np.testing.assert_array_equal(I1, I2)
    with pytest.raises(ConfigError, match="not faiss-binary:BHash32"):
        BinaryFaissIndex.load(tmp_path, "BHash32")


@pytest.mark.parametrize(
    "spec,expect",
    [("BFLat", "BFlat"), ("Flat", "BFlat"), ("BHash", "did you mean"), ("BHash0", "hash bits"),
     ("BHash8x100", "multi-hash"), ("BHash20x64", "multi-hash")],
)
def test_binary_bad_specs(spec, expect):
    codes = np.zeros((10, 96), dtype=np.uint8)
    with pytest.raises(ConfigError, match=expect):
        BinaryFaissIndex.build(spec, codes)


def test_binary_bad_inputs(bdata):
    _, Q, codes, qcodes = bdata
    with pytest.raises(ConfigError, match="uint8"):
        BinaryFaissIndex.build("BFlat", codes.astype(np.int32))
    index = BinaryFaissIndex.build("BFlat", codes)
    with pytest.raises(ConfigError, match="bytes per code"):
        index.search(qcodes[:, :8], 5)
    with pytest.raises(ConfigError, match="BHash specs only"):
        index.set_nflip(2)
    with pytest.raises(ConfigError, match="match the codes"):
        two_stage_search(index, qcodes, Q[:, :100], codes, 5)
    with pytest.raises(ConfigError, match="needs rerank"):
        two_stage_search(None, None, Q, codes, 5, n_candidates=None, rerank=False)


# --- benchmark --------------------------------------------------------------------------------------


def test_synthetic_embeddings_are_deterministic():
    a = synthetic_embeddings(500, 7, 32, seed=5)
    b = synthetic_embeddings(500, 7, 32, seed=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    X, Q, src = a
    assert X.shape == (500, 32) and Q.shape == (7, 32) and X.dtype == Q.dtype == np.float32
    assert src.shape == (7,) and src.max() < 500


def test_bench_runs_small(tmp_path, capsys):
    out = tmp_path / "bpr.json"
    rc = bench_main(["--n-docs", "3000", "--n-docs-hnsw", "600", "--n-queries", "20", "--dim", "64",
                     "--n-candidates", "200", "--k", "20", "--repeats", "1", "--json", str(out),
                     "--workdir", str(tmp_path)])
    assert rc == 0
    report = json.loads(out.read_text())
    keys = {r["key"] for r in report["rows"]}
    assert keys == {"flat", "hnsw", "lsh", "lshr", "pq", "bflat", "bhash", "bmultihash", "bpr-norerank",
                    "bpr-nocand"}
    for r in report["rows"]:
        assert 0.0 <= r["recall"] <= 1.0 and r["bytes"] > 0 and r["ms_per_query"] > 0
    rows = {r["key"]: r for r in report["rows"]}
    assert rows["flat"]["recall"] == 1.0
    assert rows["hnsw"]["n_docs"] == 600
    assert rows["bflat"]["extra"]["recall_vs_bpr_exact"] >= 0.8  # l=200 of 3000 candidates
    assert "ratios" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["bpr.json"]  # index files were cleaned up


def test_bench_bad_options():
    with pytest.raises(ConfigError, match="did you mean 'bflat'"):
        bench_main(["--only", "bflta"])
    with pytest.raises(ConfigError, match="multiple of 16"):
        bench_main(["--dim", "100"])


@pytest.mark.parametrize("only", ["hnsw", "bpr-norerank,lsh"])
def test_bench_subsets(tmp_path, only):
    out = tmp_path / "bpr.json"
    rc = bench_main(["--n-docs", "2000", "--n-docs-hnsw", "400", "--n-queries", "10", "--dim", "32",
                     "--n-candidates", "100", "--k", "10", "--repeats", "1", "--only", only, "--json", str(out),
                     "--workdir", str(tmp_path)])
    assert rc == 0
    assert {r["key"] for r in json.loads(out.read_text())["rows"]} == set(only.split(","))


def test_flat_search_in_numpy_blas_gives_faiss_indexflatip_results(data):
    """The harness searches Flat as a numpy BLAS product (harness.indexes.blas): the same ids in the
    same order as faiss's own IndexFlatIP search, the same scores to float rounding, for batches below
    and above faiss's BLAS threshold (20 queries), k beyond N capped, and a re-loaded index."""
    import faiss

    X, Q = data
    index = DenseFaissIndex.build("Flat", X)
    assert index._flat_ip()
    for batch in (Q[:3], Q):
        S, I = index.search(batch, 25)
        fS, fI = faiss.Index.search(index.index, np.ascontiguousarray(batch, dtype=np.float32), 25)
        assert np.array_equal(I, fI)
        np.testing.assert_allclose(S, fS, rtol=1e-5, atol=1e-4)
    small = DenseFaissIndex.build("Flat", X[:7])
    S, I = small.search(Q[:2], 50)
    assert I.shape == (2, 7) and sorted(I[0].tolist()) == list(range(7)) and np.all(np.diff(S, axis=1) <= 0)


def test_blas_topk_breaks_ties_by_lower_row_id():
    from harness.indexes.blas import topk_inner_product

    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.0]], np.float32)
    s, i = topk_inner_product(np.array([[1.0, 0.0]], np.float32), x, 3)
    assert i.tolist() == [[0, 2, 3]] and s.tolist() == [[1.0, 1.0, 0.5]]


def test_blas_topk_is_the_same_for_any_thread_count(tmp_path, monkeypatch):
    """OpenBLAS splits one product differently for 1 and 2 threads and the last bits move; exact
    search multiplies fixed chunks single-threaded, so processes with other BLAS thread counts (a
    1-thread Snakemake job, a 2-thread `python -m harness search`) write the same scores."""
    import os
    import subprocess
    import sys

    from harness.indexes import blas

    code = ("import sys, numpy as np\nfrom harness.indexes import blas\nblas.CHUNK_ROWS = 3000\n"
            "rng = np.random.default_rng(0)\nx = rng.standard_normal((10000, 96), dtype=np.float32)\n"
            "q = rng.standard_normal((37, 96), dtype=np.float32)\n"
            "s, i = blas.topk_inner_product(q, x, 40)\nnp.save(sys.argv[1], np.concatenate([s, i.astype(np.float32)]))\n")
    outs = []
    for threads in ("1", "2"):
        out = tmp_path / f"t{threads}.npy"
        env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
        subprocess.run([sys.executable, "-c", code, str(out)], check=True, env={**env, "OPENBLAS_NUM_THREADS": threads})
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0], outs[1])
    monkeypatch.setattr(blas, "CHUNK_ROWS", 3000)   # in one process: 1 worker and 3 workers, 4 chunks merged
    rng = np.random.default_rng(1)
    x, q = rng.standard_normal((10000, 32), dtype=np.float32), rng.standard_normal((5, 32), dtype=np.float32)
    one, three = blas.topk_inner_product(q, x, 20, threads=1), blas.topk_inner_product(q, x, 20, threads=3)
    np.testing.assert_array_equal(one[0], three[0])
    np.testing.assert_array_equal(one[1], three[1])
    full = q @ x.T
    np.testing.assert_array_equal(one[1][:, 0], full.argmax(1))
    np.testing.assert_allclose(one[0], -np.sort(-full, 1)[:, :20], rtol=1e-5)
