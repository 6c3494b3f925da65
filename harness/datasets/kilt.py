"""KILT slot filling: T-REx and Zero-shot RE (family ``kilt``), as DensePhrases Table 4 uses them.

Queries ("{subject} [SEP] {relation}"), answers and provenance (gold Wikipedia page ids) come
from KILT's task files (registry URLs; not in the data mirror). With ``corpus: true`` the KILT
knowledge source (5.9M Wikipedia pages, through ir_datasets ``kilt``) is streamed to
corpus.jsonl, or a seeded subset of it (config ``subset``: the gold pages of the sampled
queries + random fill). KILT's test answers are withheld: the test split has questions only.

Config: ``card`` (kilt-trex | kilt-zsre), ``splits`` (default {test: dev}), ``corpus``, ``subset``.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, catalog, store
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

CORPUS_CARD = "kilt-wikipedia"


def corpus_docs() -> Iterator[Doc]:
    for d in irds.load(catalog.card(CORPUS_CARD)["corpus"]["id"]).docs_iter():
        yield Doc(str(d.doc_id), d.title or "", d.text)


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg)
    splits = split_map(key, dcfg, {"test": "dev"})
    sub = subset_settings(dcfg, cfg)
    issues = issues_for(ckey)
    by_split, sources = {}, {}
    for split, csplit in splits.items():
        queries, sources[split] = read_card_queries(cfg, ckey, csplit, issues)
        check_count(ckey, csplit, len(queries), f"{ckey}.{csplit}", "queries")
        by_split[split] = sample_queries(queries, sub["queries"].get(split), sub["seed"])
    meta: dict[str, Any] = {"card": ckey}
    n_docs = 0
    if dcfg.get("corpus"):
        if sub["documents"]:
            gold = {q.id: list(q.gold or []) for qs in by_split.values() for q in qs}
            kept, chosen = subset_docs(corpus_docs, required_ids(gold), sub["documents"], sub["seed"])
            n_docs = store.write_corpus(out, kept)
            meta["subset"] = {**chosen.info, "queries": {s: len(qs) for s, qs in by_split.items()},
                              "query_ids": {s: [q.id for q in qs] for s, qs in by_split.items()}}
        else:
            n_docs = store.write_corpus(out, corpus_docs())
            check_count(CORPUS_CARD, catalog.CORPUS, n_docs, "ir_datasets kilt", "pages")
    counts = {split: store.write_queries(out, split, qs) for split, qs in by_split.items()}
    if "test" in by_split:
        qrels = {q.id: {g: 1 for g in q.gold} for q in by_split["test"] if q.gold}
        if qrels:
            store.write_qrels(out / store.QRELS, qrels)
    meta.update({"documents": n_docs, "corpus": CORPUS_CARD if dcfg.get("corpus") else None,
                 **queries_meta(counts, splits, ckey), "source": sources})
    return write_issues(meta, issues)
