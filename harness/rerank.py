"""Re-ranking the top m of a first-stage run with a bi-encoder (SVDR §4.4, Table 1).

* ``SVDR_β (m)``: the beta-search run re-scored with ``<E_θ(q), E_θ(p)>``: the top-m passages
  are embedded on the fly from their text (no embedding index is read) and re-ranked.
* ``BM25 + DPR (m)``: the BM25 run re-scored with the trained DPR encoders (system ids
  ``dpr.bm25-m<m>``: a DPR variant, since DPR's weights do the scoring).

Below rank m the first-stage order is kept, so top-k for k >= m equals the first stage's (as in
the paper's Table 1, e.g. SVDR_β (m=5) top-20 = SVDR_β top-20). Every passage that some query
needs is embedded once per call (for all depths together), then scored per query. Ties in the
re-ranking score keep the first-stage order. Scores written to the run are order keys
(depth - rank + 1), so that tools which sort by score (ir_measures) see the re-ranked order.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Doc, Query

Hits = dict[str, list[tuple[str, float]]]


def rerank(run: Mapping[str, Sequence[tuple[str, float]]], queries: Sequence[Query], depths: Sequence[int],
           docs: Mapping[str, Doc] | Path, encode_queries: Callable[[list[str]], Any],
           encode_passages: Callable[[list[Doc]], Any]) -> dict[int, Hits]:
    """Re-rank ``run`` at every depth of ``depths``; ``encode_*`` return a numpy array or a scipy
    sparse matrix with one row per input, compared by inner product. ``docs``: the passages by id, or a
    dataset folder whose corpus is read for the passages re-ranked alone (the queries' top m, not
    NQ's 21M passages held whole)."""
    if not depths:
        return {}
    deepest = max(depths)
    qs = [q for q in queries if q.id in run]
    needed = _needed(run, qs, deepest)
    docs = _passages(docs, needed)
    P = encode_passages([docs[d] for d in needed]) if needed else None
    Q = encode_queries([q.text for q in qs]) if qs else None
    out: dict[int, Hits] = {m: {} for m in depths}
    for qi, q in enumerate(qs):
        hits = list(run[q.id])
        top = hits[:deepest]
        if top:
            rows = [needed[d] for d, _ in top]
            scores = _dot(Q, qi, P, rows)
        for m in depths:
            head = top[:m]
            order = sorted(range(len(head)), key=lambda i: (-scores[i], i)) if head else []
            ranked = [head[i][0] for i in order] + [d for d, _ in hits[m:]]
            n = len(ranked)
            out[m][q.id] = [(d, float(n - r)) for r, d in enumerate(ranked)]
    return out


def _needed(run: Mapping[str, Sequence[tuple[str, float]]], queries: Sequence[Query], deepest: int) -> dict[str, int]:
    """The passages re-ranked (every query's top ``deepest``), each with its row, in first-seen order."""
    needed: dict[str, int] = {}
    for q in queries:
        for d, _ in run.get(q.id, [])[:deepest]:
            needed.setdefault(d, len(needed))
    return needed


def _passages(docs: Mapping[str, Doc] | Path, needed: Mapping[str, int]) -> Mapping[str, Doc]:
    """``docs``, or the ``needed`` passages read from the corpus of the dataset folder ``docs``."""
    if not isinstance(docs, (str, Path)):
        return docs
    from harness.datasets import store

    return {d.id: d for d in store.iter_corpus(Path(docs)) if d.id in needed}


def stored(matrix: Any, ids: Sequence[str], key: Callable[[Any], str] = str) -> Callable[[Sequence[Any]], Any]:
    """An ``encode_*`` for :func:`rerank` that reads vectors already computed instead of encoding:
    row i of ``matrix`` (numpy or scipy sparse) belongs to ``ids[i]``, and each item asked for is
    found by ``key(item)`` (a question's text, a passage's ``Doc.id``)."""
    row = {k: i for i, k in enumerate(ids)}
    return lambda items: matrix[[row[key(x)] for x in items]]


def _dot(Q, qi: int, P, rows: list[int]) -> np.ndarray:
    import scipy.sparse as sp

    if sp.issparse(Q):
        return np.asarray((P[rows] @ Q[qi].T).todense()).ravel()
    return P[rows] @ Q[qi]


def write_reranked(out, first_stage: Mapping[str, Sequence[tuple[str, float]]], queries: Sequence[Query],
                   depths: Sequence[int], docs: Mapping[str, Doc] | Path, encode_queries: Callable[[list[str]], Any],
                   encode_passages: Callable[[list[Doc]], Any], *, system: str, dataset: str | None, depth: int,
                   note: str) -> None:
    """Re-rank ``first_stage`` at every depth m and write ``<out>/<system>-m<m>.trec`` (+ meta): the
    shared step behind ``dpr.bm25-m<m>`` and ``<m>.beta-m<m>``; one encoding for all depths."""
    import time
    from pathlib import Path

    from harness.artifacts import write_run_with_meta

    if depths:   # the passages read before the clock starts, as when the caller passed them
        docs = _passages(docs, _needed(first_stage, [q for q in queries if q.id in first_stage], max(depths)))
    t0 = time.perf_counter()
    res = rerank(first_stage, queries, depths, docs, encode_queries, encode_passages)
    seconds = time.perf_counter() - t0
    for m in depths:
        name = f"{system}-m{m}"
        write_run_with_meta(Path(out) / f"{name}.trec", res[m], system=name, meta={
            "dataset": dataset, "depth": depth, "rerank_depth": m, "seconds": round(seconds, 3),
            "note": f"{note}; seconds cover all depths"})
