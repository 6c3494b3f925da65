"""The toy's jobs for the plan (harness/plan.py): :func:`declare`, :func:`search_job`, and the steps
the jobs name, ``step(ctx, job, inputs, out) -> info for meta.json``. A real method keeps each step
thin here and its work in train.py / index.py / search.py; the toy's steps are ten lines each."""
from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.fusion import fusion_job
from harness.job import Job, Ref
from harness.methods.base import Context, affects, training_keys

from .model import HashedTfidf, passage_text
from .settings import settings


# --------------------------------------------------------------------------------------------
# jobs


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Model ``toy``, index ``toy`` of any dataset, and on each of ``methods.<name>.datasets`` the
    search job ``toy`` and the fused system ``toy.rrf``."""
    s = settings(cfg["methods"][name])
    jobs = [Job("train", name, name, "fit", inputs={"data": Ref("data", dataset=s["train_dataset"])},
                keys=training_keys(cfg, name), mem_mb=1000),
            Job("index", name, name, "build", keys=affects(name, "index"), mem_mb=1000,
                inputs={"data": Ref("data"), "model": Ref("model", name)})]
    for d in s.get("datasets", []):
        jobs.append(search_job(cfg, name, d))
        if s["rrf_with"]:
            jobs.append(fusion_job(f"{name}.rrf", name, d, [name, s["rrf_with"]], "rrf",
                                   keys=affects(name, "search.fusion"), rrf_k=s["rrf_k"]))
    return jobs


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    """System ``toy`` on ``dataset``; on another split (the reader's training set) job ``toy.<split>``."""
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset,
               systems=(name,), params={"split": split}, keys=("evaluate.depth",), mem_mb=1000,
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", name),
                       "index": Ref("index", name, dataset)})


# --------------------------------------------------------------------------------------------
# steps: step(ctx, job, inputs, out) -> info for meta.json


def fit(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Learn IDF weights from the training dataset's corpus; writes ``idf.json``."""
    from harness.datasets import store

    s = settings(ctx.mcfg)
    texts = [passage_text(d) for d in store.iter_corpus(inputs["data"])]
    model = HashedTfidf.fit(texts, int(s["dim"]))
    model.save(out)
    return {"documents": len(texts), "vocabulary": len(model.idf), "dim": model.dim,
            "train_dataset": s["train_dataset"]}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Encode the corpus; index of spec ``methods.toy.index`` with its doc ids."""
    from harness.artifacts import write_docids
    from harness.datasets import store
    from harness.indexes import build_index

    spec = settings(ctx.mcfg)["index"]
    model = HashedTfidf.load(inputs["model"])
    docs = list(store.iter_corpus(inputs["data"]))
    t0 = time.perf_counter()
    index = build_index(spec, model.encode([passage_text(d) for d in docs]))
    index.save(out)
    write_docids(out, [d.id for d in docs])
    return {"spec": index.spec, "documents": len(docs), "dim": model.dim,
            "build_seconds": round(time.perf_counter() - t0, 4)}


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """System ``toy``: the questions of the job's split, encoded as the passages were."""
    from harness.artifacts import hits_from_rows, read_docids, write_run_with_meta
    from harness.datasets import store
    from harness.indexes import load_index

    queries = store.read_queries(inputs["data"], job.params.get("split", "test"))
    k = ctx.cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    model = HashedTfidf.load(inputs["model"])
    index = load_index(inputs["index"])  # dispatches on the spec in its meta.json
    docids = read_docids(inputs["index"], expect=index.ntotal)
    scores, rows = index.search(model.encode([q.text for q in queries]), k)
    hits = hits_from_rows(docids, [q.id for q in queries], scores, rows)
    seconds = round(time.perf_counter() - t0, 3)
    write_run_with_meta(out / f"{job.systems[0]}.trec", hits, system=job.systems[0],
                        meta={"dataset": job.dataset, "depth": k, "seconds": seconds})
    return {"queries": len(queries)}
