"""DensePhrases' open-domain search (Eq. 10): the phrase index with its dump, top phrases per
question (start <= end < start + L within one passage), the passages of the top phrases as a run,
and the search step (``<system>.answers.jsonl`` and a TREC run per index)."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import store
from harness.errors import DataError
from harness.methods.base import Context
from harness.methods.densephrases.model import PhraseModel
from harness.methods.densephrases.settings import ANSWERS, DUMP_DIR, NAME, prepare, settings
from harness.models.runtime import encode_device
from harness.job import Job


def load_phrase_index(index_dir: Path, name: str, s: Mapping[str, Any]):
    from harness.indexes import load_index

    folder = Path(index_dir) / "indexes" / name
    if not folder.is_dir():
        raise DataError(f"{folder} does not exist: the phrase index job built no {name!r} index",
                        fix=f"rebuild the index (methods.{NAME}.index / index_variants)")
    # the dump sits beside the indexes (the job's folder is moved into place after the build)
    return load_index(folder, nprobe=s["nprobe"], dump=Path(index_dir) / DUMP_DIR)


def phrase_answers(idx, qs: np.ndarray, qe: np.ndarray, s: Mapping[str, Any], texts: Mapping[str, str]
                   ) -> list[list[dict[str, Any]]]:
    """Top phrases per question: text, passage id, score, dump rows (best first)."""
    sr = s["search"]
    res = idx.search_phrases(qs, qe, int(sr["top_k"]), int(sr["phrases"]))
    out = []
    for phrases in res:
        row = []
        for p in phrases:
            docid = idx.dump.docids[int(p.doc_row)]
            a, b = int(idx.dump.offsets[p.start_row][0]), int(idx.dump.offsets[p.end_row][1])
            row.append({"text": texts[docid][a:b], "doc": docid, "score": float(p.score),
                        "start_row": int(p.start_row), "end_row": int(p.end_row)})
        out.append(row)
    return out


def passage_run(qids: Sequence[str], answers: Sequence[list[dict[str, Any]]], depth: int):
    """The passages of the top phrases, ranked by their best phrase (top-k passage accuracy)."""
    hits = {}
    for qid, phrases in zip(qids, answers):
        best: dict[str, float] = {}
        for p in phrases:
            best.setdefault(p["doc"], p["score"])
        hits[qid] = list(best.items())[:depth]
    return hits


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from harness.artifacts import write_run_with_meta
    from harness.io import write_jsonl

    v = job.params.get("variant")
    s = settings(ctx.cfg, v)
    split = job.params.get("split", "test")
    queries = store.read_queries(inputs["data"], split)
    texts = store.corpus_lookup(inputs["data"]).texts   # the answers' passages, read as found
    model = PhraseModel.load(s, inputs["model"], encode_device(s))
    model.train(False)
    t0 = time.perf_counter()
    qs, qe = model.index_queries([prepare(s, q.text) for q in queries], int(s["encode_batch_size"]))
    enc_s = time.perf_counter() - t0
    info = {}
    for name, system in zip(job.params["indexes"], job.systems):
        idx = load_phrase_index(inputs["index"], name, s)
        t1 = time.perf_counter()
        answers = phrase_answers(idx, qs, qe, s, texts)
        secs = time.perf_counter() - t1
        write_jsonl(out / f"{system}{ANSWERS}", ({"id": q.id, "question": q.text, "prepared": prepare(s, q.text),
                                                  "prediction": a[0]["text"] if a else "", "phrases": a[:10]}
                                                 for q, a in zip(queries, answers)))
        hits = passage_run([q.id for q in queries], answers, int(ctx.cfg["evaluate"]["depth"]))
        write_run_with_meta(out / f"{system}.trec", hits, system=system,
                            meta={"dataset": job.dataset, "split": split, "index": idx.spec,
                                  "seconds": round(enc_s + secs, 3)})
        info[system] = {"index": idx.spec, "search_seconds": round(secs, 3)}
        print(f"{system}/{job.dataset}: {len(queries)} questions searched in {idx.spec} ({secs:.1f}s)")
    return {"queries": len(queries), "encode_seconds": round(enc_s, 3), "systems": info}


class Retriever:
    """DensePhrases' run (Eq. 10) from one model and its phrase index (built by
    :func:`harness.api.load_retriever`): the passages of the top phrases, ranked by their best phrase,
    the TREC run the search step writes for the main index (system: the model's id, ``densephrases``,
    ``densephrases.qs`` for the query-side fine-tuned model on the base index, or a variant's);
    :meth:`answers` gives the phrases themselves. ``index``: ``main`` (the paper's index) or another
    of the job's (``flat``, ``opq``). The corpus (the index's ``data`` input) gives the phrases' text."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None, *, method: str = NAME,
                 job: str | None = None, dataset: str | None = None, inputs: Mapping[str, Path] | None = None,
                 index: str = "main") -> None:
        from harness.meta import read_meta

        if model_dir is None:
            raise DataError(f"the phrase index {index_dir} names no model: pass model_dir (--model)")
        data = (inputs or {}).get("data")
        if data is None or not Path(data).is_dir():
            raise DataError(f"{index_dir}/meta.json names no corpus folder that exists here (inputs.data: {data})",
                            fix="run from the checkout that built the index")
        self.s = s = settings(cfg)
        self.system = read_meta(Path(model_dir)).get("job", NAME) + ("" if index == "main" else f".{index}")
        self.model = PhraseModel.load(s, Path(model_dir))
        self.model.train(False)
        self.index = load_phrase_index(Path(index_dir), index, s)
        self.texts = store.corpus_lookup(Path(data)).texts

    def answers(self, queries: Mapping[str, str] | Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
        """The top phrases of each question (text, passage id, score, dump rows), best first."""
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        qs, qe = self.model.index_queries([prepare(self.s, t) for t in texts], int(self.s["encode_batch_size"]))
        return dict(zip(qids, phrase_answers(self.index, qs, qe, self.s, self.texts)))

    def search(self, queries: Mapping[str, str] | Sequence[Any], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        found = self.answers(queries)
        return passage_run(list(found), list(found.values()), k)
