"""Classic small test collections with a corpus: Vaswani (NPL), Cranfield, CISI (family ``classic``).

Each is complete (documents, queries, qrels) and small, so the small profile can evaluate on it
fully. Config: ``card`` (vaswani | cranfield | cisi; default the dataset key). Files come from the
registry (cache -> mirror -> URL, checksummed).

Quirks handled, each listed in the card's known_issues and counted in meta.json:
Cranfield numbers its queries 001..365 with gaps while its qrels number them 1..225 in file
order (renumbered by position, as ir_datasets does); Cranfield relevance codes 1 (complete
answer) .. 4 (minimum interest) become grades 4 .. 1 and its 225 code -1 judgments are dropped;
CISI has 36 queries without judgments (dropped). Qrels naming a document that is not in the
corpus raise DataError.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import catalog, store
from harness.datasets.common import card_key, check_count, issues_for, write_issues
from harness.datasets.readers import (
    QRELS_FORMATS,
    QUERY_FORMATS,
    QUERY_NUMBERING,
    check_qrels_docs,
    keep_judged,
    read_docs,
    read_qrels,
    read_queries,
    read_smart_queries,
)
from harness.errors import DataError


def topics_and_qrels(files: list[tuple[Path, str | None]], source: str) -> dict[str, tuple[Path, str]]:
    """Pick the topics file and the qrels file of a split by their registry formats."""
    out: dict[str, tuple[Path, str]] = {}
    for path, fmt in files:
        if fmt in QRELS_FORMATS:
            out["qrels"] = (path, fmt)
        elif fmt in QUERY_FORMATS:
            out["topics"] = (path, fmt)
    missing = {"topics", "qrels"} - set(out)
    if missing:
        raise DataError(f"{source}: no {' or '.join(sorted(missing))} file among the split's files (configs/datasets.yaml)")
    return out


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg)
    issues = issues_for(ckey)
    [(corpus_path, corpus_fmt)] = catalog.fetch_split(cfg, ckey, catalog.CORPUS)
    n_docs = store.write_corpus(out, read_docs(corpus_path, corpus_fmt, issues))
    check_count(ckey, catalog.CORPUS, n_docs, str(corpus_path), "documents")
    doc_ids = frozenset(d.id for d in store.iter_corpus(out))

    files = topics_and_qrels(catalog.fetch_split(cfg, ckey, "test"), f"{ckey}.test")
    tpath, tfmt = files["topics"]
    if tfmt == "smart-queries":
        queries = list(read_smart_queries(tpath, issues, renumber=QUERY_NUMBERING in issues.tolerate))
    else:
        queries = list(read_queries(tpath, tfmt, issues))
    qpath, qfmt = files["qrels"]
    qrels = check_qrels_docs(read_qrels(qpath, qfmt, issues), doc_ids, qpath, issues)
    judged = keep_judged(queries, qrels, qpath, issues)
    check_count(ckey, "test", len(judged), str(tpath), "judged queries")
    judged = [q._replace(gold=sorted(d for d, r in qrels[q.id].items() if r > 0) or None) for q in judged]
    n_q = store.write_queries(out, "test", judged)
    store.write_qrels(out / store.QRELS, {q.id: qrels[q.id] for q in judged})
    meta = {
        "documents": n_docs, "queries": {"test": n_q}, "queries_in_file": len(queries),
        "judgments": sum(len(qrels[q.id]) for q in judged), "card": ckey,
        "canonical_ids": {"test": catalog.split_entry(ckey, "test")["id"], "corpus": catalog.card(ckey)["corpus"]["id"]},
        "source": {"corpus": catalog.source_record(ckey, catalog.CORPUS), "test": catalog.source_record(ckey, "test")},
    }
    return write_issues(meta, issues)
