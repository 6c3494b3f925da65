"""BM25 through pyserini's Lucene index and searcher (Anserini, real Java).

Jobs: index ``bm25`` (spec ``methods.bm25.index``, ``lucene:bm25``) of any dataset that asks for
one (its own search datasets, the training datasets whose negatives are mined); search ``bm25`` on
each of ``methods.bm25.datasets`` (system ``bm25``).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.artifacts import write_run_with_meta
from harness.cost import startup_done
from harness.datasets import Query, store
from harness.indexes import lucene, pyserini_env
from harness.methods.base import Context, affects
from harness.job import Job, Ref

SCHEMA = "bm25.schema.yaml"
LUCENE_DIR = "lucene"  # the Lucene index inside the artifact folder (meta.json sits beside it)


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    jobs = [Job("index", name, name, "build", keys=affects(name, "index"),
                inputs={"data": Ref("data")}, mem_mb=4000)]
    return jobs + [search_job(cfg, name, d) for d in cfg["methods"][name].get("datasets", [])]


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset,
               systems=(name,), params={"split": split}, mem_mb=4000,
               inputs={"data": Ref("data", dataset=dataset), "index": Ref("index", name, dataset)},
               keys=(*affects(name, "search"), "evaluate.depth"))


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    m = ctx.mcfg
    pyserini_env.start_jvm()  # the JVM starts here, with the start-up
    startup_done()  # the rest is per document (python -m harness estimate)
    t0 = time.perf_counter()
    n = lucene.build("bm25", store.iter_corpus(inputs["data"]), out / LUCENE_DIR, contents=m.get("contents", "title_text"),
                     threads=m.get("threads", 1))
    return {"spec": "lucene:bm25", "documents": n, "build_seconds": time.perf_counter() - t0}


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    queries = store.read_queries(inputs["data"], job.params.get("split", "test"))
    k = ctx.cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    hits = search(ctx, inputs["index"], queries, k)
    seconds = time.perf_counter() - t0
    write_run_with_meta(out / f"{job.systems[0]}.trec", hits, system=job.systems[0],
                        meta={"dataset": job.dataset, "depth": k, "seconds": round(seconds, 3)})
    return {"queries": len(queries)}


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


class Retriever:
    """BM25 (system ``bm25``) on the index's Lucene folder with ``k1`` and ``b`` of the method's
    section (search settings: the schema's defaults 0.9 / 0.4 unless harness.api's ``settings`` say
    otherwise). No model: :func:`harness.api.load_retriever` takes the index folder alone."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None = None, *,
                 method: str = "bm25", job: str | None = None, dataset: str | None = None,
                 inputs: Mapping[str, Path] | None = None) -> None:
        self.system = method
        self.searcher = Searcher(Context(cfg, method, dataset), Path(index_dir))

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        return self.searcher.bm25.search(texts, qids, k, threads=self.searcher.threads)
