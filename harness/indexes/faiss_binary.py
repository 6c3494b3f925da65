"""Binary-code indexes built with faiss (spec ``faiss-binary:<factory>``) and BPR's two-stage search.

Specs are faiss's binary factory strings, read back after building by :func:`binary_factory_string`
(faiss's ``reverse_index_factory`` knows no binary index):

- ``BFlat``: ``IndexBinaryFlat`` — exhaustive Hamming scan (BPR's "linear scan").
- ``BHash<b>``: ``IndexBinaryHash(d, b)`` — one hash table keyed on the first ``b`` bits; a query visits
  the buckets within ``nflip`` bits of its key (``nflip`` is a keyword option, faiss's default 0).
  BPR's "hash table lookup" is ``BHash768`` with ``nflip=0``, exactly what the authors ran
  (``IndexBinaryHash(d, 768)``). Faiss keys buckets on at most 64 bits; for ``b > 64`` the key is not
  a hash of the first ``b`` bits: faiss 1.15.1 ORs the code's 64-bit words together (observed), and
  faiss's older source computes the key as ``*(uint64_t*)code & ((1 << b) - 1)``, a mask that x86
  evaluates to 0 for b = 768 (shift count mod 64), i.e. one bucket for everything (inferred for the
  authors' faiss 1.6.5, not run). With balanced bits ~98% of codes share the all-ones key under the
  OR, so ``BHash768`` is in effect a linear scan of (nearly) the whole collection with a per-query
  heap — not the radius-growing lookup of the paper's Sec. 3.5 — and the ~2% of queries whose key
  is rare see only a small bucket (fewer than l candidates).
  ``nflip > 0`` is refused for ``b > 64`` (faiss's flip enumerator is undefined there).
- ``BHash<n>x<b>``: ``IndexBinaryMultiHash(d, n, b)`` — multi-index hashing (Norouzi et al.):
  ``n`` tables on consecutive ``b``-bit substrings, union of their buckets within ``nflip``, then an
  exact Hamming check of that shortlist. Exact for neighbours within ``n * (nflip + 1) - 1`` bits.

Bit order everywhere is numpy's ``packbits`` of ``e > 0`` (the authors' code): dimension ``8j + t``
is bit ``7 - t`` of byte ``j``; a set bit stands for +1, a clear bit for -1.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import faiss
import numpy as np

from harness.errors import ConfigError

INDEX_FILE = "index.faissb"
KNOWN_SPECS = ("BFlat", "BHash768", "BHash64", "BHash16", "BHash12x64", "BHash48x16")
_SPEC = re.compile(r"^(?:BFlat|BHash(\d+)|BHash(\d+)x(\d+))$")
#: 256 x 8 table: the {0, 1} bits of every byte value, in packbits order.
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32)


def binarize(e: np.ndarray) -> np.ndarray:
    """BPR's hash layer at inference: sign(e) packed to bits (1 where e > 0), uint8 [n, d/8]."""
    e = np.asarray(e)
    if e.ndim != 2 or e.shape[1] % 8:
        raise ConfigError(f"binarize: embeddings must be 2-d with a multiple of 8 columns, got {e.shape}")
    return np.packbits(e > 0, axis=1)


def unpack_pm1(codes: np.ndarray) -> np.ndarray:
    """Packed codes -> float32 {-1, +1} matrix [n, 8 * code_size] (bit 1 -> +1, 0 -> -1)."""
    return np.unpackbits(np.asarray(codes, dtype=np.uint8), axis=1).astype(np.float32) * 2.0 - 1.0


def _check_codes(codes: np.ndarray, what: str, code_size: int | None = None) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise ConfigError(f"{what} must be a 2-d uint8 array of packed bits, got {codes.dtype} {codes.shape}")
    if code_size is not None and codes.shape[1] != code_size:
        raise ConfigError(f"{what} have {codes.shape[1]} bytes per code, the index has {code_size}")
    return np.ascontiguousarray(codes)


def _bad_spec(spec: str, why: str) -> ConfigError:
    close = difflib.get_close_matches(spec, KNOWN_SPECS, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ConfigError(
        f"faiss-binary:{spec}: {why}{hint}",
        fix="use BFlat, BHash<b> or BHash<nhash>x<b> (faiss binary factory strings)",
    )


def binary_factory_string(index: faiss.IndexBinary) -> str:
    """The factory string of a binary index (faiss's reverse_index_factory covers float indexes only)."""
    if isinstance(index, faiss.IndexBinaryFlat):
        return "BFlat"
    if isinstance(index, faiss.IndexBinaryHash):
        return f"BHash{index.b}"
    if isinstance(index, faiss.IndexBinaryMultiHash):
        return f"BHash{index.nhash}x{index.b}"
    raise ConfigError(f"binary index of type {type(index).__name__} has no spec in this backend")


def _make(spec: str, d: int) -> faiss.IndexBinary:
    m = _SPEC.match(spec)
    if not m:
        raise _bad_spec(spec, "not a supported binary index spec")
    b, nhash, b_multi = m.groups()
    if b is not None and not 1 <= int(b) <= d:
        raise _bad_spec(spec, f"hash bits must be in 1..{d}")
    if nhash is not None and (int(nhash) < 1 or not 1 <= int(b_multi) <= 64 or int(nhash) * int(b_multi) > d):
        raise _bad_spec(spec, f"multi-hash needs 1 <= b <= 64 and nhash * b <= {d}")
    return faiss.index_binary_factory(d, spec)  # already the concrete type; downcasting would drop ownership


class BinaryFaissIndex:
    """A faiss index over packed binary codes; search returns Hamming distances (smaller is nearer)."""

    def __init__(self, index: faiss.IndexBinary, spec: str) -> None:
        self.index = index
        self.spec = spec

    @classmethod
    def build(cls, spec: str, codes: np.ndarray, *, nflip: int = 0) -> BinaryFaissIndex:
        """Build ``spec`` over ``codes`` (uint8 [n, d/8]); ``nflip`` applies to the hash specs only."""
        codes = _check_codes(codes, f"faiss-binary:{spec}: codes")
        index = _make(spec, codes.shape[1] * 8)
        back = binary_factory_string(index)
        if back != spec:
            raise _bad_spec(spec, f"builds an index whose spec reads back as {back!r}; use that spelling")
        out = cls(index, spec)
        out.set_nflip(nflip)
        out.index.add(codes)
        return out

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def code_size(self) -> int:
        return int(self.index.code_size)

    @property
    def is_hash(self) -> bool:
        return isinstance(self.index, (faiss.IndexBinaryHash, faiss.IndexBinaryMultiHash))

    def set_nflip(self, nflip: int) -> None:
        """Hamming radius of the bucket probe (hash specs); must stay 0 for BFlat and for b > 64."""
        if nflip == getattr(self.index, "nflip", 0):
            return
        if not self.is_hash:
            raise ConfigError(f"faiss-binary:{self.spec}: nflip applies to BHash specs only")
        if not 0 <= nflip <= min(self.index.b, 64) or (nflip and self.index.b > 64):
            raise ConfigError(
                f"faiss-binary:{self.spec}: nflip={nflip} is out of range",
                fix="use 0 <= nflip <= b, and 0 when b > 64 (faiss keys buckets on at most 64 bits)",
            )
        self.index.nflip = nflip

    def stored_codes(self) -> np.ndarray | None:
        """The codes a linear scan (BFlat) holds, row i the i-th added, as a read-only view of the
        index's own memory (no copy: valid while this object lives); None for an index that does not
        keep them in row order (the hash specs)."""
        if not isinstance(self.index, faiss.IndexBinaryFlat):
            return None
        n, size = self.ntotal, self.code_size
        if n == 0:
            return np.zeros((0, size), np.uint8)
        view = faiss.rev_swig_ptr(self.index.xb.data(), n * size).reshape(n, size)
        view.flags.writeable = False
        return view

    def search(self, codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (Hamming distances int32, row ids int64), nearest first; -1 ids where fewer were found."""
        codes = _check_codes(codes, f"faiss-binary:{self.spec}: query codes", self.code_size)
        if k < 1:
            raise ConfigError(f"faiss-binary:{self.spec}: k must be >= 1, got {k}")
        return self.index.search(codes, min(k, self.ntotal))

    def save(self, folder: Path) -> Path:
        path = Path(folder) / INDEX_FILE
        faiss.write_index_binary(self.index, str(path))
        return path

    @classmethod
    def load(cls, folder: Path, spec: str) -> BinaryFaissIndex:
        index = faiss.read_index_binary(str(Path(folder) / INDEX_FILE))
        back = binary_factory_string(index)
        if back != spec:
            raise ConfigError(f"{folder}: the saved index is faiss-binary:{back}, not faiss-binary:{spec}")
        return cls(index, spec)


def rerank_scores(query_dense: np.ndarray, cand_codes: np.ndarray) -> np.ndarray:
    """<q, ±1 code> for each query and each of its candidates: [B, d] x [B, l, d/8] -> [B, l].

    Computed with a per-query table of partial sums (96 byte lookups per candidate instead of
    768 multiply-adds); equal to ``einsum(q, unpack_pm1(code))`` up to float rounding.
    """
    B, nbytes = query_dense.shape[0], cand_codes.shape[-1]
    # lut[b, j, v] = sum of q_b over the dimensions whose bit is set in value v of byte j
    lut = (query_dense.reshape(B, nbytes, 8) @ _BYTE_BITS.T).reshape(-1)
    itype = np.int32 if lut.size < 2**31 else np.int64
    offsets = np.arange(B, dtype=itype)[:, None, None] * (nbytes * 256) + np.arange(nbytes, dtype=itype) * 256
    idx = cand_codes.astype(itype)
    idx += offsets
    bits_dot = lut[idx].sum(axis=2)
    return 2.0 * bits_dot - query_dense.sum(axis=1, keepdims=True)


def _rerank_all(query_dense: np.ndarray, passage_codes: np.ndarray, k: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    heap = faiss.ResultHeap(query_dense.shape[0], k, keep_max=True)
    for start in range(0, passage_codes.shape[0], chunk):
        block = unpack_pm1(passage_codes[start : start + chunk])
        kk = min(k, block.shape[0])
        D, I = faiss.knn(query_dense, block, kk, metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(np.ascontiguousarray(D), np.ascontiguousarray(I + start))
    heap.finalize()
    return heap.D, heap.I


def two_stage_search(
    index: BinaryFaissIndex | None,
    query_codes: np.ndarray | None,
    query_dense: np.ndarray,
    passage_codes: np.ndarray,
    k: int,
    n_candidates: int | None = 1000,
    rerank: bool = True,
    query_batch: int = 16,
) -> tuple[np.ndarray, np.ndarray]:
    """BPR retrieval: top-``n_candidates`` by Hamming distance, then rerank by <q_dense, ±1 code>.

    Returns (scores float32 [B, k'], row ids int64 [B, k']), best first, k' = min(k, candidates).
    Scores are the inner products <q_dense, ±1 code> when reranking. With ``rerank=False``
    the top-k come straight from the Hamming search (as the authors' code does) and scores are
    *negative* Hamming distances, so that higher is better everywhere. With ``n_candidates=None``
    there is no candidate generation: every passage is reranked (``index`` and ``query_codes``
    are then unused). Ids are -1 (score -inf) where a hash index found fewer candidates than k'.
    """
    query_dense = np.ascontiguousarray(query_dense, dtype=np.float32)
    passage_codes = _check_codes(passage_codes, "passage codes")
    if query_dense.ndim != 2 or query_dense.shape[1] != passage_codes.shape[1] * 8:
        raise ConfigError(
            f"query embeddings must be [B, {passage_codes.shape[1] * 8}] to match the codes, got {query_dense.shape}"
        )
    if k < 1:
        raise ConfigError(f"two_stage_search: k must be >= 1, got {k}")
    n = passage_codes.shape[0]
    if n_candidates is None:
        if not rerank:
            raise ConfigError("two_stage_search: n_candidates=None (no candidate generation) needs rerank=True")
        D, I = _rerank_all(query_dense, passage_codes, min(k, n), chunk=1 << 16)
        return D.astype(np.float32), I.astype(np.int64)
    if index is None or query_codes is None:
        raise ConfigError("two_stage_search: candidate generation needs an index and query codes")
    if index.ntotal != n:
        raise ConfigError(f"the index holds {index.ntotal} codes but {n} passage codes were given")
    query_codes = _check_codes(query_codes, "query codes", index.code_size)
    if query_codes.shape[0] != query_dense.shape[0]:
        raise ConfigError(f"{query_codes.shape[0]} query codes but {query_dense.shape[0]} query embeddings")
    if n_candidates < 1:
        raise ConfigError(f"two_stage_search: n_candidates must be >= 1, got {n_candidates}")
    if not rerank:
        D, I = index.search(query_codes, min(k, n_candidates))
        return -D.astype(np.float32), I
    _, cand = index.search(query_codes, n_candidates)
    return rerank_candidates(cand, query_dense, passage_codes, k, query_batch=query_batch)


def rerank_candidates(
    cand: np.ndarray,
    query_dense: np.ndarray,
    passage_codes: np.ndarray,
    k: int,
    *,
    query_batch: int = 16,
) -> tuple[np.ndarray, np.ndarray]:
    """BPR's second stage: order each query's candidate ids by <q_dense, ±1 code>, keep the top k.

    ``cand`` is int64 [B, l] (-1 for missing candidates, which are dropped to the end with score
    -inf). Returns (scores float32 [B, min(k, l)], ids int64), best first.
    """
    query_dense = np.ascontiguousarray(query_dense, dtype=np.float32)
    if cand.ndim != 2 or cand.shape[0] != query_dense.shape[0]:
        raise ConfigError(f"candidates {cand.shape} do not match {query_dense.shape[0]} queries")
    kk = min(k, cand.shape[1])
    out_s = np.empty((cand.shape[0], kk), dtype=np.float32)
    out_i = np.empty((cand.shape[0], kk), dtype=np.int64)
    for s in range(0, cand.shape[0], query_batch):
        c = cand[s : s + query_batch]
        scores = rerank_scores(query_dense[s : s + query_batch], passage_codes[np.maximum(c, 0)])
        scores[c < 0] = -np.inf
        if kk < c.shape[1]:
            top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        else:
            top = np.broadcast_to(np.arange(c.shape[1]), c.shape)
        top_s = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-top_s, axis=1, kind="stable")
        out_s[s : s + query_batch] = np.take_along_axis(top_s, order, axis=1)
        out_i[s : s + query_batch] = np.take_along_axis(np.take_along_axis(c, top, axis=1), order, axis=1)
    return out_s, out_i


# --------------------------------------------------------------------------------------------
# the uniform backend interface (harness.indexes)
# --------------------------------------------------------------------------------------------
FORMS = "BFlat, BHash<b> or BHash<nhash>x<b> (faiss binary factory strings; e.g. faiss-binary:BFlat)"


def binary_nbytes(index: faiss.IndexBinary) -> int:
    """Bytes a binary index holds in memory: the codes (BFlat), codes + 8-byte ids in the buckets
    (BHash), the stored codes + one 8-byte id per table and code (multi-hash); container overhead
    is not counted."""
    n, cs = int(index.ntotal), int(index.code_size)
    if isinstance(index, faiss.IndexBinaryFlat):
        return int(index.xb.size())
    if isinstance(index, faiss.IndexBinaryHash):
        return n * (cs + 8)
    if isinstance(index, faiss.IndexBinaryMultiHash):
        return n * cs + int(index.nhash) * n * 8
    return int(faiss.serialize_index_binary(index).nbytes)


class BinaryFaissAdapter:
    """A :class:`BinaryFaissIndex` behind the uniform interface: ``search`` returns *negative* Hamming
    distances as float32 (higher is better, as everywhere in :mod:`harness.indexes`), -inf for rows -1."""

    def __init__(self, index: BinaryFaissIndex) -> None:
        self.index = index

    @property
    def spec(self) -> str:
        """``faiss-binary:<factory>`` read back from the faiss object."""
        return f"faiss-binary:{binary_factory_string(self.index.index)}"

    @property
    def nbytes(self) -> int:
        return binary_nbytes(self.index.index)

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def save(self, folder: Path) -> Path:
        return self.index.save(folder)

    def search(self, codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (-Hamming distance float32, row ids int64) for packed query codes, nearest first."""
        D, I = self.index.search(codes, k)
        scores = -D.astype(np.float32)
        scores[I < 0] = -np.inf
        return scores, I


class FaissBinaryBackend:
    """Backend ``faiss-binary``: packed binary codes uint8 [n, d/8], Hamming search."""

    name = "faiss-binary"

    @staticmethod
    def check_spec(part: str) -> None:
        """Validate ``faiss-binary:<part>`` without data (built empty on a large enough d, read back)."""
        from harness.indexes import bad_spec

        spec = f"faiss-binary:{part}"
        known = [f"faiss-binary:{s}" for s in KNOWN_SPECS]
        m = _SPEC.match(part)
        if not m:
            raise bad_spec(spec, "not a supported binary index spec", known, FORMS)
        b, nhash, b_multi = m.groups()
        if b is not None and int(b) < 1:
            raise bad_spec(spec, "BHash<b> needs b >= 1 hash bits", known, FORMS)
        if nhash is not None and (int(nhash) < 1 or not 1 <= int(b_multi) <= 64):
            raise bad_spec(spec, "BHash<nhash>x<b> needs nhash >= 1 and 1 <= b <= 64", known, FORMS)
        bits = int(b) if b else int(nhash) * int(b_multi) if nhash else 8
        index = _make(part, max(768, -(-bits // 8) * 8))  # d is only known at build time: any d >= bits
        back = binary_factory_string(index)
        if back != part:
            raise ConfigError(f"index spec {spec!r} reads back as 'faiss-binary:{back}'; "
                              f"did you mean 'faiss-binary:{back}'?", fix="use the spelling faiss reads back")

    @staticmethod
    def build(part: str, payload: np.ndarray, *, nflip: int = 0) -> BinaryFaissAdapter:
        """:meth:`BinaryFaissIndex.build` over packed codes; ``nflip`` for the hash specs."""
        return BinaryFaissAdapter(BinaryFaissIndex.build(part, payload, nflip=nflip))

    @staticmethod
    def load(folder: Path, part: str, *, nflip: int | None = None) -> BinaryFaissAdapter:
        """:meth:`BinaryFaissIndex.load`; ``nflip`` overrides the saved probe radius (hash specs)."""
        index = BinaryFaissIndex.load(folder, part)
        if nflip is not None:
            index.set_nflip(nflip)
        return BinaryFaissAdapter(index)
