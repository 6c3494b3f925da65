"""LightRetriever's indexes: the corpus encoded once into the dense faiss index (``dense/``) and, where
the model's sparse side is searched, the Lucene impact index (``sparse/``, weights x ``impact_scale``
rounded) and the float sparse matrix (``sparse.npz``, Figure 5's top-k)."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import write_docids
from harness import cost
from harness.cost import startup_done
from harness.datasets import store
from harness.indexes import pyserini_env
from harness.methods.lightretriever.model import LightModel, doc_text
from harness.methods.lightretriever.settings import settings
from harness.models.runtime import encode_autocast, encode_device, torch_for
from harness.progress import counted_batches
from harness.recording import merged

DENSE_DIR, SPARSE_DIR, SPARSE_NPZ = "dense", "sparse", "sparse.npz"


class DocTable:
    """The light document side's token vectors (Table 4's ``dense_doc: light``: a document is the mean
    of its tokens' cached vectors, as a light query is): the whole vocabulary's, built once before the
    first document, or under a cost probe only the rows of the tokens its encoded documents hold, the
    rest of the vocabulary's projected at their mean (the rehearsal's Llama-3 vocabulary of 128,256
    is projected at 71-75 min on two CPU cores, from 3,268 rows built in 109-114 s). Either way the table is paid once, not per document
    (:func:`harness.cost.paid_once`): priced with the index's start-up, not spread over its corpus.
    Each token's vector is its own forward pass, so a row is the same whichever rows are built beside
    it. ``batch_size``: packed rows of 1,024 positions a pass."""

    def __init__(self, model: LightModel, batch_size: int, *, whole: bool) -> None:
        self.model, self.batch_size = model, batch_size
        self.rows: dict[int, int] = {}
        self.vectors = None
        self.seconds = 0.0
        if whole:
            self._add(range(model.vocab))

    def _add(self, tokens: Iterable[int]) -> None:
        import torch

        new = [t for t in tokens if t not in self.rows]
        if not new:
            return
        t0 = time.perf_counter()
        v = self.model.cache_table(None, tokens=new, batch_size=self.batch_size).weight
        self.vectors = v if self.vectors is None else torch.cat([self.vectors, v])
        self.rows.update(zip(new, range(len(self.rows), len(self.rows) + len(new))))
        self.seconds += time.perf_counter() - t0

    def mean(self, rows: Sequence[Sequence[int]]):
        """[len(rows), H]: each document's mean token vector (zeros for an empty one)."""
        from harness.methods.lightretriever.ops import mean_rows

        self._add(sorted({t for r in rows for t in r}))
        return mean_rows(self.vectors, [[self.rows[t] for t in r] for r in rows])

    def paid(self) -> None:
        """Record the table's seconds as paid once (:func:`harness.cost.paid_once`)."""
        if self.rows:
            cost.paid_once(self.seconds, len(self.rows), self.model.vocab)


def encode_corpus(model: LightModel, s: Mapping[str, Any], texts: Iterable[str], *, sparse: bool,
                  n: int | None = None):
    """Dense document vectors [N, H] (normalised) and, with ``sparse``, the sparse vectors as a CSR
    matrix [N, V] (float32, before quantisation); counts truncated documents (of those encoded).
    Under a rehearsal's cost probe (``probe_documents`` n > 0) the first n documents (whole batches) are
    encoded and the others take copies of their vectors, cycled, so that the index is built and searched
    at the corpus's count; their seconds are projected at the encoded ones' mean
    (:func:`harness.cost.probe_encoded`, meta.json ``cost.probe``); a light document side's token-vector
    table (:class:`DocTable`) is priced apart, paid once (meta.json ``cost.paid_once``). ``texts``: a sequence,
    or an iterable read a batch at a time with ``n`` its length (a corpus streamed from its file): each
    batch is tokenised as it comes and its vectors written into one preallocated array (MS MARCO's
    8.8M passages: their token ids as Python lists were ~25 GB, and the dense batches beside their
    concatenation twice the 67 GiB of vectors); a count other than ``n`` fails."""
    import scipy.sparse as sps

    torch = torch_for(s)
    bs = int(s["encode_batch_size"])
    maxlen = int(s["p_max_len"])
    prefix = model.prompt_ids(None)
    if n is None:
        texts = texts if isinstance(texts, Sequence) else list(texts)
        n = len(texts)
    i, truncated = 0, 0
    dense_m, rows_sp = None, []
    probe, encoded, copied = int(s.get("probe_documents") or 0), None, None
    # a pass of the table's packed rows (1,024 positions) holds about a document batch's positions
    table = DocTable(model, max(1, bs // 2), whole=not probe) if s["dense_doc"] == "light" else None
    t0 = time.perf_counter()
    with torch.inference_mode():
        for batch in counted_batches(texts, n, bs, "encode corpus (lightretriever)", "text"):
            if probe and i >= probe and dense_m is not None:   # a probe: copies of the encoded documents' vectors
                if encoded is None:
                    encoded, seconds = i, time.perf_counter() - t0 - (table.seconds if table else 0.0)
                    copied = sps.vstack(rows_sp).tocsr() if rows_sp else None
                src = np.arange(i, i + len(batch)) % encoded
                dense_m[i:i + len(batch)] = dense_m[src]
                if copied is not None:
                    rows_sp.append(copied[src])
                i += len(batch)
                continue
            full_ids = model.tok([" " + t for t in batch], add_special_tokens=False)["input_ids"]
            truncated += sum(len(x) > maxlen for x in full_ids)
            rows = [list(x[:maxlen]) for x in full_ids]
            if s["dense_doc"] == "light" and not (sparse and s["sparse_doc"] == "full"):
                h = mask = None
            else:
                h, mask = model.forward(prefix, rows)
            if table is not None:
                v = torch.nn.functional.normalize(table.mean(rows).float(), dim=-1).cpu().numpy()
            else:
                v = model.eos_pool(h, mask).cpu().numpy()
            if dense_m is None:
                dense_m = np.empty((n, v.shape[1]), np.float32)
            dense_m[i:i + len(batch)] = v
            i += len(batch)
            if sparse:
                if s["sparse_doc"] == "full":
                    w = model.sparse_vectors(h, mask, len(prefix))
                else:
                    w = model.counts(rows)
                cap = s.get("sparse_doc_terms")
                if cap and w.shape[1] > int(cap):   # each document's top terms (the rehearsal's random weights)
                    top = w.topk(int(cap), dim=1)
                    w = torch.zeros_like(w).scatter_(1, top.indices, top.values)
                rows_sp.append(sps.csr_matrix(w.cpu().numpy()))
    if encoded is not None:
        cost.probe_encoded(seconds, encoded, n)
    if table is not None:
        table.paid()
    if dense_m is None:
        dense_m = np.zeros((0, model.hidden), np.float32)
    sp_m = sps.vstack(rows_sp).tocsr() if rows_sp else None
    return dense_m, sp_m, truncated


def impacts(row, scale: float) -> dict[str, int]:
    """A sparse row as Lucene impacts {token id: round(w * scale)} (zero weights dropped)."""
    out = {}
    for j, w in zip(row.indices.tolist(), row.data.tolist()):
        q = round(w * scale)
        if q > 0:
            out[str(j)] = q
    return out


def build_index(cfg: Mapping[str, Any], inputs: Mapping[str, Path], out: Path, *, sparse: bool) -> dict[str, Any]:
    """Encode the corpus of ``inputs["data"]`` with the model of ``inputs["model"]`` once: the dense
    index and, with ``sparse``, the impact index and the float sparse matrix, all in ``out``."""
    import scipy.sparse as sps

    from harness.indexes import parse_spec
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.indexes.lucene import LUCENE_DIR, build_impact
    from harness.meta import folder_bytes

    s = settings(cfg)
    device = encode_device(s)
    model = LightModel.load(inputs["model"], device)
    autocast, precision = encode_autocast(s, device)
    if sparse:
        pyserini_env.start_jvm()  # the JVM the impact index is built in starts here, with the start-up
    startup_done()  # the rest is per document (python -m harness estimate)
    ms = model.s
    ids: list[str] = []
    texts = (doc_text(d) for d in store.iter_corpus(inputs["data"], ids))   # read as encoded (MS MARCO: ~10 GiB)
    t0 = time.perf_counter()
    with autocast:
        dense, sp, truncated = encode_corpus(model, merged(s, {k: ms[k] for k in ("dense_doc", "sparse_doc")}),
                                             texts, sparse=sparse, n=store.corpus_size(inputs["data"]))
    t_enc = time.perf_counter() - t0
    spec = s["index"]
    index = DenseFaissIndex.build(parse_spec(spec)[1], dense)
    (out / DENSE_DIR).mkdir()
    index.save(out / DENSE_DIR)
    write_docids(out / DENSE_DIR, ids)
    info: dict[str, Any] = {"spec": spec, "documents": len(ids), "dim": int(dense.shape[1]),
                            "truncated_documents": truncated, "p_max_len": int(s["p_max_len"]),
                            "encode_seconds": round(t_enc, 3), "encode_precision": precision,
                            "probe_documents": int(s.get("probe_documents") or 0),
                            "sparse_doc_terms": s.get("sparse_doc_terms"),
                            "dense_bytes": int(index.nbytes)}
    if sparse:
        scale = float(s["impact_scale"])
        t1 = time.perf_counter()
        (out / SPARSE_DIR).mkdir()
        n = build_impact(((i, impacts(sp[r], scale)) for r, i in enumerate(ids)), out / SPARSE_DIR / LUCENE_DIR)
        write_docids(out / SPARSE_DIR, ids)
        sps.save_npz(out / SPARSE_NPZ, sp.astype(np.float32))
        nnz = np.diff(sp.indptr)
        info.update({"sparse_spec": "lucene:impact", "sparse_documents_indexed": n,
                     "sparse_build_seconds": round(time.perf_counter() - t1, 3),
                     "sparse_terms_mean": float(nnz.mean()) if len(nnz) else 0.0,
                     "sparse_bytes": folder_bytes(out / SPARSE_DIR)})
    return info
