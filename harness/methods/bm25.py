"""BM25 through pyserini's Lucene index and searcher (Anserini, real Java)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.datasets import Query, store
from harness.indexes import lucene
from harness.methods.base import Context


LUCENE_DIR = "lucene"  # the Lucene index inside the artifact folder (meta.json sits beside it)


def build_index(ctx: Context, out: Path) -> dict[str, Any]:
    m = ctx.mcfg
    n = lucene.build("bm25", store.iter_corpus(ctx.data_dir()), out / LUCENE_DIR, contents=m.get("contents", "title_text"),
                     threads=m.get("threads", 1))
    return {"spec": "lucene:bm25", "documents": n}


class Searcher:
    """Timing view of BM25: no query encoding (Lucene analyses the text inside the search)."""

    def __init__(self, ctx: Context, index_dir: Path, model_dir: Path | None = None) -> None:
        self.bm25 = lucene.LuceneBM25(index_dir / LUCENE_DIR, k1=ctx.mcfg.get("k1", 0.9), b=ctx.mcfg.get("b", 0.4))
        self.threads = ctx.mcfg.get("threads", 1)

    def encode(self, texts: Sequence[str]) -> list[str]:
        return list(texts)

    def search(self, texts: list[str], k: int) -> dict[str, list[tuple[str, float]]]:
        return self.bm25.search(texts, [str(i) for i in range(len(texts))], k, threads=self.threads)


def search(ctx: Context, index_dir: Path, queries: Sequence[Query], k: int) -> dict[str, list[tuple[str, float]]]:
    s = Searcher(ctx, index_dir)
    return s.bm25.search([q.text for q in queries], [q.id for q in queries], k, threads=s.threads)
