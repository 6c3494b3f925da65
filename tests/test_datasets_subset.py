"""Seeded corpus subsets: gold + hard negatives + random fill, streamed twice, deterministic."""
from __future__ import annotations

import pytest

from harness.datasets import Doc
from harness.datasets.subset import GOLD, NEGATIVE, choose, required_ids, subset_docs
from harness.errors import ConfigError


def _corpus(n: int) -> list[Doc]:
    return [Doc(f"d{i}", "", f"text {i}") for i in range(n)]


def test_required_ids_prefers_gold_and_caps_negatives():
    req = required_ids({"q1": ["d1", "d2"], "q2": ["d3"]}, {"q1": ["d4", "d5", "d6"], "q2": ["d1", "d7"]}, per_query=2)
    assert req == {"d1": GOLD, "d2": GOLD, "d3": GOLD, "d4": NEGATIVE, "d5": NEGATIVE, "d7": NEGATIVE}
    assert required_ids({"q": ["a"]}, {"q": ["b"]}, per_query=0) == {"a": GOLD}


def test_subset_keeps_required_fills_to_size_and_is_deterministic():
    docs = _corpus(1000)
    req = {"d5": GOLD, "d999": GOLD, "d500": NEGATIVE, "missing": GOLD}
    calls = []

    def make():
        calls.append(1)
        return iter(docs)

    kept, sub = subset_docs(make, req, 50, seed=7)
    out = list(kept)
    assert len(calls) == 2  # one pass for ids, one for the documents: never held whole
    ids = [d.id for d in out]
    assert len(ids) == 50 and {"d5", "d999", "d500"} <= set(ids)
    assert ids == sorted(ids, key=lambda x: int(x[1:]))  # corpus order
    assert sub.info["gold"] == 2 and sub.info["hard_negatives"] == 1 and sub.info["fill"] == 47
    assert sub.info["missing_required"] == 1 and sub.info["missing_examples"] == ["missing"]
    assert sub.info["doc_ids"] == ids and sub.info["documents"] == 50
    again, _ = subset_docs(lambda: iter(docs), req, 50, seed=7)
    assert [d.id for d in again] == ids
    other, _ = subset_docs(lambda: iter(docs), req, 50, seed=8)
    assert [d.id for d in other] != ids


def test_subset_over_budget_keeps_every_required_document():
    sub = choose((f"d{i}" for i in range(10)), {"d1": GOLD, "d2": GOLD, "d3": GOLD}, 2, seed=0)
    assert sub.chosen == {1, 2, 3} and sub.info["over_budget"] and sub.info["fill"] == 0


def test_subset_without_size_keeps_all_and_bad_size_fails():
    assert choose((f"d{i}" for i in range(5)), {}, None, seed=0).chosen == set(range(5))
    with pytest.raises(ConfigError, match="subset.documents"):
        choose(iter([]), {}, 0, seed=0)


def test_fill_is_uniform_enough():
    counts = [0] * 100
    for seed in range(300):
        for pos in choose((f"d{i}" for i in range(100)), {}, 10, seed).chosen:
            counts[pos] += 1
    assert min(counts) > 10 and max(counts) < 60  # expected 30 each
