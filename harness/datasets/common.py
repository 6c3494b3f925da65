"""Helpers shared by the registry-driven dataset families (qa-list, classic, squad-style, ...).

A dataset config of these families names a card of configs/datasets.yaml (``card``, default the
dataset key) and maps the harness's split names to the card's splits (``splits``), e.g.
``splits: {train: drqa-train, test: test}`` writes ``queries-train.jsonl`` and ``queries-test.jsonl``.
"""
from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from harness.datasets import Query, catalog
from harness.datasets.readers import Issues, read_queries
from harness.errors import ConfigError, DataError


def card_key(key: str, dcfg: Mapping[str, Any]) -> str:
    return catalog.dataset_config_card(key, dcfg)


def split_map(key: str, dcfg: Mapping[str, Any], default: Mapping[str, str] | None = None) -> dict[str, str]:
    """harness split -> card split, from config key ``splits`` (or ``default``)."""
    splits = dict(dcfg.get("splits") or default or {})
    if not splits:
        raise ConfigError(f"config key datasets.{key}.splits is empty",
                          fix="map harness splits to the card's splits, e.g. splits: {test: test}")
    c = catalog.card(card_key(key, dcfg))
    for ours, theirs in splits.items():
        if theirs not in c.get("splits", {}):
            raise ConfigError(f"config key datasets.{key}.splits.{ours}: card {card_key(key, dcfg)!r} has no split {theirs!r}; "
                              f"it has: {', '.join(c.get('splits', {}))}")
    return splits


def issues_for(key: str, where: str | None = None) -> Issues:
    """An Issues tolerating what the card's known_issues list (for ``where`` = a card split, or any)."""
    return Issues(catalog.known_issue_kinds(key, where))


def check_count(ckey: str, csplit: str, n: int, source: str, what: str = "records") -> None:
    """The number read must equal the card's count (a truncated or substituted file fails here)."""
    expected = catalog.split_entry(ckey, csplit)["records"] if csplit != catalog.CORPUS else catalog.card(ckey)["corpus"]["documents"]
    if expected is not None and n != expected:
        raise DataError(f"{source}: read {n:,} {what}, the registry (configs/datasets.yaml {ckey}.{csplit}) says {expected:,}",
                        fix="the file is truncated or a different version; fetch it again, or correct the registry")


def read_card_queries(cfg: Mapping[str, Any], ckey: str, csplit: str, issues: Issues) -> tuple[list[Query], list[dict]]:
    """All queries of a card split (every file of the split, concatenated), with their provenance."""
    out: list[Query] = []
    for path, fmt in catalog.fetch_split(cfg, ckey, csplit):
        out.extend(read_queries(path, fmt, issues))
    return out, catalog.source_record(ckey, csplit)


def sample_queries(queries: list[Query], n: int | None, seed: int) -> list[Query]:
    """A seeded sample of ``n`` queries in their original order (all of them when n is None or larger)."""
    if not n or n >= len(queries):
        return list(queries)
    rng = random.Random(seed)
    keep = set(rng.sample(range(len(queries)), n))
    return [q for i, q in enumerate(queries) if i in keep]


def subset_settings(dcfg: Mapping[str, Any], cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Config key ``subset`` with defaults (seed = profile seed)."""
    sub = dict(dcfg.get("subset") or {})
    sub.setdefault("seed", cfg.get("seed", 0))
    sub.setdefault("queries", {})
    sub.setdefault("documents", None)
    sub.setdefault("hard_negatives", 0)
    return sub


def queries_meta(counts: Mapping[str, int], splits: Mapping[str, str], ckey: str) -> dict[str, Any]:
    return {"queries": dict(counts), "card": ckey, "card_splits": dict(splits),
            "canonical_ids": {s: catalog.split_entry(ckey, cs)["id"] for s, cs in splits.items()}}


def write_issues(meta: dict[str, Any], issues: Issues) -> dict[str, Any]:
    if issues.counts:
        meta["issues"] = issues.as_dict()
    return meta
