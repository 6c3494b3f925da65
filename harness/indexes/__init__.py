"""Index backends, one module each, addressed by spec strings ``backend:spec``.

``faiss:Flat``, ``faiss:HNSW512``, ``faiss:LSH``, ``faiss:PQ96x8`` (faiss factory strings),
``faiss-binary:BFlat``, ``faiss-binary:BHash768``, ``token-csr``, ``lucene:bm25``.
"""
from __future__ import annotations

import importlib

from harness.errors import ConfigError
from harness.registry import Registry

# backend name -> module; modules are imported on first use (faiss/pyserini are heavy).
BACKENDS: Registry[str] = Registry("index backend")
BACKENDS.add("faiss", "harness.indexes.faiss_dense")
BACKENDS.add("faiss-binary", "harness.indexes.faiss_binary")
BACKENDS.add("token-csr", "harness.indexes.token_csr")
BACKENDS.add("lucene", "harness.indexes.lucene")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``backend:spec`` into its two parts; ``token-csr`` has no spec part."""
    backend, _, rest = spec.partition(":")
    if backend not in BACKENDS:
        BACKENDS.get(backend)  # raises with close matches
    if not rest and backend != "token-csr":
        raise ConfigError(f"index spec {spec!r} has no part after ':' (e.g. 'faiss:Flat', 'lucene:bm25')")
    return backend, rest


def backend_module(spec: str):
    """The module implementing the backend of ``spec``."""
    backend, _ = parse_spec(spec)
    return importlib.import_module(BACKENDS.get(backend))
