"""Dense float indexes built with faiss from factory strings (spec ``faiss:<factory>``)."""
from __future__ import annotations

from pathlib import Path

import faiss
from faiss.contrib.factory_tools import reverse_index_factory
import numpy as np

from harness.errors import ConfigError

INDEX_FILE = "index.faiss"


class DenseFaissIndex:
    """A faiss index over float32 vectors, inner-product metric."""

    def __init__(self, index: faiss.Index, factory: str) -> None:
        self.index = index
        self.factory = factory

    @classmethod
    def build(cls, factory: str, vectors: np.ndarray) -> DenseFaissIndex:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise ConfigError(f"faiss:{factory}: vectors must be 2-d, got shape {vectors.shape}")
        try:
            index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise ConfigError(f"faiss factory string {factory!r} is not valid: {exc}") from None
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
        back = reverse_index_factory(index)
        if back != factory:
            raise ConfigError(f"faiss:{factory} built an index whose factory string reads back as {back!r}")
        return cls(index, factory)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, row ids), best first; ids are -1 where fewer than k exist."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        return self.index.search(queries, min(k, self.ntotal))

    def save(self, folder: Path) -> Path:
        path = Path(folder) / INDEX_FILE
        faiss.write_index(self.index, str(path))
        return path

    @classmethod
    def load(cls, folder: Path, factory: str) -> DenseFaissIndex:
        return cls(faiss.read_index(str(Path(folder) / INDEX_FILE)), factory)
