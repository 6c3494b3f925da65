"""BEIR test queries and qrels without the corpus (family ``beir-queries``).

The data mirror holds Anserini's copies of the test queries and qrels of several BEIR sets but
only SciFact's corpus; this family makes the others usable as test query sets (decontamination)
and keeps their qrels. With a corpus available, use family ``beir`` instead (it downloads the
BEIR zip through ir_datasets). Judged documents cannot be checked against a corpus here; meta.json
says so.

Config: ``card`` (e.g. beir-fiqa; default ``beir-<name>`` from config key ``name``, else the key).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import catalog, store
from harness.datasets.classic import topics_and_qrels
from harness.datasets.common import check_count, issues_for, write_issues
from harness.datasets.readers import keep_judged, read_qrels, read_queries


def beir_card(key: str, dcfg: Mapping[str, Any]) -> str:
    if dcfg.get("card"):
        return str(dcfg["card"])
    return f"beir-{dcfg['name']}" if dcfg.get("name") else key


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = beir_card(key, dcfg)
    csplit = next(iter(catalog.card(ckey)["splits"]))  # test (dev for BEIR's MS MARCO)
    issues = issues_for(ckey)
    files = topics_and_qrels(catalog.fetch_split(cfg, ckey, csplit), f"{ckey}.{csplit}")
    tpath, tfmt = files["topics"]
    qpath, qfmt = files["qrels"]
    qrels = read_qrels(qpath, qfmt, issues)
    queries = keep_judged(read_queries(tpath, tfmt, issues), qrels, qpath, issues)
    check_count(ckey, csplit, len(queries), str(tpath), "test queries")
    queries = [q._replace(gold=sorted(d for d, r in qrels[q.id].items() if r > 0) or None) for q in queries]
    n = store.write_queries(out, "test", queries)
    store.write_qrels(out / store.QRELS, {q.id: qrels[q.id] for q in queries})
    meta = {"documents": 0, "corpus": None, "queries": {"test": n}, "judgments": sum(len(qrels[q.id]) for q in queries),
            "card": ckey, "canonical_ids": {"test": catalog.split_entry(ckey, csplit)["id"]},
            "source": {"test": catalog.source_record(ckey, csplit)},
            "note": "queries and qrels only (no corpus): judged document ids are not checked against a corpus"}
    return write_issues(meta, issues)
