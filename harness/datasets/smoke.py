"""The `smoke` fixture: a small Wikipedia-style QA collection committed in the package.

Written by scripts/make_smoke_fixture.py (deterministic); questions carry answer strings and
gold passage ids, so the set serves both QA top-k accuracy and qrels-based measures.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, store
from harness.io import iter_jsonl

FIXTURE = Path(__file__).resolve().parent / "smoke"


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    n_docs = store.write_corpus(out, (Doc(r["id"], r["title"], r["text"]) for r in iter_jsonl(FIXTURE / "corpus.jsonl")))
    splits: dict[str, list[Query]] = {"train": [], "test": []}
    for r in iter_jsonl(FIXTURE / "questions.jsonl"):
        splits[r["split"]].append(Query(r["id"], r["question"], r["answers"], r["gold"]))
    counts = {s: store.write_queries(out, s, qs) for s, qs in splits.items()}
    qrels = {q.id: {g: 1 for g in q.gold} for q in splits["test"]}
    store.write_qrels(out / store.QRELS, qrels)
    return {"documents": n_docs, "queries": counts, "source": str(FIXTURE.relative_to(FIXTURE.parents[2]))}
