"""A toy retrieval method that lives outside the package: hashed TF-IDF vectors in a faiss index.

It exists to prove the plugin contract (docs/adding-a-method.md): one module, one schema
fragment, one config section, and no file in workflow/ changes. Loaded with
``HARNESS_PLUGINS=toy_method`` and ``PYTHONPATH=tests/plugins``.

- train ``toy`` (step :func:`fit`): IDF weights from the corpus of ``methods.toy.train_dataset``
  (``idf.json``: the hashing dimension, the IDF of every token, the IDF of an unseen token);
- index ``toy`` (step :func:`build`) of any dataset: every passage (title + text) as a feature-hashed,
  TF-IDF weighted, L2-normalised vector of ``dim`` dimensions in an index of spec
  ``methods.toy.index`` (``faiss:Flat``), doc ids beside it;
- search ``toy`` (step :func:`run_search`) on each of ``methods.toy.datasets``: system ``toy``, the
  questions encoded the same way, one model load;
- search ``toy.rrf``: reciprocal rank fusion of ``toy`` and ``methods.toy.rrf_with`` (``bm25``),
  declared with the shared step :func:`harness.fusion.fusion_job`.
"""
from __future__ import annotations

import json
import math
import re
import time
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.methods import register
from harness.methods.base import Context, training_keys
from harness.job import Job, Ref

SCHEMA = "toy_method.schema.yaml"
MODEL_FILE = "idf.json"
_WORD = re.compile(r"\w+")


# --------------------------------------------------------------------------------------------
# the model


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


# --------------------------------------------------------------------------------------------
# jobs


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Model ``toy``, index ``toy`` of any dataset, and on each of ``methods.<name>.datasets`` the
    search job ``toy`` and the fused system ``toy.rrf``."""
    from harness.fusion import fusion_job

    m = cfg["methods"][name]
    td = m["train_dataset"]
    jobs = [Job("train", name, name, "fit", inputs={"data": Ref("data", dataset=td)}, mem_mb=1000,
                keys=training_keys(cfg, name, exclude=("rrf_with", "rrf_k"))),
            Job("index", name, name, "build", keys=(f"methods.{name}.index",), mem_mb=1000,
                inputs={"data": Ref("data"), "model": Ref("model", name)})]
    for d in m.get("datasets", []):
        jobs.append(search_job(cfg, name, d))
        if m.get("rrf_with"):
            jobs.append(fusion_job(f"{name}.rrf", name, d, [name, m["rrf_with"]], "rrf",
                                   keys=(f"methods.{name}.rrf_k",), rrf_k=m.get("rrf_k", 60)))
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

    texts = [passage_text(d) for d in store.iter_corpus(inputs["data"])]
    model = HashedTfidf.fit(texts, int(ctx.mcfg.get("dim", 512)))
    model.save(out)
    return {"documents": len(texts), "vocabulary": len(model.idf), "dim": model.dim,
            "train_dataset": ctx.mcfg["train_dataset"]}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Encode the corpus; index of spec ``methods.toy.index`` with its doc ids."""
    from harness.artifacts import write_docids
    from harness.datasets import store
    from harness.indexes import build_index

    spec = ctx.mcfg.get("index", "faiss:Flat")
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


register("toy", __name__)
