"""harness.indexes.pyserini_env.SortedHits: Lucene hits read without Anserini's per-hit stored
document loads (the top docs as one Jackson JSON string, each id looked up once, ties adjusted as
Anserini's ScoreTiesAdjusterReranker does) are the hits pyserini's own ``batch_search`` objects give
— the same docids in the same order and the same float32 scores — for every lucene kind (bm25,
pretokenized, impact), with many tied scores, non-ASCII docids and queries that find nothing."""
from __future__ import annotations

import random

import pytest

from harness.datasets import Doc
from harness.indexes import build_index
from harness.indexes.lucene import LUCENE_DIR

WORDS = ["river", "flow", "sea", "delta", "stone", "bridge", "Zürich", "harbour", "mill", "tide"]


def _docs(n: int = 300, seed: int = 0) -> list[tuple[str, list[str]]]:
    """Short documents over a ten-word vocabulary: many equal lengths and term frequencies, so many
    equal BM25 scores; every tenth document repeats an earlier one (exact ties)."""
    rng = random.Random(seed)
    docs: list[tuple[str, list[str]]] = []
    for i in range(n):
        words = docs[i - 7][1] if i % 10 == 9 else [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
        docs.append((f"d{i:03d}" if i % 25 else f"dé{i}", words))
    return docs


def _queries(seed: int = 1) -> dict[str, str]:
    rng = random.Random(seed)
    queries = {f"q{i}": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for i in range(40)}
    queries["q-none"] = "volcano"  # in no document
    return queries


def _pyserini(searcher, queries, qids, k):
    """What the harness read before: pyserini's batch_search, one pyjnius object per hit."""
    hits = searcher.batch_search(queries, qids, k=k, threads=1)
    return {q: [(h.docid, float(h.score)) for h in hits.get(q, [])] for q in qids}


def _assert_same(got, want):
    assert set(got) == set(want)
    for qid in want:
        assert got[qid] == want[qid], qid
    n = sum(map(len, want.values()))
    ties = sum(sum(1 for a, b in zip(h, h[1:]) if abs(a[1] - b[1]) < 1e-3) for h in want.values())
    assert n > 1000 and ties > 100, (n, ties)  # the comparison covered many hits and ties


@pytest.mark.parametrize("kind", ["bm25", "pretokenized"])
def test_bm25_hits_equal_pyserinis_objects(kind, tmp_path):
    docs = _docs()
    payload = ([Doc(id=d, title="", text=" ".join(w)) for d, w in docs] if kind == "bm25"
               else [(d, " ".join(w)) for d, w in docs])
    index = build_index(f"lucene:{kind}", payload, out=tmp_path / LUCENE_DIR)
    queries = _queries()
    got = index.search(queries, 100)
    _assert_same(got, _pyserini(index.searcher.searcher, list(queries.values()), list(queries), 100))
    assert got["q-none"] == []


def test_impact_hits_equal_pyserinis_objects(tmp_path):
    rng = random.Random(2)
    docs = [(d, {w: rng.randint(1, 3) for w in words}) for d, words in _docs()]
    index = build_index("lucene:impact", docs, out=tmp_path / LUCENE_DIR)
    queries = {qid: {w: rng.randint(1, 4) for w in text.split()} for qid, text in _queries().items()}
    queries["q-unknown-token"] = {"volcano": 3, "river": 1}  # pyserini drops tokens the index lacks
    got = index.search(queries, 100)
    _assert_same(got, _pyserini(index.searcher, list(queries.values()), list(queries), 100))
    assert got["q-none"] == []
    assert got["q-unknown-token"] == index.search({"r": {"river": 1}}, 100)["r"] != []


def test_threads_change_nothing_but_the_time(tmp_path):
    """Queries spread over Python threads (each query searched whole by one) give the hits of one."""
    docs = [Doc(id=d, title="", text=" ".join(w)) for d, w in _docs()]
    index = build_index("lucene:bm25", docs, out=tmp_path / LUCENE_DIR)
    queries = _queries()
    one = index.search(queries, 50, threads=1)
    assert index.search(queries, 50, threads=2) == one == index.search(queries, 50, threads=3)
    assert sum(map(len, one.values())) > 500


def test_an_impact_query_of_more_terms_than_lucenes_default_clause_limit_scores_every_term(tmp_path):
    """LightRetriever's full-size sparse queries (Table 4's qfull-dlight) hold thousands of terms, past
    Lucene's 1,024 Boolean clauses (the rehearsal's search failed with TooManyClauses, as Anserini's
    SimpleImpactSearcher does): the limit is raised to the query's size and every term is scored, each
    document's score the dot product of its impacts and the query's weights."""
    import numpy as np

    rng = random.Random(3)
    vocab = [f"t{i}" for i in range(3000)]
    docs = [(f"d{i}", {w: rng.randint(1, 9) for w in rng.sample(vocab, 1500)}) for i in range(20)]
    index = build_index("lucene:impact", docs, out=tmp_path / LUCENE_DIR)
    query = {w: rng.randint(1, 5) for w in rng.sample(vocab, 2500)}
    got = index.search({"q": query}, 20)["q"]
    want = sorted(((d, float(sum(query.get(w, 0) * x for w, x in weights.items()))) for d, weights in docs),
                  key=lambda h: -h[1])
    assert len(got) == 20 and [d for d, _ in got] == [d for d, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], rtol=1e-6)
