"""Open-domain QA over DPR's 21,015,324 Wikipedia passages (family ``dpr-wiki``).

The corpus is ir_datasets' ``dpr-w100`` (psgs_w100.tsv.gz, md5-checked by ir_datasets), streamed
to corpus.jsonl, never held in memory. Splits that ir_datasets covers (NQ and TriviaQA
train/dev) come with DPR's passages as qrels: gold = relevance > 0 (annotated or answer-bearing
BM25 positives), hard negatives = relevance 0 (DPR's BM25 negatives). Splits it does not cover
(the test QA lists of NQ, TriviaQA, WebQuestions, CuratedTREC, SQuAD; ir_datasets 0.6.3 has no
``dpr-w100/*/test``) are read from the registry's QA-list files (mirror or download).

Config: ``card`` (dpr-nq | dpr-trivia | dpr-webquestions | dpr-curatedtrec | dpr-squad),
``splits`` (default {test: test, train: train}), optional ``subset`` ({queries: {split: n},
documents: N, hard_negatives: k, seed}): sampled questions, the gold passages and k hard
negatives of every sampled question that has them, seeded random fill to N passages; the ids
and counts go to meta.json. Test QA lists carry answers only (no gold passage ids), so a subset
corpus contains their answers only by chance: a subset is for training-scale checks, its test
accuracy is not the paper's number.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, catalog, store
from harness.datasets import irds
from harness.datasets.common import (
    card_key,
    check_count,
    issues_for,
    queries_meta,
    read_card_queries,
    sample_queries,
    split_map,
    subset_settings,
    write_issues,
)
from harness.datasets.subset import required_ids, subset_docs
from harness.errors import DataError

CORPUS_CARD = "dpr-w100"


def corpus_docs() -> Iterator[Doc]:
    """DPR's 100-word passages (title, text), streamed."""
    for d in irds.load(catalog.card(CORPUS_CARD)["corpus"]["id"]).docs_iter():
        yield Doc(str(d.doc_id), d.title or "", d.text)


def irds_split(dataset_id: str) -> tuple[list[Query], dict[str, list[str]]]:
    """Questions with answers and gold passages, and each question's hard negatives (relevance 0)."""
    ds = irds.load(dataset_id)
    gold: dict[str, list[str]] = {}
    negatives: dict[str, list[str]] = {}
    for q in ds.qrels_iter():
        if q.relevance > 0:
            gold.setdefault(q.query_id, []).append(q.doc_id)
        elif q.relevance == 0:
            negatives.setdefault(q.query_id, []).append(q.doc_id)
    queries = [Query(str(q.query_id), q.text, list(getattr(q, "answers", []) or []) or None, gold.get(q.query_id))
               for q in ds.queries_iter()]
    return queries, negatives


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg)
    if catalog.card(ckey).get("corpus_ref") != CORPUS_CARD:
        raise DataError(f"config key datasets.{key}.card: {ckey!r} is not retrieved from {CORPUS_CARD} (configs/datasets.yaml)")
    splits = split_map(key, dcfg, {"test": "test", "train": "train"})
    sub = subset_settings(dcfg, cfg)
    issues = issues_for(ckey)
    by_split: dict[str, list[Query]] = {}
    negatives: dict[str, list[str]] = {}
    sources: dict[str, Any] = {}
    for split, csplit in splits.items():
        entry = catalog.split_entry(ckey, csplit)
        if entry["ir_datasets"]:
            queries, negs = irds_split(entry["id"])
            negatives.update(negs)
            sources[split] = {"ir_datasets": entry["id"]}
        else:
            queries, sources[split] = read_card_queries(cfg, ckey, csplit, issues)
        check_count(ckey, csplit, len(queries), entry["id"], "questions")
        by_split[split] = sample_queries(queries, sub["queries"].get(split), sub["seed"])

    meta: dict[str, Any] = {"card": ckey}
    if sub["documents"]:
        gold = {q.id: list(q.gold or []) for qs in by_split.values() for q in qs}
        sampled = {q.id for qs in by_split.values() for q in qs}
        negs = {q: d for q, d in negatives.items() if q in sampled}
        kept, chosen = subset_docs(corpus_docs, required_ids(gold, negs, sub["hard_negatives"]), sub["documents"], sub["seed"])
        n_docs = store.write_corpus(out, kept)
        meta["subset"] = {**chosen.info, "queries": {s: len(qs) for s, qs in by_split.items()},
                          "query_ids": {s: [q.id for q in qs] for s, qs in by_split.items()}}
    else:
        n_docs = store.write_corpus(out, corpus_docs())
        check_count(CORPUS_CARD, catalog.CORPUS, n_docs, "ir_datasets dpr-w100", "passages")
    counts = {split: store.write_queries(out, split, qs) for split, qs in by_split.items()}
    test_gold = {q.id: {g: 1 for g in q.gold} for q in by_split.get("test", []) if q.gold}
    if test_gold:
        store.write_qrels(out / store.QRELS, test_gold)
    meta.update({"documents": n_docs, "corpus": catalog.card(CORPUS_CARD)["corpus"]["id"],
                 **queries_meta(counts, splits, ckey), "source": sources})
    return write_issues(meta, issues)
