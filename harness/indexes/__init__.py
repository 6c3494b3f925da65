"""Index backends, one module each, addressed by spec strings ``backend:spec``.

``faiss:Flat``, ``faiss:HNSW512``, ``faiss:LSH``, ``faiss:PQ96x8`` (faiss factory strings),
``faiss-binary:BFlat``, ``faiss-binary:BHash768``, ``token-csr``, ``sparse-csr``, ``lucene:bm25``,
``lucene:impact``, ``lucene:pretokenized`` (whitespace tokens indexed verbatim, searched with BM25),
``phrase:Flat``, ``phrase:IVF<nlist>,SQ4``, ``phrase:OPQ<m>,IVF<nlist>,PQ<m>x<nbits>`` (DensePhrases'
token-vector MIPS index over a phrase dump, with Eq. 10's span search: ``harness.indexes.phrase``).

One interface for every backend (why: the index stage, timing and size measurements treat every
variant alike, and an index folder is loaded from its ``meta.json`` alone). Each backend module
holds a class registered in :data:`BACKENDS` as ``"module:Class"`` (imported on first use: faiss
and pyserini are heavy) with three static methods:

- ``check_spec(part) -> None``: ConfigError naming the spec, its allowed forms and the closest match;
  needs no data.
- ``build(part, payload, **options) -> index``: the payload per backend is dense float32 vectors
  (``faiss``), packed binary codes (``faiss-binary``), token-id lists (``token-csr``), a scipy sparse
  matrix (``sparse-csr``), ``harness.datasets.Doc``s (``lucene:bm25``), ``(docid, {token: int
  weight})`` pairs (``lucene:impact``), ``(docid, "tok1 tok2 ...")`` pairs (``lucene:pretokenized``) or a
  ``harness.indexes.phrase_dump.PhraseDump`` (or its folder) (``phrase``).
- ``load(folder, part, **options) -> index``.

The index objects they return all have ``save(folder)``, ``search(queries, k)``, ``nbytes`` (bytes
held in memory) and ``spec`` (the full ``backend:spec`` string read back from the built object, not
echoed). ``search`` returns ``(scores, rows)`` — float arrays [B, k], higher is better, best first,
row -1 where fewer than k were found — except for Lucene, which returns hits per query
(``{qid: [(docid, score), ...]}``: Lucene keeps the doc ids itself).

The caller writes ``meta.json`` (:func:`harness.meta.write_meta` with the spec) after ``save``;
:func:`load_index` dispatches on it.
"""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConfigError, DataError, DependencyError
from harness.registry import Registry

# backend name -> "module:Class"; modules are imported on first use (faiss/pyserini are heavy).
BACKENDS: Registry[str] = Registry("index backend")
BACKENDS.add("faiss", "harness.indexes.faiss_dense:FaissBackend")
BACKENDS.add("faiss-binary", "harness.indexes.faiss_binary:FaissBinaryBackend")
BACKENDS.add("token-csr", "harness.indexes.token_csr:TokenCSRBackend")
BACKENDS.add("sparse-csr", "harness.indexes.sparse_csr:SparseCSRBackend")
BACKENDS.add("lucene", "harness.indexes.lucene:LuceneBackend")
BACKENDS.add("phrase", "harness.indexes.phrase:PhraseBackend")

#: backends whose spec has no part after the colon
NO_PART = frozenset({"token-csr", "sparse-csr"})
#: the pinned package to install when a backend's import fails (pyproject.toml)
_PIP = {"faiss": "faiss-cpu==1.15.1", "scipy": "scipy==1.17.1", "pyserini": "pyserini==1.6.0",
        "numba": "numba==0.68.1", "jnius": "pyjnius==1.9.0"}


@runtime_checkable
class Index(Protocol):
    """What every backend's index object offers (see the module doc)."""

    @property
    def spec(self) -> str: ...

    @property
    def nbytes(self) -> int: ...

    def save(self, folder: Path) -> Any: ...

    def search(self, queries: Any, k: int) -> Any: ...


class Backend(Protocol):
    """What every registered backend class offers (static methods; see the module doc)."""

    name: str

    @staticmethod
    def check_spec(part: str) -> None: ...

    @staticmethod
    def build(part: str, payload: Any, **options: Any) -> Index: ...

    @staticmethod
    def load(folder: Path, part: str, **options: Any) -> Index: ...


def did_you_mean(name: str, known: Iterable[str], cutoff: float = 0.5) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` (full spec strings), or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def bad_spec(spec: str, why: str, known: Iterable[str], forms: str) -> ConfigError:
    """The ConfigError for an invalid spec: the spec, why, the closest known spec, the allowed forms."""
    return ConfigError(f"index spec {spec!r}: {why}{did_you_mean(spec, known)}", fix=f"use {forms}")


def check_no_part(backend: str, part: str) -> None:
    """For backends whose spec is their name alone (``token-csr``, ``sparse-csr``)."""
    if part:
        raise bad_spec(f"{backend}:{part}", f"the {backend} backend takes no spec part", [backend],
                       f"'{backend}' alone")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``backend:spec`` into its two parts; ``token-csr`` and ``sparse-csr`` have no spec part."""
    if not isinstance(spec, str):
        raise ConfigError(f"index spec must be a string like 'faiss:Flat', got {spec!r}")
    backend, _, rest = spec.partition(":")
    if backend not in BACKENDS:
        close = difflib.get_close_matches(backend, BACKENDS.names(), n=1, cutoff=0.5)
        hint = f"; did you mean {(close[0] + (':' + rest if rest else ''))!r}?" if close else ""
        raise ConfigError(f"index spec {spec!r}: unknown backend {backend!r}{hint}",
                          fix=f"use one of the backends {', '.join(BACKENDS.names())}")
    if not rest and backend not in NO_PART:
        raise ConfigError(f"index spec {spec!r} has no part after ':' (e.g. 'faiss:Flat', 'lucene:bm25')")
    return backend, rest


def canonical_spec(spec: str) -> str:
    """The one spelling of ``spec`` that built indexes read back (``token-csr:`` -> ``token-csr``)."""
    backend, part = parse_spec(spec)
    return f"{backend}:{part}" if part else backend


def get_backend(name: str) -> Any:
    """The backend class registered as ``name``; a missing package fails with what to install."""
    module, _, attr = BACKENDS.get(name).partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        raise DependencyError(f"index backend {name!r} needs the package {missing or exc}",
                              fix=f"pip install {_PIP.get(missing, missing)}") from None


def check_spec(spec: str, where: str | None = None) -> None:
    """Validate a full spec string without data; ``where`` (e.g. a config key) prefixes the error."""
    try:
        backend, part = parse_spec(spec)
        get_backend(backend).check_spec(part)
    except ConfigError as exc:
        if where:
            raise ConfigError(f"{where}: {exc}") from None
        raise


def build_index(spec: str, payload: Any, **options: Any) -> Index:
    """Build ``spec`` over ``payload`` (see the module doc); the built index must read back as ``spec``,
    or say it was built in place of ``spec`` (``built_in_place_of``: a fallback the backend recorded, as
    the rehearsal's lowered nlist of a phrase index; its ``spec`` is then what was built)."""
    check_spec(spec)
    backend, part = parse_spec(spec)
    index = get_backend(backend).build(part, payload, **options)
    want = canonical_spec(spec)
    if index.spec != want and getattr(index, "built_in_place_of", None) != want:
        raise ConfigError(f"index spec {spec!r} built an index that reads back as {index.spec!r}",
                          fix=f"spell the spec {index.spec!r}")
    return index


def load_index(folder: Path, **options: Any) -> Index:
    """Load the index in ``folder``, dispatching on ``folder/meta.json``'s ``spec``; ``options`` go to
    the backend's loader (e.g. ``ef_search`` for HNSW, ``nflip`` for hash specs, ``k1``/``b`` for BM25
    and pretokenized)."""
    from harness.meta import META, read_meta

    folder = Path(folder)
    if not (folder / META).is_file():
        raise DataError(f"{folder / META} does not exist", fix="rebuild the index (its folder is incomplete)")
    spec = read_meta(folder).get("spec")
    if not spec:
        raise DataError(f"{folder / META} has no 'spec'", fix="rebuild the index with the current harness")
    try:
        check_spec(spec)
    except ConfigError as exc:
        raise DataError(f"{folder / META}: {exc}", fix="rebuild the index") from None
    backend, part = parse_spec(spec)
    index = get_backend(backend).load(folder, part, **options)
    if index.spec != canonical_spec(spec):
        raise DataError(f"{folder}: meta.json says {spec!r} but the saved index reads back as {index.spec!r}",
                        fix="rebuild the index")
    return index


def index_bytes(folder: Path) -> int:
    """Bytes on disk of the index files in ``folder`` (every file below it except meta.json)."""
    from harness.meta import folder_bytes

    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"index folder {folder} does not exist")
    return folder_bytes(folder)
