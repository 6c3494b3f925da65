"""The four search functions (§4.4) from one model load and one question encoding: full
<E(q), E(D)>, alpha <T(q), E(D)>, beta <E(q), T(D)> and beta + re-rank(m) (the top m of the beta
run re-scored by <E(q), E(p)>: the vectors the method embeds on the fly, read from the embedding
index the full search uses); and an ablation model's full and beta runs."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.artifacts import hits_from_rows, write_run_with_meta
from harness.cost import corpus_held
from harness.datasets import store
from harness.indexes.sparse_csr import SparseEmbeddingIndex
from harness.methods.base import Context
from harness.methods.vdr.index import emb_index, load_token_index
from harness.methods.vdr.model import VDRModel
from harness.models.runtime import encode_device
from harness.rerank import stored, write_reranked


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
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"), encode_device(ctx.mcfg))
    t0 = time.perf_counter()
    eq = enc.encode_questions(texts)
    tq = enc.binary_questions([enc.question(t) for t in texts])
    t_enc = time.perf_counter() - t0
    emb = SparseEmbeddingIndex.load(inputs["emb_index"]) if "emb_index" in inputs else None  # beta alone: unread
    tindex, tdocids = load_token_index(inputs["token_index"])
    searches = {"beta": (tindex, eq, tdocids)}
    if emb is not None:
        searches = {"full": (emb, eq, emb.docids), "alpha": (emb, tq, emb.docids), **searches}
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
        # E_θ(q) and E_θ(p) as computed above and stored in the embedding index (encode_passages built
        # it): the vectors the method embeds on the fly, not computed a second time here; what
        # embedding the top m on the fly costs is Table 2's (measure svdr.latency)
        write_reranked(out, beta_hits, queries, depths, Path(inputs["data"]),
                       stored(eq, texts), stored(emb.matrix, emb.docids, key=lambda d: d.id),
                       system=f"{name}.beta", dataset=dataset, depth=k,
                       note=("the beta top m re-scored by <E_θ(q), E_θ(p)>, E_θ(p) read from the embedding index "
                             "(the vectors the method embeds on the fly; that cost is timed in Table 2)"))
    return {"queries": len(queries)}


def search_ablation(ctx: Context, inputs: Mapping[str, Path], out: Path, name: str, ablation: str,
                    dataset: str | None) -> dict[str, Any]:
    """An ablation model's full run (its embedding index built in memory: nothing else reads it)
    and beta run (the shared token index). It encodes the whole corpus, so that part of its cost
    grows with the corpus, not the queries: ``corpus_documents`` and ``corpus_seconds`` (reading and
    encoding it) say so (harness.cost.record prices both parts), and its E(D), held in memory, is noted
    as a corpus held (harness.cost.corpus_held)."""
    k = ctx.cfg["evaluate"]["depth"]
    queries = store.read_queries(inputs["data"], "test")
    qids = [q.id for q in queries]
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"), encode_device(ctx.mcfg))
    eq = enc.encode_questions([q.text for q in queries])
    t0 = time.perf_counter()
    emb, _ = emb_index(enc, store.iter_corpus(inputs["data"]))
    corpus_seconds = time.perf_counter() - t0
    # E(D) is held in memory whole while the run is searched, and grows with the corpus: the estimate
    # projects it from its entries (scipy's int32 ids on a slice; past 2^31 entries, as at NQ's ~16G, int64)
    corpus_held(Path(inputs["data"]).name, len(emb.docids), emb.nbytes, csr_entries=int(emb.matrix.nnz))
    scores, rows = emb.search(eq, k)
    _write_system(out, f"{name}.abl-{ablation}-full", qids, emb.docids, scores, rows, dataset, depth=k,
                  model=str(inputs["model"]))
    tindex, tdocids = load_token_index(inputs["token_index"])
    scores, rows = tindex.search(eq, k)
    _write_system(out, f"{name}.abl-{ablation}-beta", qids, tdocids, scores, rows, dataset, depth=k,
                  model=str(inputs["model"]))
    return {"queries": len(queries), "ablation": ablation, "corpus_documents": len(emb.docids),
            "corpus_seconds": round(corpus_seconds, 3)}


class Encoder:
    """E_θ of a trained VDR/SVDR model behind harness.api's Encoder: ``encode_queries`` and
    ``encode_docs`` give vocabulary-space CSR matrices (scipy, [n, vocabulary]); ``binary_queries`` T(q).
    The model folder holds its own settings (vdr.json): no config is needed."""

    def __init__(self, model: VDRModel) -> None:
        self.model = model

    @classmethod
    def load(cls, path: str | Path, cfg: Mapping[str, Any] | None = None) -> Encoder:
        threads = None
        if cfg is not None:  # the section's torch_threads, as the search step loads it
            from harness.meta import read_meta

            threads = cfg["methods"].get(read_meta(Path(path))["method"], {}).get("torch_threads")
        return cls(VDRModel.load(Path(path), threads))

    def encode_queries(self, texts: Sequence[str]):
        return self.model.encode_questions(list(texts))

    def binary_queries(self, texts: Sequence[str]):
        return self.model.binary_questions([self.model.question(t) for t in texts])

    def encode_docs(self, docs: Sequence[Any]):
        return self.model.encode_passages(list(docs))


class Retriever:
    """VDR's/SVDR's run from one of its indexes (built by :func:`harness.api.load_retriever`): the
    embedding index ``<m>.emb`` gives ``<m>.full`` (<E(q), E(D)>, Table 1's main row), the binary token
    index ``<m>.token`` gives ``<m>.beta`` (<E(q), T(D)>; that index names no model: pass model_dir).
    The re-ranked ``<m>.beta-m<k>`` runs need a first-stage run and are not offered here."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None, *, method: str = "svdr",
                 job: str | None = None, dataset: str | None = None, inputs: Mapping[str, Path] | None = None) -> None:
        from harness.errors import ConfigError

        job = job or f"{method}.emb"
        if model_dir is None:
            raise ConfigError(f"the {method} index {index_dir} ({job}) names no model: pass model_dir (--model), "
                              f"e.g. results/<profile>/models/{method}")
        self.encoder = Encoder(VDRModel.load(Path(model_dir), cfg["methods"][method].get("torch_threads")))
        if job.endswith(".token"):
            self.system = f"{method}.beta"
            self.index, self.docids = load_token_index(index_dir)
        else:
            self.system = f"{method}.full"
            self.index = SparseEmbeddingIndex.load(index_dir)
            self.docids = self.index.docids

    def search(self, queries: Mapping[str, Any] | Sequence[Any], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        scores, rows = self.index.search(self.encoder.encode_queries(texts), k)
        return hits_from_rows(self.docids, qids, scores, rows)
