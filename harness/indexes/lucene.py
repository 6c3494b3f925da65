"""Lucene indexes through pyserini/Anserini (spec ``lucene:bm25``)."""
from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from harness.datasets import Doc
from harness.errors import ConfigError
from harness.indexes import pyserini_env

SPECS = ("bm25",)


def doc_contents(doc: Doc, contents: str) -> str:
    """What Lucene indexes: DPR's BM25 uses title and text (``title_text``); or text alone."""
    if contents == "title_text":
        return f"{doc.title}\n{doc.text}" if doc.title else doc.text
    if contents == "text":
        return doc.text
    raise ConfigError(f"config key methods.bm25.contents: {contents!r} (use title_text or text)")


def build(spec: str, docs: Iterable[Doc], out: Path, *, contents: str = "title_text", threads: int = 1) -> int:
    """Index ``docs`` into folder ``out`` (which must not exist yet); returns the document count."""
    if spec not in SPECS:
        raise ConfigError(f"unknown lucene spec {spec!r}; known: {', '.join(SPECS)}")
    n = 0
    with tempfile.TemporaryDirectory(prefix="jsoncoll-") as coll:
        with open(Path(coll) / "docs.jsonl", "w", encoding="utf-8") as fh:
            for d in docs:
                fh.write(json.dumps({"id": d.id, "contents": doc_contents(d, contents)}, ensure_ascii=False) + "\n")
                n += 1
        pyserini_env.index_collection([
            "-collection", "JsonCollection", "-input", coll, "-index", str(out),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
            "-storeRaw", "-quiet",
        ])
    return n


class LuceneBM25:
    """A BM25 searcher over a Lucene index (Anserini's defaults k1=0.9, b=0.4 unless set)."""

    def __init__(self, index_dir: Path, k1: float = 0.9, b: float = 0.4) -> None:
        self.searcher = pyserini_env.lucene_searcher(str(index_dir))
        self.searcher.set_bm25(k1, b)

    @property
    def num_docs(self) -> int:
        return int(self.searcher.num_docs)

    def search(self, texts: Sequence[str], qids: Sequence[str], k: int, threads: int = 1) -> dict[str, list[tuple[str, float]]]:
        hits = self.searcher.batch_search(list(texts), list(qids), k=k, threads=threads)
        return {q: [(h.docid, float(h.score)) for h in hits.get(q, [])] for q in qids}
