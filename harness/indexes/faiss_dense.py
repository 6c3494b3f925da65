"""Dense float indexes built with faiss from factory strings (spec ``faiss:<factory>``).

Every index answers maximum-inner-product search; ``search`` returns scores where higher is better.
Where the spec means something faiss's own factory would not build, it is ours, documented here:

- ``Flat``, ``PQ96x8``, ``IVF...`` and other factory strings: ``faiss.index_factory(d, spec,
  METRIC_INNER_PRODUCT)``; scores are (approximate, for PQ) inner products. After building,
  faiss's ``reverse_index_factory`` must give the spec back, so each index has one spelling
  (``PQ96`` is refused in favour of ``PQ96x8``). faiss's ``PQ96x8`` runs polysemous training
  (a codebook permutation for Hamming-compatible codes) that plain PQ search never uses: it made
  the build ~40x slower here for identical search results. ``PQ96x8np`` (faiss's suffix) skips
  it; the read-back appends ``np`` for it (faiss's reverse_index_factory does not know ``np``,
  and the flag is not saved, so ``load`` accepts either spelling).
- ``HNSW<M>`` (ours): the DPR/BPR authors' HNSW baseline — ``IndexHNSWFlat(d + 1, M)`` with L2
  over vectors augmented by one dimension, ``sqrt(max_norm^2 - ||x||^2)`` for documents and 0 for
  queries, which turns inner-product ranking into L2 ranking exactly. ``ef_construction`` (200) and
  ``ef_search`` (128) are keyword options with the authors' values. Scores are converted back to
  inner products: ``<q, x> = (||q||^2 + max_norm^2 - L2^2) / 2``. The round-trip check reads
  ``HNSW<M>`` back and also checks the L2 metric and the d + 1 dimensions.
- ``LSH[<nbits>][r][t]`` (ours where ``<nbits>`` is given): ``IndexLSH(d, nbits, rotate_data=r,
  train_thresholds=t)`` with ``nbits = d`` by default (768 bits for BERT-base, the paper's setting).
  The letters mean what they mean in faiss's factory (``LSH`` = sign of the first nbits dimensions,
  no rotation; ``LSHr`` = random rotation first, i.e. random-hyperplane LSH). faiss's factory
  builds LSH only with METRIC_L2, so the index is constructed directly. Scores are *negative
  Hamming distances* between the bit codes (higher is better); they are integers in float32.
"""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from faiss.contrib.factory_tools import reverse_index_factory

from harness.errors import ConfigError

INDEX_FILE = "index.faiss"
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
KNOWN_SPECS = (
    "Flat", "HNSW512", "HNSW32", "LSH", "LSHr", "LSH768", "LSH768r", "PQ96x8", "PQ96x8np", "PQ16x8np", "PQ32x4np",
    "IVF1048576,SQ4",
)
FORMS = ("a faiss factory string: Flat, HNSW<M>, LSH[<nbits>][r][t], PQ<M>x<nbits>[np], IVF<nlist>,SQ4, "
         "... (e.g. faiss:Flat)")
_HNSW = re.compile(r"^HNSW(\d+)$")
#: rows an HNSW index augments and adds at a time: the augmented copy of 21M x 769 floats would be
#: another 60 GiB beside the vectors and the graph (a corpus below it is added in one call, as before)
HNSW_ADD_CHUNK = 1 << 20
_LSH = re.compile(r"^LSH(\d*)(r?)(t?)$")


def _close(factory: str) -> str:
    close = difflib.get_close_matches(factory, KNOWN_SPECS, n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _as_matrix(vectors: np.ndarray, what: str) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] == 0:
        raise ConfigError(f"{what} must be a non-empty 2-d array, got shape {vectors.shape}")
    return vectors


def augment_docs(vectors: np.ndarray, max_sq_norm: float | None = None) -> tuple[np.ndarray, float]:
    """Append sqrt(max_norm^2 - ||x||^2) to every row: inner product becomes L2 (DPR/BPR's HNSW trick)."""
    sq = np.einsum("ij,ij->i", vectors, vectors)
    top = float(sq.max()) if max_sq_norm is None else max_sq_norm
    extra = np.sqrt(np.maximum(top - sq, 0.0)).astype(np.float32)
    return np.hstack([vectors, extra[:, None]]), top


def augment_queries(queries: np.ndarray) -> np.ndarray:
    """Append a 0 to every query (the query side of the inner-product-to-L2 transform)."""
    return np.hstack([queries, np.zeros((queries.shape[0], 1), dtype=np.float32)])


def _make(factory: str, d: int) -> faiss.Index:
    """The empty (untrained) index of a flat, IVF, PQ or LSH ``factory`` over ``d`` dimensions, its
    spelling checked by reading it back before any training (a misspelt spec fails fast)."""
    kind = _kind(factory)
    if kind == "lsh":
        index = _make_lsh(factory, d)
    else:
        try:
            index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            msg = str(exc).strip().splitlines()[-1]
            raise ConfigError(f"faiss factory string {factory!r} is not valid ({msg}){_close(factory)}") from None
    back = _lsh_spec(index, factory) if kind == "lsh" else _readback(index, factory)
    if back != factory:
        raise ConfigError(
            f"faiss:{factory} builds an index whose factory string reads back as {back!r}",
            fix=f"spell the spec {back!r}",
        )
    return index


class DenseFaissIndex:
    """A faiss index over float32 vectors answering inner-product search (see the module doc)."""

    def __init__(self, index: faiss.Index, factory: str, fixed_bytes: int | None = None) -> None:
        self.index = index
        self.factory = factory
        #: bytes of the built index that do not grow with the corpus (a PQ's codebooks, an LSH's
        #: thresholds; the trained index before any vector is added), where it was built here
        self.fixed_bytes = fixed_bytes
        self.kind = _kind(factory)
        self.max_sq_norm = 0.0
        if self.kind == "hnsw" and index.ntotal:
            # every augmented document has squared norm max_norm^2: read it back from the index
            self.max_sq_norm = float(np.square(index.reconstruct(0)).sum())

    @classmethod
    def build(
        cls,
        factory: str,
        vectors: np.ndarray,
        *,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        ef_search: int = HNSW_EF_SEARCH,
        train_size: int | None = None,
        seed: int = 0,
    ) -> DenseFaissIndex:
        """Build ``faiss:<factory>`` over ``vectors``; ``train_size`` caps the training sample (seeded)."""
        vectors = _as_matrix(vectors, f"faiss:{factory}: vectors")
        d = vectors.shape[1]
        kind = _kind(factory)
        if kind == "hnsw":
            M = int(_HNSW.match(factory).group(1))
            if M < 2 or ef_construction < 1 or ef_search < 1:
                raise ConfigError(f"faiss:{factory}: need M >= 2, ef_construction >= 1, ef_search >= 1")
            index = faiss.IndexHNSWFlat(d + 1, M)
            index.hnsw.efConstruction = ef_construction
            index.hnsw.efSearch = ef_search
            _check_hnsw(index, factory, d)
            fixed = len(faiss.serialize_index(index))
            top = float(np.einsum("ij,ij->i", vectors, vectors).max())  # every chunk's augmentation: one max
            for start in range(0, vectors.shape[0], HNSW_ADD_CHUNK):
                augmented, _ = augment_docs(vectors[start:start + HNSW_ADD_CHUNK], top)
                index.add(augmented)
                del augmented
            return cls(index, factory, fixed)
        index = _make(factory, d)
        if not index.is_trained:
            sample = vectors
            if train_size is not None and train_size < len(vectors):
                rows = np.random.default_rng(seed).choice(len(vectors), train_size, replace=False)
                sample = vectors[np.sort(rows)]
            try:
                index.train(sample)
            except RuntimeError as exc:
                msg = str(exc).strip().splitlines()[-1]
                raise ConfigError(
                    f"faiss:{factory}: training on {len(sample)} vectors failed ({msg})",
                    fix="give more vectors (PQ needs >= 256 per sub-quantizer) or choose another spec",
                ) from None
        fixed = len(faiss.serialize_index(index))  # trained, empty: what a larger corpus does not grow
        index.add(vectors)
        return cls(index, factory, fixed)

    @classmethod
    def build_batches(cls, factory: str, batches: Iterable[np.ndarray], **options: Any) -> DenseFaissIndex:
        """:meth:`build` over vectors given a batch at a time (an encoder's output as it comes): an index
        that needs no training and keeps no graph (``Flat``) adds each batch as it comes, so the corpus's
        vectors are never held beside the index's own copy (DPR's 21M x 768 float32: 60 GiB, not 120);
        any other spec collects the batches and builds as :meth:`build` (options: its keywords)."""
        it = iter(batches)
        first = next(it, None)
        if first is None:
            raise ConfigError(f"faiss:{factory}: vectors must be a non-empty 2-d array, got no batch")
        first = _as_matrix(first, f"faiss:{factory}: vectors")
        if _kind(factory) not in ("hnsw", "lsh"):
            index = _make(factory, first.shape[1])
            if index.is_trained:
                fixed = len(faiss.serialize_index(index))
                index.add(first)
                for batch in it:
                    index.add(_as_matrix(batch, f"faiss:{factory}: vectors"))
                return cls(index, factory, fixed)
        return cls.build(factory, np.concatenate([first, *(np.asarray(b, np.float32) for b in it)]), **options)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def spec(self) -> str:
        """``faiss:<factory>`` read back from the faiss object (reverse_index_factory, our HNSW/LSH).

        A PQ's polysemous-training flag is not saved by faiss, so ``np`` is taken from the spec the
        index was built or loaded with when the rest reads back equal."""
        if self.kind == "hnsw":
            back = reverse_index_factory(self.index)
            if self.index.metric_type != faiss.METRIC_L2:
                back += "(inner-product metric)"  # not our HNSW: makes the read-back differ
        elif self.kind == "lsh":
            back = _lsh_spec(self.index, self.factory) if isinstance(self.index, faiss.IndexLSH) else (
                reverse_index_factory(self.index))
        else:
            back = _readback(self.index, self.factory)
            if _strip_np(back) == _strip_np(self.factory):
                back = self.factory
        return f"faiss:{back}"

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays in memory (codes, graph links, lists), see :func:`faiss_nbytes`."""
        return faiss_nbytes(self.index)

    @property
    def dim(self) -> int:
        """Dimension of the vectors the caller passes (the HNSW index holds one more)."""
        return int(self.index.d) - (1 if self.kind == "hnsw" else 0)

    @property
    def ef_search(self) -> int | None:
        return int(self.index.hnsw.efSearch) if self.kind == "hnsw" else None

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        if self.kind != "hnsw":
            raise ConfigError(f"faiss:{self.factory}: ef_search applies to HNSW specs only")
        if value < 1:
            raise ConfigError(f"faiss:{self.factory}: ef_search must be >= 1, got {value}")
        self.index.hnsw.efSearch = int(value)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, row ids), best first; ids are -1 where fewer than k exist (see module doc)."""
        queries = _as_matrix(queries, f"faiss:{self.factory}: queries")
        if queries.shape[1] != self.dim:
            raise ConfigError(f"faiss:{self.factory}: queries have {queries.shape[1]} dims, the index {self.dim}")
        if k < 1:
            raise ConfigError(f"faiss:{self.factory}: k must be >= 1, got {k}")
        k = min(k, self.ntotal)
        if self.kind == "hnsw":
            D, I = self.index.search(augment_queries(queries), k)
            q_sq = np.einsum("ij,ij->i", queries, queries)[:, None]
            scores = 0.5 * (q_sq + self.max_sq_norm - D)
            return np.where(I >= 0, scores, -np.inf).astype(np.float32), I
        if self._flat_ip():
            from harness.indexes.blas import topk_inner_product

            return topk_inner_product(queries, self.stored_vectors(), k)  # exact, numpy's BLAS (indexes/blas.py)
        D, I = self.index.search(queries, k)
        if self.kind == "lsh":
            return -D, I
        return D, I

    def _flat_ip(self) -> bool:
        """An exact inner-product scan (``Flat``): searched as a numpy BLAS product, the same top-k as
        faiss's IndexFlatIP (ties aside) at numpy's BLAS speed (``bench flat-search``)."""
        return (self.factory == "Flat" and isinstance(self.index, faiss.IndexFlat)
                and self.index.metric_type == faiss.METRIC_INNER_PRODUCT and self.ntotal > 0)

    def stored_vectors(self) -> np.ndarray | None:
        """The database vectors exactly as added ([ntotal, dim] float32, a view) where the index keeps
        them uncompressed (``Flat``, inner product); None for a lossy or transformed index."""
        if not self._flat_ip():
            return None
        return faiss.rev_swig_ptr(self.index.get_xb(), self.ntotal * self.dim).reshape(self.ntotal, self.dim)

    def save(self, folder: Path) -> Path:
        path = Path(folder) / INDEX_FILE
        faiss.write_index(self.index, str(path))
        return path

    @classmethod
    def load(cls, folder: Path, factory: str) -> DenseFaissIndex:
        index = faiss.read_index(str(Path(folder) / INDEX_FILE))
        kind = _kind(factory)
        if kind == "hnsw":
            back = reverse_index_factory(index)
            if back != factory or index.metric_type != faiss.METRIC_L2:
                raise ConfigError(f"{folder}: the saved index is not faiss:{factory} (reads back as {back!r})")
        elif kind == "lsh":
            back = _lsh_spec(index, factory) if isinstance(index, faiss.IndexLSH) else reverse_index_factory(index)
            if back != factory:
                raise ConfigError(f"{folder}: the saved index is not faiss:{factory} (reads back as {back!r})")
        elif _readback(index, _strip_np(factory)).removesuffix("np") != _strip_np(factory):
            back = _readback(index, factory)
            raise ConfigError(f"{folder}: the saved index is faiss:{back}, not faiss:{factory}")
        return cls(index, factory)


def _readback(index: faiss.Index, factory: str) -> str:
    """reverse_index_factory, plus faiss's ``np`` suffix for a PQ built without polysemous training.

    Index types that reverse_index_factory cannot read (it raises NotImplementedError) are taken
    at their word: the round-trip check applies where faiss supports it.
    """
    try:
        back = reverse_index_factory(index)
    except NotImplementedError:
        return factory
    if isinstance(index, faiss.IndexPQ) and not index.do_polysemous_training:
        back += "np"
    return back


def _strip_np(factory: str) -> str:
    return factory[:-2] if re.match(r"^PQ\d+(x\d+)?np$", factory) else factory


def _kind(factory: str) -> str:
    if _HNSW.match(factory):
        return "hnsw"
    if factory.startswith("LSH"):
        if not _LSH.match(factory):
            raise ConfigError(f"faiss:{factory}: LSH specs read LSH[<nbits>][r][t]{_close(factory)}")
        return "lsh"
    return "factory"


def _lsh_bits(factory: str, d: int) -> int:
    digits = _LSH.match(factory).group(1)
    return int(digits) if digits else d


def _make_lsh(factory: str, d: int) -> faiss.IndexLSH:
    _, r, t = _LSH.match(factory).groups()
    nbits = _lsh_bits(factory, d)
    if nbits < 1 or (not r and nbits > d):
        raise ConfigError(f"faiss:{factory}: nbits must be in 1..{d} without rotation (r), got {nbits}")
    return faiss.IndexLSH(d, nbits, bool(r), bool(t))


def _lsh_spec(index: faiss.IndexLSH, factory: str) -> str:
    """Read an LSH index back in the spelling of ``factory``: faiss's letters, plus the bit count
    unless ``factory`` leaves it implicit (``LSH`` and ``LSH768`` are the same index when d = 768)."""
    letters = reverse_index_factory(index)[3:]
    implicit = not _LSH.match(factory).group(1) and index.nbits == index.d
    return "LSH" + ("" if implicit else str(index.nbits)) + letters


def _check_hnsw(index: faiss.IndexHNSWFlat, factory: str, d: int) -> None:
    back = reverse_index_factory(index)
    if back != factory or index.d != d + 1 or index.metric_type != faiss.METRIC_L2:
        raise ConfigError(f"faiss:{factory} built {back!r} with d={index.d}, metric {index.metric_type}")


def faiss_nbytes(index: faiss.Index) -> int:
    """Bytes a float faiss index holds in memory: its codes (flat, PQ, SQ, LSH), HNSW links, IVF
    lists (codes + 8-byte ids) and the PQ/quantizer tables; other types: the size of faiss's
    serialised form (the same arrays, written out; a copy is made)."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):  # the transforms' matrices are small: not counted
        return faiss_nbytes(index.index)
    if isinstance(index, faiss.IndexHNSW):
        h = index.hnsw
        return faiss_nbytes(index.storage) + 4 * (h.neighbors.size() + h.levels.size()) + 8 * h.offsets.size()
    if isinstance(index, faiss.IndexIVF):
        return int(index.ntotal) * (int(index.code_size) + 8) + faiss_nbytes(index.quantizer)
    if isinstance(index, faiss.IndexFlatCodes):
        extra = 4 * index.pq.centroids.size() if isinstance(index, faiss.IndexPQ) else 0
        return int(index.codes.size()) + extra
    return int(faiss.serialize_index(index).nbytes)


def _probe_dim(factory: str) -> int:
    """A small dimension every part of ``factory`` accepts (PQ<M>, PCA<n>, ... divide or fit it)."""
    d = 768
    for n in re.findall(r"(?:PQ|OPQ|PCA|PCAR|PCAW|PCAWR|RQ|LSQ)(\d+)", factory):
        d = math.lcm(d, int(n)) if int(n) <= 4096 else d
    return d


class FaissBackend:
    """Backend ``faiss``: dense float32 vectors [n, d], inner-product search (:class:`DenseFaissIndex`)."""

    name = "faiss"

    @staticmethod
    def check_spec(part: str) -> None:
        """Validate ``faiss:<part>`` without data: our HNSW/LSH by their grammar, the rest by building an
        untrained index with ``faiss.index_factory`` on a small d and reading it back."""
        from harness.indexes import bad_spec

        spec = f"faiss:{part}"
        known = [f"faiss:{s}" for s in KNOWN_SPECS]
        m = _HNSW.match(part)
        if m:
            if int(m.group(1)) < 2:
                raise bad_spec(spec, "HNSW needs M >= 2", known, FORMS)
            return
        if part.startswith("LSH"):
            if not _LSH.match(part):
                raise bad_spec(spec, "LSH specs read LSH[<nbits>][r][t]", known, FORMS)
            return
        try:
            index = faiss.index_factory(_probe_dim(part), part, faiss.METRIC_INNER_PRODUCT)
        except (RuntimeError, ValueError, TypeError) as exc:
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise bad_spec(spec, f"not a valid faiss factory string ({msg})", known, FORMS) from None
        back = _readback(index, part)
        if back != part:
            raise ConfigError(f"index spec {spec!r} builds an index that reads back as 'faiss:{back}'; "
                              f"did you mean 'faiss:{back}'?", fix="use the spelling faiss reads back (one per index)")

    @staticmethod
    def build(part: str, payload: np.ndarray, **options: Any) -> DenseFaissIndex:
        """:meth:`DenseFaissIndex.build` (options: ef_construction, ef_search, train_size, seed)."""
        return DenseFaissIndex.build(part, payload, **options)

    @staticmethod
    def load(folder: Path, part: str, *, ef_search: int | None = None) -> DenseFaissIndex:
        """:meth:`DenseFaissIndex.load`; ``ef_search`` overrides the saved HNSW search depth."""
        index = DenseFaissIndex.load(folder, part)
        if ef_search is not None:
            index.ef_search = ef_search
        return index
