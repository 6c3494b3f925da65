"""SQuAD-format reading-comprehension sets as question -> paragraph retrieval (family ``squad-style``).

CMRC 2018 (Simplified Chinese) and DRCD (Traditional Chinese) stand in for C-MTEB retrieval in
the small profile; SQuAD v1.1 itself can be loaded the same way. The corpus is the paragraphs
of every configured split; each question's gold passage is its own paragraph; the qrels of the
``test`` split are written as TREC qrels.

Config: ``card`` (cmrc2018 | drcd | squad), ``splits`` (harness split -> card split), optional
``subset`` ({queries: {split: n}, documents: N, hard_negatives: k, seed}): a seeded sample of
questions and a corpus of their gold paragraphs + up to k other paragraphs of the same article
(hard negatives) + random fill to N paragraphs (harness/datasets/subset.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, catalog, store
from harness.datasets.common import (
    card_key,
    check_count,
    issues_for,
    queries_meta,
    sample_queries,
    split_map,
    subset_settings,
    write_issues,
)
from harness.datasets.readers import IdGuard, Issues, load_json
from harness.datasets.subset import required_ids, subset_docs
from harness.errors import DataError


def read_squad(path: Path, prefix: str, issues: Issues) -> tuple[list[Doc], list[Query], dict[str, list[str]]]:
    """(paragraphs, questions with gold paragraph and answers, article -> its paragraph ids)."""
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(f"{path}: not a SQuAD-format file (no top-level 'data' list)")
    docs: list[Doc] = []
    queries: list[Query] = []
    articles: dict[str, list[str]] = {}
    qguard = IdGuard("question", issues)
    for ai, art in enumerate(data["data"]):
        title = str(art.get("title", "")).replace("_", " ")
        for pi, para in enumerate(art.get("paragraphs", [])):
            where = f"{path}: data[{ai}].paragraphs[{pi}]"
            if "context" not in para or "qas" not in para:
                raise DataError(f"{where}: a paragraph needs 'context' and 'qas'")
            pid = f"{prefix}{para['id']}" if "id" in para else f"{prefix}a{ai:04d}p{pi:03d}"
            docs.append(Doc(pid, title, para["context"]))
            articles.setdefault(f"{prefix}{ai}", []).append(pid)
            for qi, qa in enumerate(para["qas"]):
                if "id" not in qa or "question" not in qa:
                    raise DataError(f"{where}.qas[{qi}]: a question needs 'id' and 'question'")
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", []) if a.get("text")))
                if qguard.fresh(str(qa["id"]), f"{where}.qas[{qi}]"):
                    queries.append(Query(str(qa["id"]), qa["question"].strip(), answers or None, [pid]))
    return docs, queries, articles


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg)
    splits = split_map(key, dcfg, {"test": "test"})
    sub = subset_settings(dcfg, cfg)
    issues = issues_for(ckey)
    docs: list[Doc] = []
    by_split: dict[str, list[Query]] = {}
    articles: dict[str, list[str]] = {}
    for split, csplit in splits.items():
        [(path, fmt)] = catalog.fetch_split(cfg, ckey, csplit)
        if fmt != "squad-json":
            raise DataError(f"{path}: family squad-style reads format squad-json, the registry says {fmt!r}")
        d, q, arts = read_squad(path, f"{csplit}-" if len(splits) > 1 else "", issues)
        check_count(ckey, csplit, len(q), str(path), "questions")
        docs += d
        articles.update(arts)
        by_split[split] = sample_queries(q, sub["queries"].get(split), sub["seed"])
    guard = IdGuard("paragraph", issues)
    docs = [d for d in docs if guard.fresh(d.id, f"{ckey} paragraphs")]

    meta: dict[str, Any] = {"card": ckey}
    if sub["documents"] or any(sub["queries"].values()):
        gold = {q.id: list(q.gold or []) for qs in by_split.values() for q in qs}
        para_article = {pid: art for art, pids in articles.items() for pid in pids}
        negatives = {qid: [p for p in articles[para_article[g[0]]] if p != g[0]] for qid, g in gold.items() if g}
        required = required_ids(gold, negatives, sub["hard_negatives"])
        kept, chosen = subset_docs(lambda: iter(docs), required, sub["documents"], sub["seed"])
        n_docs = store.write_corpus(out, kept)
        meta["subset"] = {**chosen.info, "queries": {s: len(qs) for s, qs in by_split.items()},
                          "query_ids": {s: [q.id for q in qs] for s, qs in by_split.items()}}
    else:
        n_docs = store.write_corpus(out, iter(docs))
    counts = {split: store.write_queries(out, split, qs) for split, qs in by_split.items()}
    if "test" in by_split:
        store.write_qrels(out / store.QRELS, {q.id: {g: 1 for g in q.gold or []} for q in by_split["test"]})
    meta.update({"documents": n_docs, **queries_meta(counts, splits, ckey),
                 "source": {s: catalog.source_record(ckey, cs) for s, cs in splits.items()}})
    return write_issues(meta, issues)

