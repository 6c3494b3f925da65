"""DensePhrases' phrase index and span search (Eq. 10), backend ``phrase:<factory>``.

What the paper says (Lee et al. 2021, §5, footnote 8, App. E): a MIPS index over the rows of the
phrase dump H (one vector per kept token; start and end vectors of a token are the same vector),
IVF with 1,048,576 lists and 4-bit scalar quantisation ("IVFSQ4", inner product), nprobe 256.
Search (Eq. 10): ``argmax_{i,j} (H q_start)_i + (H q_end)_j`` over phrases ``s(i, j)`` with
``i <= j < i + L``, done as top-k start and top-k end MIPS plus a constrained search over the
matching end and start positions.

What the authors' code does (first public release, ``MIPS.search_phrase``): both halves searched
in one faiss call; for each start candidate i, the ends ``i .. i + L - 1`` of the same passage
(length checked on pre-filter token positions, ``f2o``), for each end candidate j the starts
``j - L + 1 .. j``; the retrieved side keeps its MIPS score, the other side is scored exactly on
the dump's dequantised vectors; each candidate keeps only its best partner. Their released index is
``OPQ96,IVF...,PQ96x8`` (inner product), its coarse quantiser trained on a 20% sample (seed 29).

What is done here:

- Specs: ``phrase:Flat`` (exact, the reference), ``phrase:IVF<nlist>,SQ4`` (the paper),
  ``phrase:OPQ<m>,IVF<nlist>,PQ<m>x<nbits>`` (the release; ``OPQ<m>_<d>`` with d = the vector
  dimension is accepted and read back as written). Built with ``faiss.index_factory(d, factory,
  METRIC_INNER_PRODUCT)``; the spec is read back from the faiss object (reverse_index_factory).
  IVF-PQ's polysemous training is switched off: it only permutes the codebook, plain search gives
  the same ranking, and it made training ~6x slower here.
- Training: a uniform sample of ``train_fraction`` (default 0.2) of all token vectors, without
  replacement, seeded (default 29), optionally capped at ``max_train``; the authors sample 20% of
  the documents and then 20% of each one's vectors with replacement (~4% of all vectors). Too few
  training vectors for ``nlist`` (or for PQ's 2**nbits centroids) is a ConfigError, never a
  silent change of nlist; only where the job may take fallbacks (``device_fallback``: the rehearsal,
  whose slices hold a few hundred thousand token vectors where 1,048,576 lists need a million) is
  nlist lowered to the paper's list size (:data:`PAPER_LIST_SIZE` vectors a list), recorded in the
  job's meta.json ``fallbacks`` and in ``phrase.json``, and an index so built loads only where
  fallbacks are allowed too. Vectors are added in dump order, so faiss ids = dump rows.
- Span search: top-k start rows (q_start) and top-k end rows (q_end) by MIPS (one faiss call, as
  the authors); every candidate contributes all its valid partners (ends ``i..i+L-1`` / starts
  ``j-L+1..j`` that are dump rows of the same passage with pre-filter positions less than L apart),
  the (start, end) pairs are deduplicated and scored *exactly*: start score = H[i] . q_start, end
  score = H[j] . q_end, both on the dump's decoded vectors (the approximate MIPS score is not
  used, so IVF-SQ4/PQ only decide which candidates are found); the best ``top_phrases`` per
  question are returned. Differences from the authors' code, on purpose: both sides exact, all
  partners kept (not only each candidate's best), the length limit ``pos[j] - pos[i] < L`` (the
  paper's i <= j < i + L; their f2o check allows one more).
- ``nbytes`` counts the faiss index only (the dump stays on disk, memory-mapped); the saved index
  folder records the dump's absolute path and the sha256 of its ``dump.json``, and refuses to load
  when the dump is missing or was rewritten.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import faiss
import numpy as np
from faiss.contrib.factory_tools import reverse_index_factory

from harness.datasets.download import sha256_of
from harness.errors import ConfigError, DataError
from harness.indexes.faiss_dense import faiss_nbytes
from harness.indexes.phrase_dump import DUMP_JSON, PhraseDump

INDEX_FILE = "index.faiss"
PHRASE_JSON = "phrase.json"
#: the paper's nprobe (footnote 8), the authors' max answer length L and training sample
NPROBE = 256
MAX_PHRASE_LEN = 10
TRAIN_FRACTION = 0.2
TRAIN_SEED = 29
#: vectors an IVF list of the paper's index holds: 770M kept token vectors (App. E) in 1,048,576 lists
PAPER_LIST_SIZE = 734
KNOWN_SPECS = ("Flat", "IVF1048576,SQ4", "OPQ96,IVF1048576,PQ96x8", "IVF4096,SQ4", "OPQ96,IVF4096,PQ96x8")
FORMS = "phrase:Flat, phrase:IVF<nlist>,SQ4 (the paper) or phrase:OPQ<m>,IVF<nlist>,PQ<m>x<nbits> (the release)"
_IVF_SQ = re.compile(r"^IVF(\d+),SQ4$")
_OPQ_PQ = re.compile(r"^OPQ(\d+)(?:_(\d+))?,IVF(\d+),PQ(\d+)x(\d+)$")
_ADD_CHUNK = 1 << 16


class Phrase(NamedTuple):
    """One retrieved phrase: dump rows of its first and last token, its passage (doc row) and the
    exact scores (``score = start_score + end_score``)."""

    score: float
    start_row: int
    end_row: int
    doc_row: int
    start_score: float
    end_score: float


def _parse(factory: str) -> dict[str, Any]:
    """The parts of a valid factory; ConfigError (allowed forms, closest match) otherwise."""
    from harness.indexes import bad_spec

    spec = f"phrase:{factory}"
    known = [f"phrase:{s}" for s in KNOWN_SPECS]
    if factory == "Flat":
        return {"kind": "flat"}
    m = _IVF_SQ.match(factory)
    if m:
        nlist = int(m.group(1))
        if nlist < 1:
            raise bad_spec(spec, "nlist must be >= 1", known, FORMS)
        return {"kind": "ivfsq", "nlist": nlist}
    m = _OPQ_PQ.match(factory)
    if m:
        m_opq, d_out, nlist, m_pq, nbits = m.groups()
        if int(m_opq) != int(m_pq):
            raise bad_spec(spec, f"OPQ{m_opq} and PQ{m_pq} must have the same number of sub-quantizers",
                           known, FORMS)
        if int(nlist) < 1 or int(m_pq) < 1 or not 1 <= int(nbits) <= 16:
            raise bad_spec(spec, "need nlist >= 1, m >= 1 and 1 <= nbits <= 16", known, FORMS)
        return {"kind": "opq", "nlist": int(nlist), "m": int(m_pq), "nbits": int(nbits),
                "d_out": None if d_out is None else int(d_out)}
    why = "not one of the phrase index forms"
    if re.match(r"^IVF\d+,SQ\d+", factory):
        why = "the phrase backend takes SQ4 only (the paper's 4-bit scalar quantiser)"
    elif re.match(r"^(OPQ\d+(_\d+)?,)?IVF\d+,PQ\d+$", factory):
        why = "write the PQ bits explicitly (PQ<m>x<nbits>, e.g. PQ96x8)"
    elif re.match(r"^IVF\d+,PQ\d+", factory):
        why = "the PQ form is the authors' release, with an OPQ rotation first (OPQ<m>,IVF<nlist>,PQ<m>x<nbits>)"
    raise bad_spec(spec, why, known, FORMS)


def _readback(index: faiss.Index, factory: str, dim: int) -> str:
    """The factory string of a built faiss index (``OPQ<m>_<dim>`` shortened to ``OPQ<m>`` unless
    ``factory`` spells the dimension); a non-inner-product metric makes it differ on purpose."""
    try:
        back = reverse_index_factory(index)
    except NotImplementedError:
        back = f"<{type(faiss.downcast_index(index)).__name__}>"
        pre = faiss.downcast_index(index)
        # faiss writes an OPQMatrix as a plain LinearTransform: read back from a file, the OPQ
        # rotation of OPQ<m>,IVF..,PQ<m>x<b> is a square LinearTransform before an IndexIVFPQ
        if isinstance(pre, faiss.IndexPreTransform) and pre.chain.size() == 1:
            vt = faiss.downcast_VectorTransform(pre.chain.at(0))
            inner = faiss.downcast_index(pre.index)
            if type(vt) is faiss.LinearTransform and vt.d_in == vt.d_out and isinstance(inner, faiss.IndexIVFPQ):
                back = f"OPQ{inner.pq.M}_{vt.d_out},{reverse_index_factory(inner)}"
    if "_" not in factory.split(",", 1)[0]:
        back = re.sub(rf"^OPQ(\d+)_{dim},", r"OPQ\1,", back)
    if faiss.downcast_index(index).metric_type != faiss.METRIC_INNER_PRODUCT:
        back += "(not inner product)"
    return back


def coarse_assign(centroids: np.ndarray, q: np.ndarray, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
    """The IVF coarse step as one BLAS product and a top-``nprobe`` selection: (inner products [B, nprobe]
    best first, list ids [B, nprobe] int64). Same lists as faiss's IndexFlatIP quantiser (ties aside),
    but the product runs in numpy's BLAS: faiss-cpu 1.15's bundled OpenBLAS (0.3.15) took 4.7x as long
    for 128 queries x 1,048,576 centroids on this machine (``bench phrase-search`` prints both)."""
    from harness.indexes.blas import topk_inner_product

    return topk_inner_product(q, centroids, nprobe)


def _as_queries(q: np.ndarray, what: str) -> np.ndarray:
    q = np.ascontiguousarray(q, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2:
        raise ValueError(f"{what} must be a [B, d] array, got shape {q.shape}")
    return q


class PhraseIndex:
    """A faiss MIPS index over a phrase dump's token vectors plus the dump itself (memory-mapped)
    for exact span scoring and for mapping rows to passages and characters (see the module doc)."""

    def __init__(self, index: faiss.Index, factory: str, dump: PhraseDump, *, max_phrase_len: int = MAX_PHRASE_LEN,
                 nprobe: int | None = NPROBE, train: Mapping[str, Any] | None = None) -> None:
        self.index = index
        self.factory = factory
        self.dump = dump
        self.parts = _parse(factory)
        self.max_phrase_len = _check_len(max_phrase_len)
        self.train_info = dict(train or {})
        #: threads for the per-question span step of :meth:`rank_spans` (default: faiss's OpenMP threads)
        self.threads = max(1, int(faiss.omp_get_max_threads() or os.cpu_count() or 1))
        self._nprobe: int | None = None
        self._coarse: tuple[Any, list, np.ndarray] | None = None   # (IVF, pre-transforms, centroids), on first search
        if self.parts["kind"] != "flat":
            self.nprobe = NPROBE if nprobe is None else nprobe

    # --- building -------------------------------------------------------------------------------

    @classmethod
    def build(cls, factory: str, dump: PhraseDump | str | Path, *, nprobe: int | None = NPROBE,
              train_fraction: float = TRAIN_FRACTION, seed: int = TRAIN_SEED, max_phrase_len: int = MAX_PHRASE_LEN,
              max_train: int | None = None, opq_niter: int | None = None) -> PhraseIndex:
        """Build ``phrase:<factory>`` over ``dump`` (a :class:`PhraseDump` or its folder).

        ``nprobe`` (IVF lists searched, default the paper's 256; ignored by Flat), ``train_fraction``
        and ``seed`` (the training sample), ``max_train`` (cap on it), ``max_phrase_len`` (L, tokens),
        ``opq_niter`` (OPQ training iterations; default faiss's 50)."""
        if not isinstance(dump, PhraseDump):
            dump = PhraseDump.open(dump)
        parts = _parse(factory)
        where = f"phrase:{factory}"
        _check_len(max_phrase_len)
        if nprobe is not None and (not isinstance(nprobe, (int, np.integer)) or nprobe < 1):
            raise ConfigError(f"{where}: nprobe must be an integer >= 1, got {nprobe!r}")
        if not 0 < float(train_fraction) <= 1:
            raise ConfigError(f"{where}: train_fraction must be in (0, 1], got {train_fraction!r}")
        if max_train is not None and int(max_train) < 1:
            raise ConfigError(f"{where}: max_train must be >= 1, got {max_train!r}")
        d, n = dump.dim, dump.ntotal
        if parts["kind"] == "opq":
            if d % parts["m"]:
                raise ConfigError(f"{where}: the dump's dim {d} is not a multiple of m = {parts['m']}",
                                  fix=f"use an m that divides {d} (the release: OPQ96/PQ96 for d = 768)")
            if parts["d_out"] is not None and parts["d_out"] != d:
                raise ConfigError(f"{where}: OPQ{parts['m']}_{parts['d_out']} changes the dimension; the phrase "
                                  f"backend keeps d = {d}", fix=f"write OPQ{parts['m']} (or OPQ{parts['m']}_{d})")
        configured = factory
        if parts["kind"] != "flat":
            factory = _fit_nlist(factory, parts, n, _train_count(n, train_fraction, max_train), where)
            parts = _parse(factory)
        try:
            index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            msg = str(exc).strip().splitlines()[-1]
            raise ConfigError(f"{where}: faiss cannot build it for d = {d} ({msg})", fix=f"use {FORMS}") from None
        back = _readback(index, factory, d)
        if back != factory:
            raise ConfigError(f"{where} builds an index that reads back as 'phrase:{back}'",
                              fix=f"spell the spec 'phrase:{back}'")
        train: dict[str, Any] = {"fraction": float(train_fraction), "seed": int(seed), "vectors": 0,
                                 "max_train": max_train, "opq_niter": opq_niter}
        if factory != configured:
            train["nlist_fallback"] = {"configured": f"phrase:{configured}", "built": f"phrase:{factory}"}
        if parts["kind"] != "flat":
            ivf = faiss.extract_index_ivf(index)
            if parts["kind"] == "opq":
                faiss.downcast_index(ivf).do_polysemous_training = False
                if opq_niter is not None:
                    faiss.downcast_VectorTransform(index.chain.at(0)).niter = int(opq_niter)
            n_train = _train_count(n, train_fraction, max_train)
            need = parts["nlist"]
            what = f"IVF{parts['nlist']} needs at least {parts['nlist']:,} (one per list)"
            pq_need = max(256, 2 ** parts["nbits"]) if parts["kind"] == "opq" else 0  # OPQ trains an 8-bit PQ
            if pq_need > need:
                need = pq_need
                what = (f"OPQ{parts['m']} / PQ{parts['m']}x{parts['nbits']} need at least {need:,} "
                        f"(one per sub-quantizer centroid)")
            if n_train < need:
                raise ConfigError(
                    f"{where}: {n_train:,} training vectors ({float(train_fraction):g} of the dump's {n:,} token "
                    f"vectors{'' if max_train is None else f', capped at {max_train:,}'}) but {what}; nlist is "
                    f"not changed silently",
                    fix=f"use a smaller nlist in the profile (at most {n_train:,} here; the paper's lists hold "
                        f"~734 vectors, i.e. nlist ~ {max(1, n // 734):,} for {n:,} vectors) or a larger "
                        f"train_fraction")
            rows = np.random.default_rng(int(seed)).choice(n, n_train, replace=False)
            sample = dump.vectors(np.sort(rows))
            try:
                index.train(sample)
            except RuntimeError as exc:
                msg = str(exc).strip().splitlines()[-1]
                raise ConfigError(f"{where}: training on {n_train:,} vectors failed ({msg})",
                                  fix="use a smaller nlist in the profile or a larger train_fraction") from None
            del sample
            train["vectors"] = n_train
        for _, chunk in dump.iter_chunks(_ADD_CHUNK):
            index.add(chunk)
        if index.ntotal != n:
            raise DataError(f"{where}: added {index.ntotal:,} vectors but the dump holds {n:,}")
        return cls(index, factory, dump, max_phrase_len=max_phrase_len, nprobe=nprobe, train=train)

    # --- properties -----------------------------------------------------------------------------

    @property
    def spec(self) -> str:
        return f"phrase:{_readback(self.index, self.factory, self.dim)}"

    @property
    def built_in_place_of(self) -> str | None:
        """The spec this index was asked to build where a recorded fallback built it otherwise (the
        rehearsal's lowered nlist: ``train_info["nlist_fallback"]``), else None."""
        return _built_in_place_of(self.train_info, self.spec)

    @property
    def nbytes(self) -> int:
        """Bytes the faiss index holds in memory (:func:`faiss_nbytes`); the dump is not counted."""
        return faiss_nbytes(self.index)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def nlist(self) -> int | None:
        return None if self.parts["kind"] == "flat" else int(faiss.extract_index_ivf(self.index).nlist)

    @property
    def nprobe(self) -> int | None:
        """The IVF lists searched per query (None for Flat); faiss searches min(nprobe, nlist)."""
        return self._nprobe

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        if self.parts["kind"] == "flat":
            return
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"phrase:{self.factory}: nprobe must be an integer >= 1, got {value!r}")
        self._nprobe = int(value)
        ivf = faiss.extract_index_ivf(self.index)
        ivf.nprobe = min(int(value), int(ivf.nlist))

    # --- search ---------------------------------------------------------------------------------

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Plain MIPS over the token vectors: (scores [B, k], dump rows [B, k]), best first; faiss's
        scores (approximate for SQ4/PQ); rows -1 where fewer than k were found."""
        queries = _as_queries(queries, "queries")
        if queries.shape[1] != self.dim:
            raise ValueError(f"phrase:{self.factory}: queries have {queries.shape[1]} dims, the index {self.dim}")
        if k < 1:
            raise ValueError(f"phrase:{self.factory}: k must be >= 1, got {k}")
        return self._faiss_search(queries, int(min(k, self.ntotal)))

    def _faiss_search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss's search; for IVF indexes with a flat coarse quantiser, the coarse step is
        :func:`coarse_assign` (numpy's BLAS) and the lists are scanned by ``search_preassigned``
        (OPQ: the rotation applied first), which gives faiss's own results."""
        if self.parts["kind"] == "flat":
            return self.index.search(q, k)
        if self._coarse is None:
            ivf = faiss.extract_index_ivf(self.index)
            quant = faiss.downcast_index(ivf.quantizer)
            if not isinstance(quant, faiss.IndexFlat) or quant.metric_type != faiss.METRIC_INNER_PRODUCT:
                return self.index.search(q, k)
            chain = []
            if isinstance(self.index, faiss.IndexPreTransform):
                chain = [faiss.downcast_VectorTransform(self.index.chain.at(i)) for i in range(self.index.chain.size())]
            centroids = faiss.rev_swig_ptr(quant.get_xb(), quant.ntotal * quant.d).reshape(quant.ntotal, quant.d)
            self._coarse = (ivf, chain, centroids)
        ivf, chain, centroids = self._coarse
        for vt in chain:
            q = vt.apply(q)
        dis, lists = coarse_assign(centroids, np.ascontiguousarray(q, dtype=np.float32), ivf.nprobe)
        mode = ivf.parallel_mode
        ivf.parallel_mode = 3   # split the queries over faiss's threads (mode 0 scans on one thread when called directly)
        try:
            return ivf.search_preassigned(q, k, lists, dis)
        finally:
            ivf.parallel_mode = mode

    def mips(self, q_start: np.ndarray, q_end: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k start rows for ``q_start`` and top-k end rows for ``q_end`` (one faiss call, as the
        authors): two int64 arrays [B, k], -1 where fewer were found."""
        q_start, q_end = self._check_pair(q_start, q_end)
        if k < 1:
            raise ValueError(f"phrase:{self.factory}: k must be >= 1, got {k}")
        _, rows = self._faiss_search(np.concatenate([q_start, q_end], axis=0), int(min(k, self.ntotal)))
        b = len(q_start)
        return rows[:b], rows[b:]

    def search_phrases(self, q_start: np.ndarray, q_end: np.ndarray, k: int, top_phrases: int = 10,
                       max_phrase_len: int | None = None) -> list[list[Phrase]]:
        """Eq. 10: the best ``top_phrases`` phrases per question, best first (see the module doc):
        top-k start and end candidates by MIPS, their partners within L tokens of the same passage,
        every pair scored exactly on the dump."""
        q_start, q_end = self._check_pair(q_start, q_end)
        start_rows, end_rows = self.mips(q_start, q_end, k)
        return self.rank_spans(q_start, q_end, start_rows, end_rows, top_phrases, max_phrase_len)

    def span_candidates(self, start_rows: np.ndarray, end_rows: np.ndarray,
                        max_phrase_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The valid (start, end) dump-row pairs of one question's candidates, deduplicated and
        sorted by (start, end): ends i..i+L-1 of each start candidate i, starts j-L+1..j of each end
        candidate j, kept when both rows are in the same passage and ``pos[j] - pos[i] < L``."""
        L = _check_len(self.max_phrase_len if max_phrase_len is None else max_phrase_len)
        n = self.dump.ntotal
        s = np.asarray(start_rows, dtype=np.int64).reshape(-1)
        e = np.asarray(end_rows, dtype=np.int64).reshape(-1)
        s, e = s[s >= 0], e[e >= 0]
        t = np.arange(L, dtype=np.int64)
        i = np.concatenate([np.repeat(s, L), (e[:, None] - t[None, :]).reshape(-1)])
        j = np.concatenate([(s[:, None] + t[None, :]).reshape(-1), np.repeat(e, L)])
        ok = (i >= 0) & (j < n)
        i, j = i[ok], j[ok]
        key = np.unique(i * L + (j - i))
        i, j = key // L, key // L + key % L
        if i.size:
            doc, pos = self.dump.doc_rows, self.dump.positions
            ok = (doc[i] == doc[j]) & (pos[j].astype(np.int64) - pos[i] < L)
            i, j = i[ok], j[ok]
        return i, j

    def rank_spans(self, q_start: np.ndarray, q_end: np.ndarray, start_rows: np.ndarray, end_rows: np.ndarray,
                   top_phrases: int = 10, max_phrase_len: int | None = None) -> list[list[Phrase]]:
        """The constrained, exact part of Eq. 10 for given MIPS candidates ([B, k] rows each)."""
        q_start, q_end = self._check_pair(q_start, q_end)
        if top_phrases < 1:
            raise ValueError(f"phrase:{self.factory}: top_phrases must be >= 1, got {top_phrases}")
        start_rows, end_rows = np.atleast_2d(start_rows), np.atleast_2d(end_rows)
        if len(start_rows) != len(q_start) or len(end_rows) != len(q_start):
            raise ValueError(f"phrase:{self.factory}: {len(q_start)} questions but candidates for "
                             f"{len(start_rows)} / {len(end_rows)}")
        def one(b: int) -> list[Phrase]:
            i, j = self.span_candidates(start_rows[b], end_rows[b], max_phrase_len)
            if not i.size:
                return []
            rows = np.unique(np.concatenate([i, j]))
            both = self.dump.dot(rows, np.stack([q_start[b], q_end[b]]))  # [r, 2]: start, end scores
            s_sc = both[np.searchsorted(rows, i), 0]
            e_sc = both[np.searchsorted(rows, j), 1]
            total = s_sc + e_sc
            sel = np.arange(total.size)
            if total.size > top_phrases:  # keep ties at the cut so the order below is exact
                cut = np.partition(total, total.size - top_phrases)[total.size - top_phrases]
                sel = np.nonzero(total >= cut)[0]
            order = sel[np.lexsort((j[sel], i[sel], -total[sel]))][:top_phrases]
            docs = self.dump.doc_rows[i[order]]
            return [Phrase(float(total[o]), int(i[o]), int(j[o]), int(dr), float(s_sc[o]), float(e_sc[o]))
                    for o, dr in zip(order, docs)]

        workers = min(len(q_start), self.threads)
        if workers <= 1:
            return [one(b) for b in range(len(q_start))]
        with ThreadPoolExecutor(max_workers=workers) as pool:  # numpy releases the GIL in the heavy parts
            return list(pool.map(one, range(len(q_start))))

    def _check_pair(self, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q_start, q_end = _as_queries(q_start, "q_start"), _as_queries(q_end, "q_end")
        if q_start.shape[1] != self.dim or q_end.shape[1] != self.dim:
            raise ValueError(f"phrase:{self.factory}: q_start has {q_start.shape[1]} dims and q_end "
                             f"{q_end.shape[1]}; the index holds {self.dim}-dim vectors")
        if len(q_start) != len(q_end):
            raise ValueError(f"phrase:{self.factory}: {len(q_start)} start but {len(q_end)} end query vectors")
        return q_start, q_end

    # --- phrases to text ------------------------------------------------------------------------

    def doc_of(self, phrase: Phrase) -> str:
        """The id of the passage a phrase comes from."""
        return self.dump.docids[int(phrase.doc_row)]

    def char_span(self, phrase: Phrase) -> tuple[int, int]:
        """[start, end) characters of the phrase in its passage's text."""
        return int(self.dump.offsets[phrase.start_row][0]), int(self.dump.offsets[phrase.end_row][1])

    def answer_text(self, phrase: Phrase, passage_text: Mapping[str, str] | Callable[[str], str]) -> str:
        """The phrase's text: its character span cut from the passage text (``passage_text`` maps or
        returns a passage id's text)."""
        docid = self.doc_of(phrase)
        text = passage_text(docid) if callable(passage_text) else passage_text[docid]
        a, b = self.char_span(phrase)
        if b > len(text):
            raise DataError(f"phrase rows {phrase.start_row}..{phrase.end_row} end at character {b} but passage "
                            f"{docid!r} has {len(text)}", fix="pass the texts the dump was written from")
        return text[a:b]

    # --- persistence ----------------------------------------------------------------------------

    def save(self, folder: Path) -> Path:
        """Write ``index.faiss`` and ``phrase.json`` (spec, nprobe, L, training sample, the dump's
        absolute path and dump.json sha256) to ``folder``; returns the faiss file."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / INDEX_FILE
        faiss.write_index(self.index, str(path))
        info = {"spec": self.spec, "factory": self.factory, "nprobe": self._nprobe,
                "max_phrase_len": self.max_phrase_len, "ntotal": self.ntotal, "dim": self.dim,
                "train": self.train_info,
                "dump": {"path": str(self.dump.folder.resolve()), "dump_json_sha256": self.dump.json_sha256,
                         "tokens": self.dump.ntotal, "codec": self.dump.codec}}
        (folder / PHRASE_JSON).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: Path, factory: str, *, nprobe: int | None = None,
             dump: PhraseDump | str | Path | None = None) -> PhraseIndex:
        """Load an index saved by :meth:`save`; ``nprobe`` overrides the saved one; ``dump`` points at a
        moved dump (its dump.json must still match the recorded hash)."""
        folder = Path(folder)
        jpath = folder / PHRASE_JSON
        if not jpath.is_file() or not (folder / INDEX_FILE).is_file():
            raise DataError(f"{folder}: {PHRASE_JSON} or {INDEX_FILE} is missing", fix="rebuild the phrase index")
        try:
            info = json.loads(jpath.read_text(encoding="utf-8"))
            saved_spec, rec = str(info["spec"]), dict(info["dump"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"{jpath}: unreadable ({exc})", fix="rebuild the phrase index") from None
        fell = (info.get("train") or {}).get("nlist_fallback") or {}
        as_configured = _built_in_place_of(info.get("train") or {}, saved_spec) == f"phrase:{factory}"
        if saved_spec != f"phrase:{factory}" and not as_configured:
            raise DataError(f"{jpath} records {saved_spec!r} but the index is loaded as 'phrase:{factory}'",
                            fix="rebuild the index, or load it with its recorded spec")
        if fell:  # built with a lowered nlist (the rehearsal): read only where fallbacks are allowed, recorded
            from harness.cost import fallback

            if not fallback(f"{fell.get('configured')}: searched as built, {saved_spec} (too few training vectors "
                            "for its nlist)"):
                raise DataError(f"{jpath}: the index was built as {saved_spec} in place of {fell.get('configured')!r} "
                                "(a rehearsal's fallback: its slice had too few vectors to train that nlist)",
                                fix="rebuild it without device_fallback, or search it with device_fallback: true")
            factory = saved_spec.removeprefix("phrase:")
        index = faiss.read_index(str(folder / INDEX_FILE))
        back = _readback(index, factory, int(index.d))
        if back != factory:
            raise DataError(f"{folder / INDEX_FILE} reads back as 'phrase:{back}' but {jpath} says {saved_spec!r}",
                            fix="rebuild the phrase index")
        dump_dir = Path(rec["path"]) if dump is None else (dump.folder if isinstance(dump, PhraseDump) else Path(dump))
        if not (dump_dir / DUMP_JSON).is_file():
            raise DataError(f"{folder}: its phrase dump {dump_dir} is missing (no {DUMP_JSON})",
                            fix=f"restore the dump at {dump_dir} (or pass its new folder as dump=) or rebuild")
        sha = sha256_of(dump_dir / DUMP_JSON)
        if sha != rec.get("dump_json_sha256"):
            raise DataError(f"{folder}: the phrase dump {dump_dir} changed since the index was built "
                            f"({DUMP_JSON} sha256 {sha[:12]} vs recorded {str(rec.get('dump_json_sha256'))[:12]})",
                            fix="rebuild the phrase index over the current dump")
        pd = dump if isinstance(dump, PhraseDump) else PhraseDump.open(dump_dir)
        if pd.ntotal != index.ntotal or pd.dim != index.d:
            raise DataError(f"{folder}: the index holds {index.ntotal:,} x {index.d} but the dump {dump_dir} "
                            f"{pd.ntotal:,} x {pd.dim}", fix="rebuild the phrase index over the current dump")
        saved_nprobe = info.get("nprobe")
        return cls(index, factory, pd, max_phrase_len=int(info.get("max_phrase_len", MAX_PHRASE_LEN)),
                   nprobe=saved_nprobe if nprobe is None else nprobe, train=info.get("train"))


def _train_count(n: int, train_fraction: float, max_train: int | None) -> int:
    """Vectors of the coarse quantizer's training sample: ``train_fraction`` of ``n``, capped."""
    n_train = min(n, max(1, math.ceil(float(train_fraction) * n)))
    return n_train if max_train is None else min(n_train, int(max_train))


def _built_in_place_of(train: Mapping[str, Any], built: str) -> str | None:
    """The configured spec of a recorded nlist fallback (``train["nlist_fallback"]``) whose built spec
    is ``built``, else None: what :attr:`PhraseIndex.built_in_place_of` and loading both read."""
    fell = train.get("nlist_fallback") or {}
    return str(fell["configured"]) if fell.get("built") == built and fell.get("configured") else None


def _fit_nlist(factory: str, parts: Mapping[str, Any], n: int, n_train: int, where: str) -> str:
    """``factory`` as it is, or, where its nlist needs more training vectors than ``n_train`` and the
    job may take fallbacks (the rehearsal), with nlist lowered to the paper's list size (``n`` /
    :data:`PAPER_LIST_SIZE`, at most one list per training vector), recorded; else unchanged (the
    build then fails naming the numbers)."""
    nlist = int(parts["nlist"])
    new = max(1, min(n_train, n // PAPER_LIST_SIZE))
    if n_train >= nlist or new == nlist:
        return factory
    from harness.cost import fallback

    if not fallback(f"{where}: nlist {nlist:,} -> {new:,}: {n_train:,} training vectors cannot train {nlist:,} "
                    f"lists; {new:,} keep the paper's ~{PAPER_LIST_SIZE} vectors a list over the dump's {n:,} (the "
                    f"coarse quantizer's k-means at {nlist:,} lists is not timed)"):
        return factory
    return re.sub(rf"IVF{nlist}(?=,)", f"IVF{new}", factory, count=1)


def _check_len(L: Any) -> int:
    if not isinstance(L, (int, np.integer)) or L < 1:
        raise ConfigError(f"max_phrase_len (L) must be an integer >= 1, got {L!r}")
    return int(L)


class PhraseBackend:
    """Backend ``phrase``: a :class:`PhraseDump` (or its folder) -> :class:`PhraseIndex`."""

    name = "phrase"

    @staticmethod
    def check_spec(part: str) -> None:
        """Validate ``phrase:<part>`` by its grammar (no data needed)."""
        _parse(part)

    @staticmethod
    def build(part: str, payload: PhraseDump | str | Path, **options: Any) -> PhraseIndex:
        """:meth:`PhraseIndex.build` (options: nprobe, train_fraction, seed, max_phrase_len, max_train,
        opq_niter); ``nprobe=None`` means the paper's 256."""
        return PhraseIndex.build(part, payload, **options)

    @staticmethod
    def load(folder: Path, part: str, *, nprobe: int | None = None,
             dump: PhraseDump | str | Path | None = None) -> PhraseIndex:
        """:meth:`PhraseIndex.load`; ``nprobe`` overrides the saved value."""
        return PhraseIndex.load(folder, part, nprobe=nprobe, dump=dump)
