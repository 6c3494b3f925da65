"""MS MARCO passage ranking: dev small, TREC DL 2019/2020, train (family ``msmarco-passage``).

Queries and qrels of the evaluation splits come from the registry's files (Anserini's copies;
in the data mirror). The 8,841,823-passage collection and the training queries/qrels/triples
come through ir_datasets (needs internet or its cache, ``IR_DATASETS_HOME``) and are streamed.

Config: ``card`` (default msmarco-passage), ``splits`` (harness split -> card split, e.g.
``{test: dev-small}``; card splits: train, dev-small, trec-dl-2019, trec-dl-2020), ``corpus``
(write the collection; default false: a query set), ``subset`` ({queries: {split: n},
documents: N, hard_negatives: k, seed}): sampled queries, their judged passages, k BM25
negatives per training query from ir_datasets' triples, seeded random fill to N passages.
TREC DL 2020's topic file lists 200 topics of which 54 are judged: unjudged topics are dropped
and counted (a known issue of the card).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, catalog, store
from harness.datasets import irds
from harness.datasets.classic import topics_and_qrels
from harness.datasets.common import (
    card_key,
    check_count,
    queries_meta,
    sample_queries,
    split_map,
    subset_settings,
)
from harness.datasets.readers import Issues, Qrels, check_qrels_docs, keep_judged, read_qrels, read_queries
from harness.datasets.subset import required_ids, subset_docs

IRDS_CORPUS = "msmarco-passage"


def irds_docs(dataset_id: str = IRDS_CORPUS) -> Iterator[Doc]:
    """The collection, streamed (ir_datasets downloads and verifies it on first use)."""
    for d in irds.load(dataset_id).docs_iter():
        yield Doc(str(d.doc_id), getattr(d, "title", "") or "", d.text)


def _train_split(ckey: str, csplit: str, issues: Issues) -> tuple[list[Query], Qrels]:
    ds = irds.load(catalog.split_entry(ckey, csplit)["id"])
    qrels: Qrels = {}
    for q in ds.qrels_iter():
        if q.relevance > 0:
            qrels.setdefault(q.query_id, {})[q.doc_id] = int(q.relevance)
    queries = [Query(str(q.query_id), q.text) for q in ds.queries_iter() if q.query_id in qrels]
    return queries, qrels


def _eval_split(cfg: Mapping[str, Any], ckey: str, csplit: str, issues: Issues) -> tuple[list[Query], Qrels, Path]:
    files = topics_and_qrels(catalog.fetch_split(cfg, ckey, csplit), f"{ckey}.{csplit}")
    tpath, tfmt = files["topics"]
    qpath, qfmt = files["qrels"]
    qrels = read_qrels(qpath, qfmt, issues)
    queries = keep_judged(read_queries(tpath, tfmt, issues), qrels, qpath, issues)
    check_count(ckey, csplit, len(queries), str(tpath), "judged queries")
    return queries, qrels, qpath


def _negatives(query_ids: set[str], per_query: int) -> dict[str, list[str]]:
    """Up to ``per_query`` BM25 negatives per query from the official training triples (streamed)."""
    out: dict[str, list[str]] = {}
    if not per_query or not query_ids:
        return out
    for pair in irds.load("msmarco-passage/train/triples-small").docpairs_iter():
        if pair.query_id in query_ids:
            lst = out.setdefault(pair.query_id, [])
            if len(lst) < per_query and pair.doc_id_b not in lst:
                lst.append(pair.doc_id_b)
    return out


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg) if dcfg.get("card") else "msmarco-passage"
    splits = split_map(key, {**dcfg, "card": ckey}, {"test": "dev-small"})
    sub = subset_settings(dcfg, cfg)
    issues_by_split: dict[str, Issues] = {}
    by_split: dict[str, list[Query]] = {}
    qrels_by_split: dict[str, Qrels] = {}
    qrels_source: dict[str, Path] = {}
    for split, csplit in splits.items():
        issues = issues_by_split[split] = Issues(catalog.known_issue_kinds(ckey, csplit))
        if csplit in {"train", "train-triples"}:
            queries, qrels = _train_split(ckey, "train", issues)
        else:
            queries, qrels, qrels_source[split] = _eval_split(cfg, ckey, csplit, issues)
        queries = sample_queries(queries, sub["queries"].get(split), sub["seed"])
        keep = {q.id for q in queries}
        qrels = {q: r for q, r in qrels.items() if q in keep}
        by_split[split] = [q._replace(gold=sorted(d for d, r in qrels.get(q.id, {}).items() if r > 0) or None) for q in queries]
        qrels_by_split[split] = qrels

    meta: dict[str, Any] = {"card": ckey}
    n_docs = 0
    if dcfg.get("corpus"):
        gold = {q.id: list(q.gold or []) for qs in by_split.values() for q in qs}
        train_ids = {q.id for s, qs in by_split.items() if splits[s] == "train" for q in qs}
        negatives = _negatives(train_ids, sub["hard_negatives"])
        if sub["documents"]:
            kept, chosen = subset_docs(irds_docs, required_ids(gold, negatives, sub["hard_negatives"]),
                                       sub["documents"], sub["seed"])
            n_docs = store.write_corpus(out, kept)
            meta["subset"] = {**chosen.info, "queries": {s: len(qs) for s, qs in by_split.items()},
                              "query_ids": {s: [q.id for q in qs] for s, qs in by_split.items()}}
        else:
            n_docs = store.write_corpus(out, irds_docs())
            check_count(ckey, catalog.CORPUS, n_docs, IRDS_CORPUS, "passages")
        doc_ids = frozenset(d.id for d in store.iter_corpus(out))
        if not sub["documents"]:
            for split, qrels in qrels_by_split.items():
                check_qrels_docs(qrels, doc_ids, qrels_source.get(split, Path(IRDS_CORPUS)), issues_by_split[split])
    counts = {split: store.write_queries(out, split, qs) for split, qs in by_split.items()}
    if "test" in qrels_by_split:
        store.write_qrels(out / store.QRELS, qrels_by_split["test"])
    meta.update({"documents": n_docs, "corpus": "msmarco-passage (subset)" if meta.get("subset") else
                 ("msmarco-passage" if dcfg.get("corpus") else None),
                 **queries_meta(counts, splits, ckey),
                 "judgments": {s: sum(len(r) for r in q.values()) for s, q in qrels_by_split.items()},
                 "source": {s: catalog.source_record(ckey, cs) for s, cs in splits.items() if cs not in {"train", "train-triples"}}})
    problems = {s: i.as_dict() for s, i in issues_by_split.items() if i.counts}
    if problems:
        meta["issues"] = problems
    return meta
