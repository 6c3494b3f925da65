"""BM25 hard negatives for training questions, as DPR mines them (config key ``negatives``).

For each training question: the BM25 top ``depth`` passages (title + text) that are not gold and
do not contain any answer by the dataset's answer rule (passage text only), in BM25 order, the
first ``keep`` of them. Output: JSONL ``{"id": qid, "negatives": [doc ids]}``. One artifact per
training dataset, shared by every method that trains on it (DPR, SVDR/VDR, BPR); its hash covers
the BM25 settings, so changing ``methods.bm25.k1`` re-mines the negatives and retrains them all.

`python -m harness negatives --dataset KEY --out FILE` (the command is :func:`harness.stages.negatives`)
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import store
from harness.job import Job, Ref
from harness.methods.base import affects
from harness.recording import merged

DEFAULTS = {"depth": 100, "keep": 5, "index": "bm25"}


def settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return merged(DEFAULTS, cfg.get("negatives"))


def negatives_job(cfg: Mapping[str, Any], dataset: str) -> Job:
    """The (hash-only) job record of the negatives of ``dataset``."""
    s = settings(cfg)
    return Job("negatives", "negatives", "bm25", "mine", dataset,
               inputs={"data": Ref("data", dataset=dataset), "index": Ref("index", s["index"], dataset)},
               keys=("negatives", *affects("bm25", "search"), f"datasets.{dataset}.answer_rule"),
               module="harness.negatives", mem_mb=4000)   # the corpus by id (store.corpus_lookup): the paper profile books more


def mine(cfg: Mapping[str, Any], dataset: str, data_dir: Path, index_dir: Path) -> list[dict]:
    from harness.datasets.answers import ANSWER_RULES
    from harness.methods import bm25
    from harness.methods.base import Context

    from harness.cost import startup_done
    from harness.indexes import pyserini_env

    pyserini_env.start_jvm()   # paid once: the rest is per training question (python -m harness estimate)
    startup_done()
    s = settings(cfg)
    queries = store.read_queries(data_dir, "train")
    docs = store.corpus_lookup(data_dir)
    hits = bm25.search(Context(cfg, "bm25", dataset), index_dir, queries, int(s["depth"]))
    match = ANSWER_RULES.get(cfg["datasets"][dataset].get("answer_rule", "dpr-string"))
    out = []
    for q in queries:
        gold = set(q.gold or [])
        negs = [d for d, _ in hits.get(q.id, []) if d not in gold and not match(q.answers or [], docs[d].text)]
        out.append({"id": q.id, "negatives": negs[: int(s["keep"])]})
    return out
