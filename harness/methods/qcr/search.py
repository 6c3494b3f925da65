"""QCR's search (§3.4, §4.2): questions encoded into codes and searched in the code index with BM25,
the top ``rescore_depth`` rescored by Eq. 3 through a |C| x |C| distance matrix, and the
no-position and "w/ words" runs of the same encoded questions."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import write_run_with_meta
from harness.datasets import store
from harness.methods.qcr.index import code_strings, load_codes, load_lucene, with_words
from harness.methods.qcr.model import QCRModel
from harness.models.runtime import encode_device
from harness.methods.qcr.settings import codebook_size, codes_k


def distance_matrix(levels: Sequence[int]) -> np.ndarray:
    """|C| x |C| l2 distances between FSQ's code vectors (its implicit codebook, code scale)."""
    import torch
    from vector_quantize_pytorch import FSQ

    cb = FSQ(levels=list(levels)).implicit_codebook.float()
    return torch.cdist(cb, cb).numpy().astype(np.float32)


def rescore(q_codes: np.ndarray, cand_codes: np.ndarray, dist: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """Eq. 3 between one query's codes [K] and candidates' codes [n, K'] through the distance matrix:
    ``sum_i max_j -dist[q_i, c_j]``."""
    import torch

    m = torch.from_numpy(-dist[q_codes])                       # [K, |C|]
    out = []
    for i in range(0, len(cand_codes), chunk):
        c = torch.from_numpy(np.asarray(cand_codes[i:i + chunk], dtype=np.int64))   # [n, K']
        out.append(m[:, c].amax(dim=2).sum(dim=0))             # [K, n, K'] -> [n]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def rescore_run(run: Mapping[str, list[tuple[str, float]]], q_codes: Mapping[str, np.ndarray],
                doc_codes: np.ndarray, row_of: Mapping[str, int], dist: np.ndarray, depth: int, k: int
                ) -> dict[str, list[tuple[str, float]]]:
    """The top ``depth`` of each query's run rescored by Eq. 3 (ties keep the first-stage order);
    the rest keeps its order below them; cut at ``k``. Scores are order keys (k - rank + 1)."""
    out = {}
    for qid, hits in run.items():
        head, tail = hits[:depth], hits[depth:]
        if head:
            sc = rescore(q_codes[qid], doc_codes[[row_of[d] for d, _ in head]], dist)
            order = sorted(range(len(head)), key=lambda i: (-sc[i], i))
            head = [head[i] for i in order]
        ranked = [d for d, _ in head + tail][:k]
        out[qid] = [(d, float(len(ranked) - r)) for r, d in enumerate(ranked)]
    return out


def encode_queries(model: QCRModel, s: Mapping[str, Any], texts: Sequence[str]) -> np.ndarray:
    """Code ids of query texts at the section's query length and encoding batch size."""
    return model.encode(list(texts), int(s["q_max_len"]), int(s["encode_batch_size"]))


def first_stage_depth(s: Mapping[str, Any], k: int, n_docs: int) -> int:
    """How deep the code run is searched: ``k``, or the rescoring depth when deeper, at most the corpus."""
    return min(max(k, int(s["rescore_depth"])), n_docs)


def search_model(s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path, *, systems: Sequence[str],
                 dataset: str | None, split: str, k: int) -> dict[str, Any]:
    """Codes run, rescored run, [no-position run], [codes + words run] of one model (``systems`` in
    that order: the search job's), each cut at depth ``k``."""
    queries = store.read_queries(inputs["data"], split)
    t0 = time.perf_counter()
    model = QCRModel.load(inputs["model"], encode_device(s))
    ms = model.s
    qcodes = encode_queries(model, s, [q.text for q in queries])
    t_enc = time.perf_counter() - t0
    qids = [q.id for q in queries]
    size = codebook_size(ms["levels"])
    qstr = code_strings(qcodes, qids, k=codes_k(ms), size=size, positional=s["positional"])
    doc_codes, docids = load_codes(inputs["index"])
    depth = first_stage_depth(s, k, len(docids))
    idx = load_lucene(inputs["index"], s)
    t1 = time.perf_counter()
    deep = idx.search(dict(zip(qids, qstr)), depth)
    t_search = time.perf_counter() - t1
    systems = list(systems)
    meta = {"dataset": dataset, "split": split, "depth": k, "K": int(qcodes.shape[1]),
            "positional": s["positional"], "encode_seconds": round(t_enc, 3)}
    write_run_with_meta(out / f"{systems[0]}.trec", {q: h[:k] for q, h in deep.items()}, system=systems[0],
                        meta={**meta, "seconds": round(t_enc + t_search, 3)})
    if len(systems) > 1:
        t2 = time.perf_counter()
        row_of = {d: i for i, d in enumerate(docids)}
        res = rescore_run(deep, dict(zip(qids, qcodes)), doc_codes, row_of, distance_matrix(ms["levels"]),
                          int(s["rescore_depth"]), k)
        write_run_with_meta(out / f"{systems[1]}.trec", res, system=systems[1], meta={
            **meta, "rescore_depth": int(s["rescore_depth"]), "first_stage_depth": depth,
            "seconds": round(t_enc + t_search + time.perf_counter() - t2, 3)})
    for system in systems[2:]:
        t3 = time.perf_counter()
        if system.endswith("nopos"):
            strs = code_strings(qcodes, qids, k=codes_k(ms), size=size, positional=False)
            hits = load_lucene(inputs["nopos_index"], s).search(dict(zip(qids, strs)), k)
        else:
            hits = load_lucene(inputs["words_index"], s).search(
                dict(zip(qids, with_words(qstr, [q.text for q in queries]))), k)
        write_run_with_meta(out / f"{system}.trec", hits, system=system,
                            meta={**meta, "seconds": round(t_enc + time.perf_counter() - t3, 3)})
    return {"queries": len(queries)}


class Encoder:
    """A trained QCR model behind harness.api's Encoder: ``encode_queries`` / ``encode_docs`` give
    code ids [n, K] (int32, FSQ codebook ids) at the section's lengths (``q_max_len``, ``p_max_len``)."""

    def __init__(self, model: QCRModel, s: Mapping[str, Any]) -> None:
        self.model, self.s = model, s

    @classmethod
    def load(cls, path: str | Path, cfg: Mapping[str, Any] | None = None) -> Encoder:
        from harness.methods.qcr.settings import settings

        model = QCRModel.load(Path(path))
        return cls(model, settings(cfg) if cfg is not None else {"encode_batch_size": 64, **model.s})

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return encode_queries(self.model, self.s, texts)

    def encode_docs(self, docs: Sequence[Any]) -> np.ndarray:
        return self.model.encode([(d.title, d.text) for d in docs], int(self.s["p_max_len"]),
                                 int(self.s["encode_batch_size"]))


class Retriever:
    """QCR's main run ``qcr.rescore`` (§3.4: the code run searched with BM25 to ``rescore_depth``, its
    top rescored by Eq. 3; ``rescore=False``: the code run ``qcr`` alone) from a model's code index
    (``qcr``, or a variant's ``qcr.<v>``: systems ``qcr.<v>-rescore`` / ``qcr.<v>``). The words and
    no-position indexes, the k-means baseline and the RRF fusion (which needs two runs) are not offered."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None, *, method: str = "qcr",
                 job: str | None = None, dataset: str | None = None, inputs: Mapping[str, Path] | None = None,
                 rescore: bool = True) -> None:
        from harness.errors import ConfigError

        job = job or method
        if job.endswith((".words", ".nopos")) or job.startswith(f"{method}.kmeans"):
            raise ConfigError(f"index {job} ({index_dir}) is not searched by harness.api: pass a model's code "
                              f"index ({method} or {method}.<variant>)")
        if model_dir is None:
            raise ConfigError(f"the QCR index {index_dir} names no model: pass model_dir (--model)")
        self.encoder = Encoder.load(model_dir, cfg)
        self.s, ms = self.encoder.s, self.encoder.model.s
        self.rescore = rescore
        self.system = f"{job}{'.' if job == method else '-'}rescore" if rescore else job
        self.doc_codes, self.docids = load_codes(index_dir)
        self.row_of = {d: i for i, d in enumerate(self.docids)}
        self.index = load_lucene(index_dir, self.s)
        self.k, self.size, self.levels = codes_k(ms), codebook_size(ms["levels"]), ms["levels"]
        self._dist: np.ndarray | None = None  # Eq. 3's |C| x |C| distances, computed on the first rescoring

    def search(self, queries: Mapping[str, str] | Sequence[Any], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        qcodes = self.encoder.encode_queries(texts)
        qstr = code_strings(qcodes, qids, k=self.k, size=self.size, positional=self.s["positional"])
        deep = self.index.search(dict(zip(qids, qstr)), first_stage_depth(self.s, k, len(self.docids)))
        if not self.rescore:
            return {q: h[:k] for q, h in deep.items()}
        if self._dist is None:
            self._dist = distance_matrix(self.levels)
        return rescore_run(deep, dict(zip(qids, qcodes)), self.doc_codes, self.row_of, self._dist,
                           int(self.s["rescore_depth"]), k)
