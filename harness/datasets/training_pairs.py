"""Training query sets of LightRetriever (its Table 5) as query lists (family ``training-pairs``).

For decontamination only the training queries matter. Sets that ir_datasets covers (BEIR's
FEVER, HotpotQA, MS MARCO, NFCorpus and SciFact train splits) are read through it; the others
from a Sentence Transformers ``*.jsonl.gz`` file named in the card (formats: ``["q", "pos"]``,
``["q", "pos", "neg"]``, ``{"query": ..., "pos": [...]}``, ``{"set": [...]}``; the first text is
the query). Ids are ``train-<n>`` (0-based line position), as tDRO numbers its training lines.

Config: ``card`` (e.g. lr-train-eli5), optional ``subset.queries`` ({train: n}).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Query, catalog, store
from harness.datasets import irds
from harness.datasets.common import card_key, issues_for, sample_queries, subset_settings, write_issues
from harness.datasets.readers import Issues, iter_lines
from harness.errors import DataError

SPLIT = "train"


def read_st_jsonl(path: Path, issues: Issues) -> Iterator[Query]:
    """Sentence Transformers training lines -> their query (first text)."""
    import json

    i = 0
    for lineno, line in iter_lines(path):
        if not line.strip():
            issues.note("blank-line", f"{path}:{lineno}")
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: invalid JSON ({exc.msg})") from None
        if isinstance(rec, list) and rec and isinstance(rec[0], str):
            text = rec[0]
        elif isinstance(rec, dict) and isinstance(rec.get("query"), str):
            text = rec["query"]
        elif isinstance(rec, dict) and isinstance(rec.get("set"), list) and rec["set"] and isinstance(rec["set"][0], str):
            text = rec["set"][0]
        else:
            raise DataError(f"{where}: not a Sentence Transformers training record (pair, triplet, query or set)")
        yield Query(f"train-{i}", text.strip())
        i += 1


def _irds_queries(dataset_id: str) -> list[Query]:
    return [Query(str(q.query_id), q.text) for q in irds.load(dataset_id).queries_iter()]


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg)
    entry = catalog.split_entry(ckey, SPLIT)
    sub = subset_settings(dcfg, cfg)
    issues = issues_for(ckey)
    if entry["ir_datasets"]:
        queries = _irds_queries(entry["id"])
        source: Any = {"ir_datasets": entry["id"]}
    else:
        queries = []
        for path, fmt in catalog.fetch_split(cfg, ckey, SPLIT):
            if fmt != "st-jsonl-gz":
                raise DataError(f"{path}: family training-pairs reads format st-jsonl-gz, the registry says {fmt!r}")
            queries.extend(read_st_jsonl(path, issues))
        source = catalog.source_record(ckey, SPLIT)
    read = len(queries)
    queries = sample_queries(queries, sub["queries"].get(SPLIT), sub["seed"])
    n = store.write_queries(out, SPLIT, queries)
    meta = {"documents": 0, "corpus": None, "queries": {SPLIT: n}, "read": read, "card": ckey,
            "canonical_ids": {SPLIT: entry["id"]}, "paper_original_size": entry["records"],
            "paper_deduped_size": entry.get("deduped"), "source": source,
            "note": "training queries only (for decontamination); the paper's sets are samples of these files, so sizes differ"}
    return write_issues(meta, issues)
