"""The toy's model: feature-hashed, TF-IDF weighted, L2-normalised bag-of-words vectors."""
from __future__ import annotations

import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MODEL_FILE = "idf.json"
_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _WORD.findall(text.lower())


class HashedTfidf:
    """Feature hashing of word tokens into ``dim`` buckets (crc32: stable across processes, unlike
    ``hash()``; its top bit gives a sign so that collisions cancel on average), weighted by
    tf * idf, L2-normalised."""

    def __init__(self, dim: int, idf: Mapping[str, float], default_idf: float) -> None:
        self.dim, self.idf, self.default_idf = dim, dict(idf), default_idf

    @classmethod
    def fit(cls, texts: Sequence[str], dim: int) -> HashedTfidf:
        df: Counter[str] = Counter()
        for t in texts:
            df.update(set(tokens(t)))
        n = len(texts)
        idf = {w: math.log((1 + n) / (1 + c)) + 1.0 for w, c in sorted(df.items())}  # smoothed IDF
        return cls(dim, idf, math.log(1 + n) + 1.0)

    @classmethod
    def load(cls, folder: Path) -> HashedTfidf:
        d = json.loads((Path(folder) / MODEL_FILE).read_text(encoding="utf-8"))
        return cls(d["dim"], d["idf"], d["default_idf"])

    def save(self, folder: Path) -> None:
        (Path(folder) / MODEL_FILE).write_text(json.dumps(
            {"dim": self.dim, "default_idf": self.default_idf, "idf": self.idf}), encoding="utf-8")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w, tf in Counter(tokens(t)).items():
                h = zlib.crc32(w.encode("utf-8"))
                sign = -1.0 if h >> 31 else 1.0
                out[i, h % self.dim] += sign * (1.0 + math.log(tf)) * self.idf.get(w, self.default_idf)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def passage_text(doc: Any) -> str:
    return f"{doc.title} {doc.text}".strip()
