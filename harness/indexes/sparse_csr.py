"""Sparse float embedding index (spec ``sparse-csr``): SVDR's embedding index E_θ(D).

The passages' sparse vocabulary-space vectors are one scipy CSR matrix [n_docs, vocab] (float32,
``embeddings.npz``, uncompressed) with ``docids.txt`` beside it (row order). Search is exact:
``q @ E.T`` by sparse matrix products against a [vocab, n_docs] CSR made once (the paper uses
torch.sparse; the same scores), then the top k of each row by :func:`topk_rows`.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import read_docids, write_docids
from harness.errors import ConfigError, DataError

INDEX_FILE = "embeddings.npz"


#: the most query x document scores a search holds at once (float32: 1 GiB)
SCORES_MAX_ELEMENTS = 1 << 28


class SparseEmbeddingIndex:
    """E_θ(D) as a scipy CSR [n_docs, vocab] float32 (spec ``sparse-csr``); exact inner-product
    top-k by sparse matrix products (the paper uses torch.sparse; same scores)."""

    def __init__(self, matrix, docids: list[str]) -> None:
        self.matrix = matrix.tocsr()
        self.docids = docids
        self._by_dim = None  # [vocab, n_docs] CSR, made once (format conversion stays outside timed searches)

    @property
    def by_dim(self):
        if self._by_dim is None:
            self._by_dim = self.matrix.T.tocsr()
        return self._by_dim

    @property
    def nbytes(self) -> int:
        m = self.matrix
        return int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)

    @property
    def spec(self) -> str:
        """``sparse-csr`` when the matrix is a 2-d scipy CSR of floats (the spec has no part)."""
        import scipy.sparse as sp

        m = self.matrix
        if not sp.issparse(m) or m.format != "csr" or m.ndim != 2 or m.dtype.kind != "f":
            raise ConfigError(f"sparse-csr index holds {type(m).__name__} {getattr(m, 'dtype', '')}, "
                              "not a float CSR matrix")
        return "sparse-csr"

    @property
    def ntotal(self) -> int:
        return int(self.matrix.shape[0])

    def save(self, folder: Path) -> None:
        import scipy.sparse as sp

        sp.save_npz(Path(folder) / INDEX_FILE, self.matrix, compressed=False)
        write_docids(folder, self.docids)

    @classmethod
    def load(cls, folder: Path) -> SparseEmbeddingIndex:
        import scipy.sparse as sp

        path = Path(folder) / INDEX_FILE
        if not path.exists():
            raise DataError(f"{path} does not exist", fix="build the embedding index first: python -m harness index "
                            f"--job <method>.emb --dataset <key> --out {folder}")
        m = sp.load_npz(path).tocsr()
        return cls(m, read_docids(folder, expect=m.shape[0]))

    def search(self, queries, k: int, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of <query, E(d)> (scores desc, ties by lower row); queries: CSR [B, vocab]."""
        import scipy.sparse as sp

        q = sp.csr_matrix(queries, dtype=np.float32)
        if q.shape[1] != self.matrix.shape[1]:
            raise ConfigError(f"queries have {q.shape[1]} dims, the index {self.matrix.shape[1]}")
        ts = self.by_dim
        # a batch's dense scores are [batch, n_docs]: at NQ's 21M passages 256 queries were 21.5 GB (and
        # their sparse product more); batches shrink to hold at most SCORES_MAX_ELEMENTS (same scores)
        batch = max(1, min(batch, SCORES_MAX_ELEMENTS // max(1, ts.shape[1])))
        out_s, out_i = [], []
        for i in range(0, q.shape[0], batch):
            scores = (q[i : i + batch] @ ts).toarray()
            s_, i_ = topk_rows(scores, k)
            out_s.append(s_)
            out_i.append(i_)
        if not out_s:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return np.concatenate(out_s), np.concatenate(out_i)


def topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k of every row: scores desc, equal scores by the lower column; (-inf, -1) padding."""
    n_q, n = scores.shape
    kk = min(k, n)
    out_s = np.full((n_q, k), -np.inf, np.float32)
    out_i = np.full((n_q, k), -1, np.int64)
    for r in range(n_q):
        s = scores[r].astype(np.float32)
        if kk < n:
            kth = -np.partition(-s, kk - 1)[kk - 1]
            cand = np.concatenate([np.flatnonzero(s > kth), np.flatnonzero(s == kth)[: kk - int((s > kth).sum())]])
        else:
            cand = np.arange(n)
        order = np.lexsort((cand, -s[cand]))
        cand = cand[order]
        out_s[r, :kk] = s[cand]
        out_i[r, :kk] = cand
    return out_s, out_i


class SparseCSRBackend:
    """Backend ``sparse-csr``: a scipy sparse matrix [n_docs, vocab] -> :class:`SparseEmbeddingIndex`."""

    name = "sparse-csr"

    @staticmethod
    def check_spec(part: str) -> None:
        from harness.indexes import check_no_part

        check_no_part("sparse-csr", part)

    @staticmethod
    def build(part: str, payload: Any, *, docids: Sequence[str] | None = None) -> SparseEmbeddingIndex:
        """The index over ``payload`` (any scipy sparse [n_docs, vocab]; stored as float32 CSR);
        ``docids`` name the rows (default ``"0"``, ``"1"``, ...)."""
        import scipy.sparse as sp

        SparseCSRBackend.check_spec(part)
        if not sp.issparse(payload) or payload.ndim != 2:
            raise ConfigError(f"sparse-csr: the payload must be a 2-d scipy sparse matrix, got {type(payload).__name__}")
        matrix = sp.csr_matrix(payload, dtype=np.float32)
        ids = [str(i) for i in range(matrix.shape[0])] if docids is None else list(docids)
        if len(ids) != matrix.shape[0]:
            raise ConfigError(f"sparse-csr: {len(ids)} doc ids for {matrix.shape[0]} rows")
        return SparseEmbeddingIndex(matrix, ids)

    @staticmethod
    def load(folder: Path, part: str = "") -> SparseEmbeddingIndex:
        SparseCSRBackend.check_spec(part)
        return SparseEmbeddingIndex.load(folder)
