"""BPR's efficiency figures on a real dataset: index bytes (file size) and per-question query time
(protocol ``bpr-query-time``) of every Table 1/2 system: DPR, its baselines and BPR's search variants."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness import figures
from harness.datasets import store
from harness.methods import dpr
from harness.methods.base import Context
from harness.methods.bpr.search import Searcher, _DenseSystem
from harness.methods.bpr.settings import SEARCH_VARIANTS, dpr_baselines, settings, variant_context

# harness.timing and harness.meta load inside the functions, as before: the plan imports this package.


def time_per_question(systems: Mapping[str, tuple[Any, np.ndarray, np.ndarray | None]], k: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per question for each system (batch of one question, search only), round-robin per
    question so that every system sees the same machine load. ``systems``: name -> (searcher,
    question vectors, question codes or None)."""
    from harness.timing import time_calls

    out: dict[str, list[float]] = {name: [] for name in systems}
    n = min(len(v[1]) for v in systems.values())
    for i in range(n):
        for name, (s, qv, qc) in systems.items():
            q = qv[i:i + 1]
            c = None if qc is None else qc[i:i + 1]
            out[name] += time_calls(lambda s=s, q=q, c=c: s.search(q, k, c), repeats)
    return out


def efficiency(cfg: Mapping[str, Any], dataset: str, *, dpr_model: Path, bpr_model: Path, dpr_index: Path,
               bpr_index: Path, hash_index: Path, baseline_indexes: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """Index bytes and per-question query time of every Table 1/2 system: system -> metrics JSON."""
    import faiss

    from harness.indexes.faiss_binary import binarize
    from harness.meta import device_info
    from harness.timing import PROTOCOLS, summarize

    protocol = PROTOCOLS.get("bpr-query-time")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    device = "cpu"  # faiss-cpu indexes, searched in this process (faiss-gpu is not wired for BPR's search)
    s = settings(cfg)
    dctx, bctx = Context(cfg, "dpr", dataset), variant_context(cfg, None, dataset)
    queries = store.read_queries(dctx.data_dir(), "test")
    if s["timing_queries"]:
        queries = queries[: s["timing_queries"]]
    texts = [q.text for q in queries]
    qd = dpr.BiEncoder.load(dctx, dpr_model).encode_questions(texts)
    qb = dpr.BiEncoder.load(bctx, bpr_model).encode_questions(texts)
    qc = binarize(qb)  # the hash layer on the question: part of encoding, outside the timer
    systems: dict[str, tuple[Any, np.ndarray, np.ndarray | None]] = {
        "dpr": (_DenseSystem(dpr_index, Context(cfg, "dpr").mcfg.get("index", "faiss:Flat")), qd, None)}
    for name, spec in dpr_baselines(cfg).items():
        systems[f"dpr.{name}"] = (_DenseSystem(baseline_indexes[name], spec), qd, None)
    for v in SEARCH_VARIANTS:
        systems[f"bpr.{v}"] = (Searcher(bctx, bpr_index, None, variant=v, hash_dir=hash_index), qb, qc)
    k = cfg["evaluate"]["depth"]
    for sys_, qv, c in systems.values():  # warm caches once, outside the samples
        sys_.search(qv[:1], k, None if c is None else c[:1])
    samples = time_per_question(systems, k, repeats)
    qids = [q.id for q in queries][: min(len(v[1]) for v in systems.values())]
    out = {}
    for name, (sys_, _, _) in systems.items():
        summ = summarize(samples[name], protocol.trim)
        # each question's mean over its repeats: the per-question values a timing claim is tested on,
        # paired across systems (every system timed the same questions, round-robin)
        per_q = np.asarray(samples[name], dtype=float).reshape(len(qids), repeats).mean(1) * 1e3
        out[name] = figures.record(name, dataset, {
            "index_bytes": (sys_.index_file.stat().st_size, "B", f"size of {sys_.index_file.name} written by faiss"),
            "query_ms": (summ["mean"] * 1e3, "ms",
                         "search only, one question per call, encoding excluded; mean over questions x repeats"),
        }, device, protocol=protocol.name, inside_timer=protocol.inside_timer["search"], repeats=repeats,
            questions=len(queries), k=k, summary_ms={a: (b * 1e3 if a != "n" else b) for a, b in summ.items()},
            faiss_threads=faiss.omp_get_max_threads(), device_info=device_info(device),
            predictions=[{"id": q, "query_ms": float(v)} for q, v in zip(qids, per_q, strict=True)])
    return out
