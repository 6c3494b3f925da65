"""Question lists with answers, without a corpus (family ``qa-list``).

The DPR / DrQA / Anserini QA lists of NQ, TriviaQA, WebQuestions, CuratedTREC and SQuAD,
brmson's WebQuestions and CuratedTREC splits, NQ-open and KILT task files. Offline there is
no corpus that contains their answers (the 21M-passage Wikipedia is not mirrored), so they
serve as query sets: training sets and test sets for decontamination, and the questions of a
``dpr-wiki`` dataset where the corpus can be had. Their table columns stay "not run".

Config: ``card`` (configs/datasets.yaml key, default the dataset key), ``splits`` (harness split
-> card split, e.g. ``{train: drqa-train, test: test}``), optional ``subset.queries`` ({split: n},
a seeded sample). Writes ``queries-<split>.jsonl`` (id, text, answers) and meta.json.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets import store
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


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey = card_key(key, dcfg)
    splits = split_map(key, dcfg, {"test": "test"})
    sub = subset_settings(dcfg, cfg)
    counts, sources, read, sampled = {}, {}, {}, {}
    issues = issues_for(ckey)
    for split, csplit in splits.items():
        queries, src = read_card_queries(cfg, ckey, csplit, issues)
        check_count(ckey, csplit, len(queries), f"{ckey}.{csplit}", "questions")
        read[split] = len(queries)
        if sub["queries"].get(split):
            queries = sample_queries(queries, sub["queries"][split], sub["seed"])
            sampled[split] = [q.id for q in queries]
        counts[split] = store.write_queries(out, split, queries)
        sources[split] = src
    meta = {"documents": 0, "corpus": None, **queries_meta(counts, splits, ckey), "read": read, "source": sources,
            "note": "query set without a corpus: used for decontamination; retrieval columns stay 'not run'"}
    if sampled:
        meta["subset"] = {"seed": sub["seed"], "queries": {s: len(ids) for s, ids in sampled.items()}, "query_ids": sampled}
    return write_issues(meta, issues)
