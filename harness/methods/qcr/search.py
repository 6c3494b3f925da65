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
    model = QCRModel.load(inputs["model"])
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
