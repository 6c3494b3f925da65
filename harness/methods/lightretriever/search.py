"""LightRetriever's searcher: one trained model and its indexes on one query set, writing the light
dense, full-size baseline and light sparse runs, and Figure 5's runs (documents' top-k sparse terms,
MRL dims)."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import hits_from_rows, read_docids, write_run_with_meta
from harness.datasets import store
from harness.methods.lightretriever.index import DENSE_DIR, SPARSE_DIR, SPARSE_NPZ, impacts
from harness.methods.lightretriever.model import LightModel
from harness.methods.lightretriever.settings import NAME, instruction_for, model_id, settings, systems_of
from harness.models.runtime import encode_autocast, encode_device, torch_for
from harness.recording import merged


def _full_queries(model: LightModel, s: Mapping[str, Any], instr: str | None, qrows) -> np.ndarray:
    torch = torch_for(s)
    prompt = model.prompt_ids(instr)
    bs = int(s["encode_batch_size"])
    out = []
    with torch.inference_mode():
        for i in range(0, len(qrows), bs):
            h, mask = model.forward(prompt, qrows[i:i + bs])
            out.append(model.eos_pool(h, mask).cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, model.hidden), np.float32)


def _sparse_queries(model: LightModel, s: Mapping[str, Any], qrows):
    """Query sparse vectors (CSR [n, V]): counts, binary, or (Table 4 'Qry Full') the LM-head vector."""
    import scipy.sparse as sps

    torch = torch_for(s)
    mode = model.s["sparse_query"]
    if mode == "full":
        prefix = model.prompt_ids(None)
        out = []
        with torch.inference_mode():
            for i in range(0, len(qrows), int(s["encode_batch_size"])):
                rows = [r or [model.eos] for r in qrows[i:i + int(s["encode_batch_size"])]]
                h, mask = model.forward(prefix, rows)
                out.append(sps.csr_matrix(model.sparse_vectors(h, mask, len(prefix)).cpu().numpy()))
        return sps.vstack(out).tocsr()
    data, rows, cols = [], [], []
    for i, r in enumerate(qrows):
        for t, c in Counter(r).items():
            rows.append(i)
            cols.append(t)
            data.append(1.0 if mode == "binary" else float(c))
    return sps.csr_matrix((data, (rows, cols)), shape=(len(qrows), model.vocab), dtype=np.float32)


def _topk_rows(sp, k: int):
    """Each row's k largest weights (Figure 5's sparsity control)."""
    import scipy.sparse as sps

    sp = sp.tocsr()
    rows, cols, vals = [], [], []
    for i in range(sp.shape[0]):
        a, b = sp.indptr[i], sp.indptr[i + 1]
        d, c = sp.data[a:b], sp.indices[a:b]
        if len(d) > k:
            keep = np.argpartition(-d, k - 1)[:k]
            d, c = d[keep], c[keep]
        rows += [i] * len(d)
        cols += c.tolist()
        vals += d.tolist()
    return sps.csr_matrix((vals, (rows, cols)), shape=sp.shape, dtype=np.float32)


def _score_hits(scores: np.ndarray, docids: Sequence[str], qids: Sequence[str], k: int):
    out = {}
    for i, q in enumerate(qids):
        row = scores[i]
        top = np.argsort(-row, kind="stable")[:k]
        out[q] = [(docids[j], float(row[j])) for j in top if row[j] > 0]
    return out


def _dense_hits(docvecs: np.ndarray, qvecs: np.ndarray, docids: Sequence[str], qids: Sequence[str], k: int):
    from harness.indexes.faiss_dense import DenseFaissIndex

    scores, rows = DenseFaissIndex.build("Flat", docvecs).search(qvecs, min(k, len(docids)))
    return hits_from_rows(docids, qids, scores, rows)


class Searcher:
    """One model (``inputs["model"]``) and its indexes (``inputs["index"]``) on the ``split`` queries of
    ``job.dataset``. Query vectors and Figure 5's inputs are computed once and shared by the systems."""

    def __init__(self, cfg: Mapping[str, Any], job: Any, inputs: Mapping[str, Path]) -> None:
        from harness.indexes import parse_spec
        from harness.indexes.faiss_dense import DenseFaissIndex

        self.v = v = job.params.get("variant")
        self.s = s = settings(cfg)
        split = job.params.get("split", "test")
        self.index_dir = inputs["index"]
        queries = store.read_queries(inputs["data"], split)
        self.qids, self.k = [q.id for q in queries], int(cfg["evaluate"]["depth"])
        device = encode_device(s)
        self.model = LightModel.load(inputs["model"], device)
        self.autocast, precision = encode_autocast(s, device)   # the queries' encoders (table, full size)
        self.ms = ms = self.model.s
        self.instr = instruction_for(merged(s, {"instruction": ms["instruction"]}), str(job.dataset))
        self.kinds = {kk: sid for kk, sid in systems_of(s, v).items() if sid in job.systems} if split == "test" else \
            {"dense": job.systems[0]}
        self.qrows = self.model.ids([q.text for q in queries], int(s["q_max_len"]))
        empty = sum(1 for r in self.qrows if not r)
        if empty:
            print(f"WARNING: {job.dataset}: {empty} quer{'y' if empty == 1 else 'ies'} with no token after tokenisation: "
                  "zero vectors (no hits)")
        self.index = DenseFaissIndex.load(inputs["index"] / DENSE_DIR, parse_spec(s["index"])[1])
        self.docids = read_docids(inputs["index"] / DENSE_DIR, expect=self.index.ntotal)
        self.meta = {"dataset": job.dataset, "split": split, "depth": self.k, "instruction": self.instr,
                     "empty_queries": empty}
        self.info: dict[str, Any] = {"queries": len(queries), "empty_queries": empty, "encode_precision": precision}
        self.qvec_light = self.qsp = None
        self.docs_sp = self.docvecs = None   # Figure 5's inputs, loaded once for all its systems

    def write_runs(self, systems: Sequence[str], out: Path) -> dict[str, Any]:
        """The runs of ``systems`` in ``out`` (``<system>.trec``); info for meta.json."""
        with self.autocast:
            if "dense" in self.kinds:
                self.dense(out)
            if "base" in self.kinds:
                self.base(out)
            if "sparse" in self.kinds:
                self.sparse(out)
            for system in systems:
                if f"{NAME}.topk" in system:        # Figure 5: documents' top-k sparse terms, exact dot products
                    self.topk(system, out)
                elif "-d" in system and system.startswith(model_id(self.v) + "-d"):   # MRL dims
                    self.mrl(system, out)
        return self.info

    def dense(self, out: Path) -> None:
        """Light dense: the cached table's mean over each query's tokens (or Table 4's full-size query)."""
        import torch

        from harness.methods.lightretriever.ops import query_vector

        model, ms = self.model, self.ms
        t0 = time.perf_counter()
        if ms["dense_query"] == "full":
            self.qvec_light = _full_queries(model, self.s, self.instr, self.qrows)
        else:
            # the cached rows of the tokens these queries hold (the vectors the full V-row table would
            # give them; measure lightretriever.speed times the lookup in the full table)
            uniq = sorted({t for r in self.qrows for t in r}) or [model.eos]
            table = model.cache_table(self.instr, tokens=uniq)
            local = {t: i for i, t in enumerate(uniq)}
            t1 = time.perf_counter()
            with torch.inference_mode():
                self.qvec_light = torch.nn.functional.normalize(
                    query_vector(table, [[local[t] for t in r] for r in self.qrows]).float(), dim=-1).cpu().numpy()
            self.info["table_seconds"], self.info["lookup_seconds"] = (round(t1 - t0, 3),
                                                                       round(time.perf_counter() - t1, 4))
            self.info["table_rows"] = len(uniq)
        scores, rows = self.index.search(self.qvec_light, self.k)
        system = self.kinds["dense"]
        write_run_with_meta(out / f"{system}.trec", hits_from_rows(self.docids, self.qids, scores, rows),
                            system=system, meta={**self.meta, "query": ms["dense_query"], "doc": ms["dense_doc"],
                                                 "seconds": round(time.perf_counter() - t0, 3)})

    def base(self, out: Path) -> None:
        """The full-size symmetric baseline: full-size queries against the same document vectors."""
        t0 = time.perf_counter()
        qf = _full_queries(self.model, self.s, self.instr, self.qrows)
        scores, rows = self.index.search(qf, self.k)
        system = self.kinds["base"]
        write_run_with_meta(out / f"{system}.trec", hits_from_rows(self.docids, self.qids, scores, rows),
                            system=system, meta={**self.meta, "query": "full", "doc": self.ms["dense_doc"],
                                                 "seconds": round(time.perf_counter() - t0, 3)})

    def sparse(self, out: Path) -> None:
        """Light sparse: the query's counts (or LM-head vector) as impacts on the Lucene impact index."""
        from harness.indexes.lucene import LUCENE_DIR, LuceneIndex

        s, ms = self.s, self.ms
        t0 = time.perf_counter()
        self.qsp = qsp = _sparse_queries(self.model, s, self.qrows)
        scale = float(s["impact_scale"])
        enc = {q: (impacts(qsp[i], scale) if ms["sparse_query"] == "full" else
                   {str(j): int(w) for j, w in zip(qsp[i].indices.tolist(), qsp[i].data.tolist())})
               for i, q in enumerate(self.qids)}
        hits = LuceneIndex(self.index_dir / SPARSE_DIR / LUCENE_DIR, "impact").search(enc, self.k)
        system = self.kinds["sparse"]
        write_run_with_meta(out / f"{system}.trec", hits, system=system,
                            meta={**self.meta, "instruction": None, "query": ms["sparse_query"],
                                  "doc": ms["sparse_doc"], "impact_scale": scale,
                                  "seconds": round(time.perf_counter() - t0, 3)})

    def topk(self, system: str, out: Path) -> None:
        """Figure 5: the documents' top-k sparse terms only (float weights, exact dot products)."""
        import scipy.sparse as sps

        kk = int(system.rsplit("topk", 1)[1])
        if self.docs_sp is None:
            self.docs_sp = sps.load_npz(self.index_dir / SPARSE_NPZ)
        if self.qsp is None:
            self.qsp = _sparse_queries(self.model, self.s, self.qrows)
        scores = (self.qsp @ _topk_rows(self.docs_sp, kk).T).toarray()
        write_run_with_meta(out / f"{system}.trec", _score_hits(scores, self.docids, self.qids, self.k),
                            system=system, meta={**self.meta, "instruction": None, "doc_topk": kk,
                                                 "note": "float weights, exact sparse dot products (scipy)"})

    def mrl(self, system: str, out: Path) -> None:
        """Figure 5 (MRL): light dense on the first ``dim`` dims of both sides, re-normalised."""
        dim = int(system.rsplit("-d", 1)[1])
        if self.docvecs is None:
            self.docvecs = self.index.index.reconstruct_n(0, self.index.ntotal)
        if self.qvec_light is None:
            self.qvec_light = _full_queries(self.model, self.s, self.instr, self.qrows)
        docvecs, qvecs = self.docvecs, self.qvec_light
        a = docvecs[:, :dim] / np.maximum(np.linalg.norm(docvecs[:, :dim], axis=1, keepdims=True), 1e-12)
        b = qvecs[:, :dim] / np.maximum(np.linalg.norm(qvecs[:, :dim], axis=1, keepdims=True), 1e-12)
        write_run_with_meta(out / f"{system}.trec", _dense_hits(a, b, self.docids, self.qids, self.k),
                            system=system, meta={**self.meta, "dim": dim,
                                                 "note": "light dense, first dim dims re-normalised (MRL)"})


class Retriever:
    """LightRetriever's main run ``lightretriever`` (light dense, §2.2: each query the mean of its
    tokens' cached vectors under the dataset's instruction, against the full-size document vectors of
    the index's dense part), the run :meth:`Searcher.dense` writes, from one model and its index (a
    variant's: ``lightretriever.<v>``). The instruction is the index's dataset's, from the model's
    recorded ``instructions`` (``settings={"instructions": {dataset: task}}`` supplies a missing one).
    The table of V token vectors is built on the first search and kept. The sparse and hybrid runs are
    not offered (the hybrid fuses two runs)."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None, *,
                 method: str = NAME, job: str | None = None, dataset: str | None = None,
                 inputs: Mapping[str, Path] | None = None) -> None:
        from harness.errors import ConfigError
        from harness.indexes import parse_spec
        from harness.indexes.faiss_dense import DenseFaissIndex

        if model_dir is None:
            raise ConfigError(f"the LightRetriever index {index_dir} names no model: pass model_dir (--model)")
        self.system = job or NAME
        self.s = s = settings(cfg)
        torch_for(s)
        self.model = LightModel.load(Path(model_dir))
        self.autocast, _ = encode_autocast(s, "cpu")   # the search job's query encoders, on the CPU
        try:
            self.instr = instruction_for({**s, "instruction": self.model.s["instruction"]}, str(dataset))
        except ConfigError:  # an evaluation set's instruction is a search setting: no model or index records it
            raise ConfigError(f"no task instruction for dataset {dataset!r}: the model records instructions for "
                              f"{', '.join(s['instructions']) or 'no dataset'}",
                              fix=f"load_retriever(..., settings={{'instructions': {{'{dataset}': '<task>'}}}}) or "
                                  f"--set instructions.{dataset}='<task>' (App. A.4 lists the paper's)") from None
        self.index = DenseFaissIndex.load(Path(index_dir) / DENSE_DIR, parse_spec(s["index"])[1])
        self.docids = read_docids(Path(index_dir) / DENSE_DIR, expect=self.index.ntotal)
        self._table = None

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Light dense query vectors (or the full-size encoder's, for a ``dense_query: full`` model)."""
        import torch

        from harness.methods.lightretriever.ops import query_vector

        qrows = self.model.ids(list(texts), int(self.s["q_max_len"]))
        if self.model.s["dense_query"] == "full":
            with self.autocast:
                return _full_queries(self.model, self.s, self.instr, qrows)
        if self._table is None:
            with self.autocast:
                self._table = self.model.cache_table(self.instr)
        with torch.inference_mode():
            return torch.nn.functional.normalize(query_vector(self._table, qrows).float(), dim=-1).numpy()

    def search(self, queries: Mapping[str, str] | Sequence[Any], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        scores, rows = self.index.search(self.encode_queries(texts), k)
        return hits_from_rows(self.docids, qids, scores, rows)
