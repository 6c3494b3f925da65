"""BPR's search: :class:`Searcher` (a trained model with its binary index; two-stage search:
Hamming candidates, then the rerank with the continuous question embedding), the DPR baselines'
dense searcher, and the run files the search steps write."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import hits_from_rows, read_docids, write_run_with_meta
from harness.datasets import Query
from harness.errors import ConfigError
from harness.methods import dpr
from harness.methods.base import Context
from harness.methods.bpr.index import _binary_spec, read_codes
from harness.methods.bpr.settings import DEFAULTS, _variant_search
from harness.recording import merged


class Searcher:
    """A trained BPR model with its binary index: ``encode`` (e_q) and ``search`` (two stages) apart.

    ``variant`` picks the search: a SEARCH_VARIANTS name or ``l<n>``; ``hash_dir`` holds the hash
    index (variants bhash and no-rerank). The default is the linear scan (bflat)."""

    def __init__(self, ctx: Context, index_dir: Path, model_dir: Path | None, *, variant: str = "bflat",
                 hash_dir: Path | None = None) -> None:
        from harness.indexes.faiss_binary import BinaryFaissIndex

        self.ctx = ctx
        self.variant = variant
        self.kind, self.rerank, self.n_candidates = _variant_search(ctx.cfg, variant)
        self.model = dpr.BiEncoder.load(ctx, model_dir) if model_dir is not None else None
        s = merged(DEFAULTS, ctx.mcfg)
        self.index = None
        self.index_file: Path | None = None
        if self.kind == "hash":
            if hash_dir is None:
                raise ConfigError(f"BPR variant {variant!r} needs the hash index (hash_dir)")
            self.index = BinaryFaissIndex.load(hash_dir, _binary_spec(s["hash_index"]))
            self.index.set_nflip(int(s["hash_nflip"]))  # a search-time setting (methods.bpr.hash_nflip)
            self.index_file = Path(hash_dir) / "index.faissb"
        else:
            from harness.indexes.faiss_binary import INDEX_FILE

            self.index_file = Path(index_dir) / INDEX_FILE
            if self.kind == "flat":
                self.index = BinaryFaissIndex.load(index_dir, _binary_spec(s["index"]))
        # the rerank's codes: those the scan holds (one copy in memory, a view of self.index's), else read
        held = self.index.stored_codes() if self.kind == "flat" else None
        self.codes = held if held is not None else read_codes(index_dir)
        self.docids = read_docids(index_dir, expect=len(self.codes))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.model is None:
            raise ConfigError("this BPR searcher was built without a model")
        return self.model.encode_questions(list(texts))

    def search(self, qvecs: np.ndarray, k: int, qcodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, rows); ``qcodes`` = binarize(qvecs) when the caller has them (timing)."""
        from harness.indexes.faiss_binary import binarize, two_stage_search

        if self.kind is None:
            return two_stage_search(None, None, qvecs, self.codes, k, n_candidates=None)
        if qcodes is None:
            qcodes = binarize(qvecs)
        return two_stage_search(self.index, qcodes, qvecs, self.codes, k, n_candidates=self.n_candidates,
                                rerank=self.rerank)

    def results(self, qids: Sequence[str], scores: np.ndarray, rows: np.ndarray) -> dict[str, list[tuple[str, float]]]:
        return hits_from_rows(self.docids, qids, scores, rows)


class _DenseSystem:
    """A DPR index (Flat or a baseline) with the searcher's ``search(qvecs, k, qcodes)``."""

    def __init__(self, index_dir: Path, spec: str) -> None:
        from harness.indexes.faiss_dense import INDEX_FILE, DenseFaissIndex

        self.index = DenseFaissIndex.load(index_dir, spec.partition(":")[2])
        self.index_file = Path(index_dir) / INDEX_FILE

    def search(self, qvecs: np.ndarray, k: int, qcodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(qvecs, k)


def write_run(out: Path, system: str, s: Searcher, queries: Sequence[Query], scores, rows, seconds: float,
              **meta: Any) -> None:
    """``<system>.trec`` of a BPR search with its meta (wall time of the search, encoding included)."""
    write_run_with_meta(out / f"{system}.trec", s.results([q.id for q in queries], scores, rows), system=system,
                        meta={"seconds": round(seconds, 3), **meta,
                              "note": "wall time of the search (question encoding included); the protocol's "
                                      "query time is in metrics/"})


class Encoder(dpr.Encoder):
    """BPR's trained encoders behind harness.api's Encoder: ``encode_queries`` gives the continuous
    question embeddings e_q (the rerank's), ``encode_docs`` the packed binary passage codes
    (sign of the passage embeddings, the index's content)."""

    def encode_docs(self, docs: Sequence[Any]) -> np.ndarray:
        from harness.indexes.faiss_binary import binarize

        return binarize(super().encode_docs(docs))


class Retriever:
    """BPR's main run, ``bpr.bflat`` (Table 1: linear scan of the binary codes for the top
    ``n_candidates`` by Hamming distance, then the rerank with e_q), from the ``bpr`` index; from the
    ``bpr.hash`` index, ``bpr.bhash`` (the hash lookup instead of the scan); from a DPR baseline index
    (``dpr.hnsw``, ``dpr.lsh``, ``dpr.pq``), that baseline's run with DPR's question encoder.
    Built by :func:`harness.api.load_retriever` (one model load, one :class:`Searcher`)."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None, *, method: str = "bpr",
                 job: str | None = None, dataset: str | None = None, inputs: Mapping[str, Path] | None = None) -> None:
        from harness.methods.bpr.settings import variant_context

        if model_dir is None:
            raise ConfigError(f"the BPR index {index_dir} names no model: pass model_dir (--model)")
        job, inputs = job or "bpr", dict(inputs or {})
        if job.startswith("dpr."):  # a DPR baseline index over DPR's vectors
            ctx = Context(cfg, "dpr", dataset)
            self.system, self.docids = job, read_docids(index_dir)
            self.index = _DenseSystem(index_dir, ctx.cfg["methods"]["bpr"]["dpr_baselines"][job.partition(".")[2]])
            self.encode = dpr.BiEncoder.load(ctx, Path(model_dir)).encode_questions
            return
        ctx = variant_context(cfg, None, dataset)
        if job == "bpr.hash":
            if "source" not in inputs:
                raise ConfigError(f"{index_dir}/meta.json names no source index (inputs.source)")
            self.system = f"{method}.bhash"
            s = Searcher(ctx, inputs["source"], Path(model_dir), variant="bhash", hash_dir=Path(index_dir))
        elif job == "bpr":
            self.system = f"{method}.bflat"
            s = Searcher(ctx, Path(index_dir), Path(model_dir), variant="bflat")
        else:
            raise ConfigError(f"index {job} ({index_dir}) is not searched by harness.api: BPR's are bpr, bpr.hash "
                              f"and the DPR baselines dpr.hnsw|lsh|pq")
        self.index, self.docids, self.encode = s, s.docids, s.encode

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        scores, rows = self.index.search(self.encode(texts), k)
        return hits_from_rows(self.docids, qids, scores, rows)
