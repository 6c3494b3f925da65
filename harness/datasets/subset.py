"""Deterministic (seeded) corpus subsets for profiles that cannot afford the whole corpus.

For a corpus-based set a profile samples some queries (config ``subset.queries``) and keeps a
corpus made of: every gold passage of the sampled queries, their hard negatives (where the
dataset marks them: DPR's BM25 negatives, MS MARCO's triples, other paragraphs of the same
article), and a seeded random fill up to ``subset.documents``. The corpus is streamed twice
(first the ids, to choose; then the documents, to write), so memory holds ids only, never the
documents. The subset's ids and counts go to meta.json.
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.datasets import Doc
from harness.errors import ConfigError

GOLD = "gold"
NEGATIVE = "hard-negative"


@dataclass
class CorpusSubset:
    """The chosen documents (positions in corpus order) and what they are."""

    chosen: set[int]
    info: dict[str, Any] = field(default_factory=dict)


def choose(doc_ids: Iterable[str], required: Mapping[str, str], size: int | None, seed: int) -> CorpusSubset:
    """Pick document positions: all ``required`` ids (id -> GOLD | NEGATIVE) plus a reservoir
    sample (Algorithm R, ``random.Random(seed)``) of the others up to ``size`` in total.

    ``size=None`` keeps every document. The result depends only on the corpus order and the seed.
    """
    if size is not None and size < 1:
        raise ConfigError(f"subset.documents must be >= 1, got {size}")
    rng = random.Random(seed)
    # Reservoir of `size` candidates; once we know how many required ids exist, a seeded sample of
    # it fills the rest (a uniform sample of a uniform sample stays uniform).
    fill_target = size
    chosen_required: dict[str, int] = {}
    reservoir: list[int] = []
    others = 0
    for pos, did in enumerate(doc_ids):
        if did in required:
            if did not in chosen_required:
                chosen_required[did] = pos
            continue
        if fill_target is None:
            reservoir.append(pos)
            continue
        others += 1
        if len(reservoir) < fill_target:
            reservoir.append(pos)
        else:
            j = rng.randrange(others)
            if j < fill_target:
                reservoir[j] = pos
    if size is not None:
        room = max(0, size - len(chosen_required))
        if len(reservoir) > room:
            reservoir = rng.sample(reservoir, room)
    missing = sorted(set(required) - set(chosen_required))
    kinds = {k: sum(1 for d in chosen_required if required[d] == k) for k in (GOLD, NEGATIVE)}
    info = {
        "seed": seed,
        "documents_requested": size,
        "gold": kinds[GOLD],
        "hard_negatives": kinds[NEGATIVE],
        "fill": len(reservoir),
        "missing_required": len(missing),
        "missing_examples": missing[:10],
        "over_budget": size is not None and len(chosen_required) > size,
    }
    return CorpusSubset(set(chosen_required.values()) | set(reservoir), info)


def subset_docs(make_docs: Callable[[], Iterable[Doc]], required: Mapping[str, str], size: int | None,
                seed: int) -> tuple[Iterator[Doc], CorpusSubset]:
    """Two passes over ``make_docs()``: choose positions from the ids, then stream the chosen docs.

    Returns (iterator of the kept documents in corpus order, the subset); the caller writes the
    iterator (e.g. store.write_corpus) and then records ``subset.info`` (completed with the ids).
    """
    sub = choose((d.id for d in make_docs()), required, size, seed)

    def kept() -> Iterator[Doc]:
        ids = []
        for pos, d in enumerate(make_docs()):
            if pos in sub.chosen:
                ids.append(d.id)
                yield d
        sub.info["documents"] = len(ids)
        sub.info["doc_ids"] = ids
        sub.info["doc_ids_sha256"] = hashlib.sha256("\n".join(ids).encode()).hexdigest()

    return kept(), sub


def required_ids(gold: Mapping[str, list[str]], negatives: Mapping[str, list[str]] | None = None,
                 per_query: int = 0) -> dict[str, str]:
    """id -> GOLD / NEGATIVE for the sampled queries: every gold id, then up to ``per_query``
    hard negatives of each query (in the dataset's order). Gold wins over negative."""
    out: dict[str, str] = {}
    for ids in gold.values():
        for d in ids:
            out[d] = GOLD
    if negatives and per_query:
        for ids in negatives.values():
            for d in ids[:per_query]:
                out.setdefault(d, NEGATIVE)
    return out
