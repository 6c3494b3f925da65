"""The four search functions (§4.4) from one model load and one question encoding: full
<E(q), E(D)>, alpha <T(q), E(D)>, beta <E(q), T(D)> and beta + re-rank(m) (the top m of the beta
run embedded on the fly and re-scored); and an ablation model's full and beta runs."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.artifacts import hits_from_rows, write_run_with_meta
from harness.datasets import store
from harness.indexes.sparse_csr import SparseEmbeddingIndex
from harness.methods.base import Context
from harness.methods.vdr.index import emb_index, load_token_index
from harness.methods.vdr.model import VDRModel
from harness.rerank import write_reranked


def _write_system(out: Path, system: str, qids: Sequence[str], docids: Sequence[str], scores, rows,
                  dataset: str | None, **meta: Any) -> None:
    write_run_with_meta(out / f"{system}.trec", hits_from_rows(docids, qids, scores, rows), system=system,
                        meta={"dataset": dataset, **meta})


def search_variants(ctx: Context, inputs: Mapping[str, Path], out: Path, name: str, systems: Sequence[str],
                    dataset: str | None, split: str, depths: Sequence[int]) -> dict[str, Any]:
    """The runs of ``systems`` among <name>.full|alpha|beta on ``split``, then beta + re-rank(m) for
    each m of ``depths``."""
    k = ctx.cfg["evaluate"]["depth"]
    queries = store.read_queries(inputs["data"], split)
    qids, texts = [q.id for q in queries], [q.text for q in queries]
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"))
    t0 = time.perf_counter()
    eq = enc.encode_questions(texts)
    tq = enc.binary_questions([enc.question(t) for t in texts])
    t_enc = time.perf_counter() - t0
    emb = SparseEmbeddingIndex.load(inputs["emb_index"])
    tindex, tdocids = load_token_index(inputs["token_index"])
    searches = {"full": (emb, eq, emb.docids), "alpha": (emb, tq, emb.docids), "beta": (tindex, eq, tdocids)}
    beta_hits = None
    for variant, (index, qv, docids) in searches.items():
        if f"{name}.{variant}" not in systems:
            continue
        t1 = time.perf_counter()
        scores, rows = index.search(qv, k)
        _write_system(out, f"{name}.{variant}", qids, docids, scores, rows, dataset, depth=k,
                      seconds=round(t_enc + time.perf_counter() - t1, 3),
                      note="question encoding (shared by the variants) + search; protocol timings are in metrics/")
        if variant == "beta":
            beta_hits = hits_from_rows(docids, qids, scores, rows)
    depths = list(depths or [])
    if depths and beta_hits is not None:
        write_reranked(out, beta_hits, queries, depths, {d.id: d for d in store.iter_corpus(inputs["data"])},
                       enc.encode_questions, enc.encode_passages, system=f"{name}.beta", dataset=dataset,
                       depth=k, note="passages of the beta top m embedded on the fly (no embedding index)")
    return {"queries": len(queries)}


def search_ablation(ctx: Context, inputs: Mapping[str, Path], out: Path, name: str, ablation: str,
                    dataset: str | None) -> dict[str, Any]:
    """An ablation model's full run (its embedding index built in memory: nothing else reads it)
    and beta run (the shared token index)."""
    k = ctx.cfg["evaluate"]["depth"]
    queries = store.read_queries(inputs["data"], "test")
    qids = [q.id for q in queries]
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"))
    eq = enc.encode_questions([q.text for q in queries])
    emb, _ = emb_index(enc, list(store.iter_corpus(inputs["data"])))
    scores, rows = emb.search(eq, k)
    _write_system(out, f"{name}.abl-{ablation}-full", qids, emb.docids, scores, rows, dataset, depth=k,
                  model=str(inputs["model"]))
    tindex, tdocids = load_token_index(inputs["token_index"])
    scores, rows = tindex.search(eq, k)
    _write_system(out, f"{name}.abl-{ablation}-beta", qids, tdocids, scores, rows, dataset, depth=k,
                  model=str(inputs["model"]))
    return {"queries": len(queries), "ablation": ablation}
