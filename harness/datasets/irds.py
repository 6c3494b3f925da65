"""Any dataset that ir_datasets covers (family ``ir-datasets``), e.g. the DPR Wikipedia
benchmarks ``dpr-w100/natural-questions/test`` (21,015,324 passages; questions with answers).

ir_datasets downloads and checksums the official files itself (needs internet or its own
cache, ``IR_DATASETS_HOME``). Documents are streamed to corpus.jsonl, never held in memory.
Config keys: ``id`` (the test split's ir_datasets id) and ``train_id`` (optional, the split
whose queries train the methods; answers and qrels-derived gold passages are kept).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, store
from harness.errors import DataError, DependencyError


def load(dataset_id: str):
    """``ir_datasets.load(dataset_id)``: the one loader of the harness (every family that reads
    ir_datasets comes here), with a missing package or an unknown id as a one-line error."""
    try:
        import ir_datasets
    except ImportError:
        raise DependencyError("ir_datasets is not installed", fix="pip install ir_datasets==0.6.3") from None
    try:
        return ir_datasets.load(dataset_id)
    except KeyError:
        raise DataError(f"ir_datasets has no dataset {dataset_id!r} (config key datasets.*.id or a dataset card)") from None


def _docs(ds) -> Iterator[Doc]:
    for d in ds.docs_iter():
        yield Doc(str(d.doc_id), getattr(d, "title", "") or "", d.text)


def _queries(ds) -> tuple[list[Query], dict[str, dict[str, int]]]:
    qrels: dict[str, dict[str, int]] = {}
    if ds.has_qrels():
        for q in ds.qrels_iter():
            if q.relevance > 0:
                qrels.setdefault(q.query_id, {})[q.doc_id] = int(q.relevance)
    out = []
    for q in ds.queries_iter():
        answers = list(q.answers) if hasattr(q, "answers") else None
        gold = sorted(qrels.get(q.query_id, {})) or None
        out.append(Query(str(q.query_id), q.text, answers, gold))
    return out, qrels


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    test = load(dcfg["id"])
    n_docs = store.write_corpus(out, _docs(test))
    queries, qrels = _queries(test)
    counts = {"test": store.write_queries(out, "test", queries)}
    if qrels:
        store.write_qrels(out / store.QRELS, qrels)
    if dcfg.get("train_id"):
        train_q, _ = _queries(load(dcfg["train_id"]))
        counts["train"] = store.write_queries(out, "train", train_q)
    return {"documents": n_docs, "queries": counts, "source": {"ir_datasets": [dcfg["id"], dcfg.get("train_id")]}}
