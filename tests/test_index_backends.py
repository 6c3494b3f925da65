"""The uniform index-backend interface (harness.indexes): a contract test over every registered
backend, exact backends against brute-force numpy search, spec checking (typos, every config spec)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import yaml

from harness.datasets import Doc
from harness.errors import ConfigError, DataError
from harness.indexes import (
    BACKENDS,
    Index,
    build_index,
    canonical_spec,
    check_spec,
    index_bytes,
    load_index,
    parse_spec,
)
from harness.indexes.phrase_dump import DumpWriter
from harness.meta import write_meta

REPO = Path(__file__).resolve().parent.parent
D, N, B, K = 32, 700, 5, 10
VOCAB = 50


# --------------------------------------------------------------------------------------------
# payloads and queries, per backend
# --------------------------------------------------------------------------------------------
def dense() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((N, D)).astype(np.float32), rng.standard_normal((B, D)).astype(np.float32)


def codes() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (300, 16), dtype=np.uint8), rng.integers(0, 256, (B, 16), dtype=np.uint8)


def token_lists() -> tuple[list[list[int]], np.ndarray]:
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, VOCAB, rng.integers(0, 12)).tolist() for _ in range(80)]
    q = np.zeros((B, VOCAB), np.float32)
    for row in q:  # small integer weights: float32 sums are exact, so ties are exact too
        row[rng.choice(VOCAB, 6, replace=False)] = rng.integers(1, 4, 6)
    return docs, q


def sparse() -> tuple[sp.csr_matrix, sp.csr_matrix]:
    rng = np.random.default_rng(3)
    m = sp.random(90, VOCAB, density=0.15, format="csr", dtype=np.float32, rng=rng)
    m.data = np.round(m.data * 8).astype(np.float32) + 1  # integer weights: exact sums
    q = sp.random(B, VOCAB, density=0.2, format="csr", dtype=np.float32, rng=rng)
    q.data = np.round(q.data * 4).astype(np.float32) + 1
    return m, q


BM25_DOCS = [
    Doc("d1", "", "the river flows into the grey sea"),
    Doc("d2", "", "a town on the river"),
    Doc("d3", "", "copper kettles from the town"),
    Doc("d4", "", "grey kettles and grey cloth"),
    Doc("d5", "", "sea birds over the sea"),
]
BM25_QUERIES = {"q1": "grey sea", "q2": "town river", "q3": "kettles"}
TOKENS = [f"t{i}" for i in range(20)] + ["##ing", "don't"]


def impact() -> tuple[list[tuple[str, dict[str, int]]], dict[str, dict[str, int]]]:
    """A dozen documents with integer weights; ids d00..d11 sort like their rows."""
    rng = np.random.default_rng(4)
    docs = []
    for i in range(12):
        toks = rng.choice(len(TOKENS), 6, replace=False)
        docs.append((f"d{i:02d}", {TOKENS[t]: int(rng.integers(1, 40)) for t in toks}))
    queries = {}
    for j in range(6):
        toks = rng.choice(len(TOKENS), 4, replace=False)
        queries[f"q{j}"] = {TOKENS[t]: int(rng.integers(1, 9)) for t in toks}
    return docs, queries


def phrase_dump() -> tuple[Path, np.ndarray]:
    """A float32 phrase dump of 40 passages (N token rows in all) in a fresh folder, and dense queries."""
    rng = np.random.default_rng(5)
    folder = Path(tempfile.mkdtemp(prefix="phrase-dump-")) / "dump"
    X, Q = dense()
    cuts = np.sort(rng.choice(np.arange(1, N), 39, replace=False))
    with DumpWriter(folder, D, codec="float32") as w:
        for p, (a, b) in enumerate(zip([0, *cuts], [*cuts, N])):
            offsets = np.stack([np.arange(b - a) * 4, np.arange(b - a) * 4 + 3], 1).astype(np.int32)
            w.add(f"p{p}", X[a:b], offsets)
    return folder, Q


# spec -> (payload + queries maker, build options); every registered backend needs at least one
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "faiss:Flat": (dense, {}),
    "faiss:HNSW32": (dense, {}),
    "faiss:LSH": (dense, {}),
    "faiss:PQ8x4np": (dense, {}),
    "faiss:IVF16,Flat": (dense, {}),
    "faiss-binary:BFlat": (codes, {}),
    "faiss-binary:BHash16": (codes, {"nflip": 2}),
    "faiss-binary:BHash16x8": (codes, {"nflip": 1}),
    "token-csr": (token_lists, {"vocab_size": VOCAB}),
    "sparse-csr": (sparse, {}),
    "lucene:bm25": (lambda: (BM25_DOCS, BM25_QUERIES), {"contents": "text"}),
    "lucene:impact": (impact, {}),
    "phrase:Flat": (phrase_dump, {}),
}


def test_every_backend_has_a_case():
    assert {parse_spec(s)[0] for s in CASES} == set(BACKENDS.names())


def _same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a == b
    else:
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Index, Any, Any, Path]]:
    """Every case built once, searched, saved with meta.json: spec -> (index, queries, result, folder)."""
    out = {}
    for spec, (make, options) in CASES.items():
        payload, queries = make()
        index = build_index(spec, payload, **options)
        result = index.search(queries, K)
        folder = tmp_path_factory.mktemp(spec.replace(":", "_").replace(",", "_"))
        index.save(folder)
        write_meta(folder, "index", spec=spec)
        out[spec] = (index, queries, result, folder)
    return out


@pytest.mark.parametrize("spec", list(CASES))
def test_contract_build_save_load_search(built, spec):
    index, queries, result, folder = built[spec]
    assert isinstance(index, Index)
    assert index.spec == canonical_spec(spec)
    assert index.nbytes > 0
    assert index_bytes(folder) > 0
    loaded = load_index(folder)
    assert loaded.spec == canonical_spec(spec)
    _same(loaded.search(queries, K), result)
    if not isinstance(result, dict):
        scores, rows = result
        assert scores.shape == rows.shape == (B, K)
        np.testing.assert_array_equal(scores, -np.sort(-scores, axis=1))  # best first, higher is better
        assert np.all(np.isneginf(scores[rows < 0]))  # padding


# --------------------------------------------------------------------------------------------
# exact backends against brute force
# --------------------------------------------------------------------------------------------
def _topk(exact: np.ndarray, k: int) -> np.ndarray:
    """Rows of the top k per query: score desc, ties by the lower row."""
    n = exact.shape[1]
    return np.stack([np.lexsort((np.arange(n), -row))[:k] for row in exact])


@pytest.mark.parametrize("spec", ["faiss:Flat", "phrase:Flat"])
def test_flat_is_exact(built, spec):
    _, Q, (scores, rows), _ = built[spec]
    X, _ = dense()
    exact = Q @ X.T
    np.testing.assert_array_equal(rows, _topk(exact, K))
    np.testing.assert_allclose(scores, np.take_along_axis(exact, rows, 1), rtol=1e-5)


def test_faiss_binary_bflat_is_exact(built):
    _, Q, (scores, rows), _ = built["faiss-binary:BFlat"]
    X, _ = codes()
    ham = np.unpackbits(Q[:, None, :] ^ X[None, :, :], axis=2).sum(axis=2)
    np.testing.assert_array_equal(-scores, np.sort(ham, axis=1)[:, :K])  # negative Hamming distances
    np.testing.assert_array_equal(-scores, np.take_along_axis(ham, rows, 1))  # ties may come in any order


@pytest.mark.parametrize("spec", ["token-csr", "sparse-csr"])
def test_sparse_backends_are_exact(built, spec):
    _, Q, (scores, rows), _ = built[spec]
    payload, _ = CASES[spec][0]()
    if spec == "token-csr":
        T = np.zeros((len(payload), VOCAB), np.float32)
        for i, toks in enumerate(payload):
            T[i, toks] = 1.0
        exact = Q @ T.T
    else:
        exact = (Q @ payload.T).toarray()
    np.testing.assert_array_equal(rows, _topk(exact, K))
    np.testing.assert_array_equal(scores, np.take_along_axis(exact, rows, 1))


def test_lucene_impact_matches_integer_dot_product(built):
    _, queries, hits, _ = built["lucene:impact"]
    docs, _ = impact()
    ids = [d for d, _ in docs]
    M = np.array([[vec.get(t, 0) for t in TOKENS] for _, vec in docs], np.int64)
    for qid, q in queries.items():
        exact = M @ np.array([q.get(t, 0) for t in TOKENS], np.int64)
        want = [i for i in _topk(exact[None, :].astype(np.float64), K)[0] if exact[i] > 0]  # Lucene: matches only
        got = hits[qid]
        assert [d for d, _ in got] == [ids[i] for i in want], qid  # same ranking, ties by doc id
        for (_, score), i in zip(got, want):
            assert round(score) == exact[i]
            if np.sum(exact == exact[i]) == 1:
                assert score == float(exact[i])  # untied scores are the exact integers


def test_lucene_searches_with_the_jobs_threads_and_the_same_hits(tmp_path, monkeypatch):
    """Without a threads option, Lucene searches with the cores Snakemake gave the job (its
    OMP_NUM_THREADS); each query is one thread's, so 1 and 3 threads give the same hits."""
    from harness.indexes import lucene

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert lucene.search_threads() == 3
    index = build_index("lucene:bm25", BM25_DOCS, contents="text")
    index.save(tmp_path)
    write_meta(tmp_path, "index", spec="lucene:bm25")
    loaded = load_index(tmp_path)
    assert loaded.threads == 3
    queries = {f"{q}-{i}": text for i in range(20) for q, text in BM25_QUERIES.items()}
    assert loaded.search(queries, 3, threads=1) == loaded.search(queries, 3) == index.search(queries, 3, threads=1)
    monkeypatch.setenv("OMP_NUM_THREADS", "x")
    assert lucene.search_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert lucene.search_threads() == 1


def test_lucene_impact_ties_and_bad_weights(tmp_path):
    docs = [("d2", {"a": 3}), ("d0", {"a": 3, "b": 1}), ("d1", {"a": 3})]
    index = build_index("lucene:impact", docs, out=tmp_path / "lucene")
    got = index.search({"q": {"a": 1}}, 3)["q"]
    assert [d for d, _ in got] == ["d0", "d1", "d2"]  # Anserini: equal scores by doc id
    assert [round(s, 4) for _, s in got] == [3.0, 3.0, 3.0]
    with pytest.raises(ConfigError, match="non-negative integers"):
        index.search({"q": {"a": 1.5}}, 3)
    with pytest.raises(ConfigError, match="non-negative integers"):
        build_index("lucene:impact", [("x", {"a": 0.25})])
    assert index.search({"q": {}}, 3) == {"q": []}
    assert index.save(tmp_path) == tmp_path / "lucene"  # built in place: nothing to copy
    from harness.indexes.lucene import _int_weights    # int weights take a fast path: the same checks
    for tok in ("a b", "a\tb", "\u00a0a", ""):
        with pytest.raises(ConfigError, match="non-empty, without whitespace"):
            _int_weights({tok: 3}, "q")
    with pytest.raises(ConfigError, match="non-negative integers"):
        _int_weights({"a": -2}, "q")
    assert _int_weights({"a": 2, "b": 0, "c": True, "d": 4.0}, "q") == {"a": 2, "c": 1, "d": 4}


# --------------------------------------------------------------------------------------------
# spec checking
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, closest", [
    ("faiss:Flatt", "faiss:Flat"),
    ("lucene:bm52", "lucene:bm25"),
    ("faiss-binary:BFlatt", "faiss-binary:BFlat"),
    ("token-csr:x", "token-csr"),
    ("sparse-csr:flat", "sparse-csr"),
    ("faiss-binry:BFlat", "faiss-binary:BFlat"),
    ("lucene:impakt", "lucene:impact"),
    ("faiss:HNSW", "faiss:HNSW32"),
])
def test_check_spec_rejects_typos_with_the_closest_match(bad, closest):
    with pytest.raises(ConfigError) as exc:
        check_spec(bad, where="methods.x.index")
    msg = str(exc.value)
    assert f"did you mean {closest!r}" in msg and bad in msg and msg.startswith("methods.x.index: ")


def test_check_spec_names_the_one_spelling():
    with pytest.raises(ConfigError, match="'faiss:PQ96x8'"):
        check_spec("faiss:PQ96")


def _config_specs() -> set[str]:
    """Every index spec of the methods in configs/*.yaml and configs/profiles/*.yaml (keys index,
    hash_index, dpr_baselines)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("index", "hash_index") and isinstance(value, str):
                    found.add(value)
                elif key == "dpr_baselines" and isinstance(value, dict):
                    found.update(v for v in value.values() if isinstance(v, str))
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted([*REPO.glob("configs/*.yaml"), *REPO.glob("configs/profiles/*.yaml")]):
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        walk(cfg.get("methods", {}) if isinstance(cfg, dict) else {})  # negatives.index names a method
    return found


def test_check_spec_accepts_every_config_spec():
    specs = _config_specs()
    assert {"faiss:Flat", "lucene:bm25", "token-csr", "faiss-binary:BFlat", "faiss:HNSW512"} <= specs
    for spec in sorted(specs | {"faiss:IVF1048576,SQ4", "faiss:PQ96x8", "faiss-binary:BHash768", "lucene:impact",
                                "sparse-csr", "faiss:LSHr", "faiss:LSH768"}):
        check_spec(spec)  # a spec is checked without training or data (a 1M-list IVF included)


def test_load_index_needs_meta_and_a_matching_spec(built, tmp_path):
    with pytest.raises(DataError, match="meta.json"):
        load_index(tmp_path)
    _, _, _, folder = built["faiss:Flat"]
    other = tmp_path / "x"
    other.mkdir()
    (other / "index.faiss").write_bytes((folder / "index.faiss").read_bytes())
    write_meta(other, "index", spec="faiss:HNSW32")
    with pytest.raises(ConfigError, match="not faiss:HNSW32"):
        load_index(other)
