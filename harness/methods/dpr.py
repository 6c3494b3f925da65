"""DPR (Karpukhin et al., 2020): a bi-encoder trained with in-batch negatives plus one BM25
hard negative per question, [CLS] pooling, inner product, exact faiss ``Flat`` search.

Passages are encoded as the pair (title, text), as DPR does. Max lengths, batch size, epochs,
learning rate and the backbone come from config key ``methods.dpr``; training is seeded.
"""
from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import hits_from_rows, read_docids, write_docids
from harness.cost import startup_done
from harness.datasets import Query, store
from harness.errors import ConfigError, DataError
from harness.io import iter_jsonl
from harness.methods.base import Context, affects, training_keys, wants_gpu
from harness.models.runtime import encode_device, quiet_transformers, torch_for
from harness.job import Job, Ref
from harness.progress import counted_batches

SCHEMA = "dpr.schema.yaml"

ENCODERS = ("question_encoder", "passage_encoder")


def _torch(ctx: Context):
    return torch_for(ctx.mcfg)


def prepare_question(ctx: Context, text: str) -> str:
    text = text.strip()
    if ctx.mcfg.get("strip_question_mark", False) and text.endswith("?"):
        text = text[:-1]
    return text


def pool(ctx: Context, out, mask):
    hidden = out.last_hidden_state
    if ctx.mcfg.get("pooling", "cls") == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1)
    return hidden[:, 0]


class BiEncoder:
    """Question and passage encoders (separate weights unless ``shared_encoder``)."""

    def __init__(self, ctx: Context, q_model, p_model, tokenizer) -> None:
        self.ctx, self.q, self.p, self.tok = ctx, q_model, p_model, tokenizer
        self.device = "cpu"

    def to(self, device: str) -> BiEncoder:
        """Move both encoders to ``device``; inputs follow, encodings come back as CPU numpy arrays."""
        self.q.to(device)
        self.p.to(device)
        self.device = device
        return self

    @classmethod
    def from_backbone(cls, ctx: Context) -> BiEncoder:
        from harness.models.backbones import load_encoder, load_tokenizer

        quiet_transformers()
        q = load_encoder(ctx.cfg, ctx.mcfg["backbone"])
        p = q if ctx.mcfg.get("shared_encoder", False) else load_encoder(ctx.cfg, ctx.mcfg["backbone"])
        return cls(ctx, q, p, load_tokenizer(ctx.cfg, ctx.mcfg["backbone"]))

    @classmethod
    def load(cls, ctx: Context, folder: Path, device: str = "cpu") -> BiEncoder:
        """The trained encoders of ``folder`` on ``device`` (index and search jobs: the section's,
        :func:`harness.models.runtime.encode_device`)."""
        from transformers import AutoModel, AutoTokenizer

        quiet_transformers()
        q = AutoModel.from_pretrained(folder / ENCODERS[0])
        p = q if ctx.mcfg.get("shared_encoder", False) else AutoModel.from_pretrained(folder / ENCODERS[1])
        model = cls(ctx, q, p, AutoTokenizer.from_pretrained(folder / ENCODERS[0]))
        return model.to(device) if device != "cpu" else model

    def save(self, folder: Path) -> None:
        for name, model in zip(ENCODERS, (self.q, self.p)):
            model.save_pretrained(folder / name)
            self.tok.save_pretrained(folder / name)

    def _batch_q(self, texts: Sequence[str]):
        return self.tok([prepare_question(self.ctx, t) for t in texts], padding=True, truncation=True,
                        max_length=self.ctx.mcfg.get("q_max_len", 32), return_tensors="pt")

    def _batch_p(self, titles: Sequence[str], texts: Sequence[str]):
        return self.tok(list(titles), list(texts), padding=True, truncation="only_second",
                        max_length=self.ctx.mcfg.get("p_max_len", 256), return_tensors="pt")

    def embed_q(self, batch):
        return pool(self.ctx, self.q(**batch), batch["attention_mask"])

    def embed_p(self, batch):
        return pool(self.ctx, self.p(**batch), batch["attention_mask"])

    def encode_questions(self, texts: Sequence[str]) -> np.ndarray:
        torch = _torch(self.ctx)
        bs = self.ctx.mcfg.get("encode_batch_size", 64)
        self.q.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), bs):
                out.append(self.embed_q(self._batch_q(texts[i:i + bs]).to(self.device)).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.q.config.hidden_size), np.float32)

    def encode_passages(self, titles: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        out = list(self.iter_passage_vectors(zip(titles, texts), len(texts)))
        return np.concatenate(out) if out else np.zeros((0, self.p.config.hidden_size), np.float32)

    def iter_passage_vectors(self, pairs: Iterable[tuple[str, str]], n: int) -> Iterator[np.ndarray]:
        """The passage vectors (float32) of ``n`` (title, text) pairs, a batch at a time, the pairs read
        as they are needed (a corpus streamed from its file: NQ's 21M passages are never held); a
        count other than ``n`` fails."""
        torch = _torch(self.ctx)
        bs = self.ctx.mcfg.get("encode_batch_size", 64)
        self.p.eval()
        with torch.inference_mode():
            for batch in counted_batches(pairs, n, bs, "encode passages (dpr)", "passage"):
                titles, texts = [b[0] for b in batch], [b[1] for b in batch]
                yield self.embed_p(self._batch_p(titles, texts).to(self.device)).float().cpu().numpy()


def training_examples(ctx: Context, negatives_file: Path | None) -> list[tuple[Query, list[str]]]:
    """(question, its mined BM25 negatives) for every training question of ``ctx``'s dataset (DPR, BPR
    and SVDR/VDR train on these; no negatives file: none). A question without a gold passage is an error."""
    queries = store.read_queries(ctx.data_dir(), "train")
    negs = {r["id"]: r["negatives"] for r in iter_jsonl(negatives_file)} if negatives_file else {}
    examples = []
    for q in queries:
        if not q.gold:
            raise DataError(f"{ctx.data_dir()}/queries-train.jsonl: question {q.id} has no gold passage for training")
        examples.append((q, negs.get(q.id, [])))
    return examples


def train(ctx: Context, out: Path, negatives_file: Path) -> dict[str, Any]:
    """Train on the train split of ``methods.dpr.train_dataset``; writes the encoders to ``out``.
    The loop (batching, AdamW, schedule, precision, device) is :func:`harness.train.train_loop`."""
    from harness import train as loop

    torch = _torch(ctx)
    m = ctx.mcfg
    seed = ctx.cfg["seed"]
    loop.set_seed(seed)
    tctx = Context(ctx.cfg, ctx.method, m["train_dataset"])
    examples = loop.subsample(training_examples(tctx, negatives_file), m.get("max_train_questions"), seed)
    docs = store.corpus_lookup(tctx.data_dir())
    doc_ids = store.ids_of(docs)
    ts = loop.TrainSettings.from_config(m)
    model = BiEncoder.from_backbone(ctx)
    params = list({id(p): p for p in list(model.q.parameters()) + list(model.p.parameters())}.values())
    device = loop.resolve_device(ts.device)
    n_hard = m.get("hard_negatives", 1)

    def loss_fn(eq, ep):
        scores = eq @ ep.T
        return torch.nn.functional.cross_entropy(scores, torch.arange(len(eq), device=scores.device)), {}

    def step_fn(batch: list[tuple[Query, list[str]]], step: int, rng: random.Random):
        pids = [q.gold[0] for q, _ in batch]
        for q, negs in batch:  # DPR: one BM25 negative per question (random passage if none)
            pool_ = [d for d in negs if d not in pids] or [rng.choice(doc_ids)]
            pids += pool_[:n_hard]
        qb = model._batch_q([q.text for q, _ in batch]).to(device)
        passages = [docs[p] for p in pids]   # each read once (the corpus is read by id)
        pb = model._batch_p([d.title for d in passages], [d.text for d in passages]).to(device)
        # grad_cache_chunk > 0: the paper's batch in sub-batches of that many texts (GradCache)
        return loop.sub_batch_step([(model.embed_q, qb), (model.embed_p, pb)], loss_fn, ts.grad_cache_chunk)

    info = loop.train_loop(examples, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=[model.q, model.p])
    return {"steps": info["steps"], "examples": len(examples), "train_dataset": m["train_dataset"],
            "seconds": info["seconds"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
            "backbone": m["backbone"], "grad_cache_chunk": ts.grad_cache_chunk}


class Searcher:
    """Loaded model + index, so timing can call ``encode`` (E(q)) and ``search`` (f(q, D)) apart."""

    def __init__(self, ctx: Context, index_dir: Path, model_dir: Path, device: str = "cpu") -> None:
        from harness.indexes import parse_spec
        from harness.indexes.faiss_dense import DenseFaissIndex

        spec = ctx.mcfg.get("index", "faiss:Flat")
        self.model = BiEncoder.load(ctx, model_dir, device)
        self.index = DenseFaissIndex.load(index_dir, parse_spec(spec)[1])
        self.docids = read_docids(index_dir, expect=self.index.ntotal)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode_questions(list(texts))

    def search(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(qvecs, k)

    def results(self, qids: Sequence[str], scores: np.ndarray, rows: np.ndarray) -> dict[str, list[tuple[str, float]]]:
        return hits_from_rows(self.docids, qids, scores, rows)


def search(ctx: Context, index_dir: Path, queries: Sequence[Query], k: int, model_dir: Path) -> dict[str, list[tuple[str, float]]]:
    s = Searcher(ctx, index_dir, model_dir)
    scores, rows = s.search(s.encode([q.text for q in queries]), k)
    return s.results([q.id for q in queries], scores, rows)


def _saved_config(folder: Path) -> dict[str, Any]:
    """``{"methods": {<m>: section}}`` of a trained model folder: its meta.json's recorded
    ``methods.<m>.<key>`` values over the method's schema defaults (harness.api builds the same)."""
    from harness.settings import fragment_defaults
    from harness.meta import read_meta
    from harness.methods import method_module

    meta = read_meta(folder)
    name, mod = meta["method"], method_module(meta["method"])
    prefix = f"methods.{name}."
    recorded = {k[len(prefix):]: v for k, v in (meta.get("config_values") or {}).items()
                if k.startswith(prefix) and "." not in k[len(prefix):]}
    return {"methods": {name: {**fragment_defaults(mod.__file__, mod.SCHEMA), **recorded}}}


class Encoder:
    """The trained question and passage encoders (:class:`BiEncoder`) behind harness.api's Encoder:
    ``encode_queries`` (prepared as DPR does) and ``encode_docs`` ((title, text) pairs), float32 arrays."""

    def __init__(self, ctx: Context, folder: Path) -> None:
        self.ctx, self.model = ctx, BiEncoder.load(ctx, Path(folder))

    @classmethod
    def load(cls, path: str | Path, cfg: Mapping[str, Any] | None = None) -> Encoder:
        """``cfg``: a config with the section (harness.api.load_encoder passes one); default: rebuilt
        from the folder's meta.json."""
        from harness.meta import read_meta

        cfg = cfg if cfg is not None else _saved_config(Path(path))
        return cls(Context(cfg, read_meta(Path(path))["method"]), Path(path))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode_questions(list(texts))

    def encode_docs(self, docs: Sequence[Any]) -> np.ndarray:
        return self.model.encode_passages([d.title for d in docs], [d.text for d in docs])


class Retriever:
    """DPR's run (system ``dpr``): the question encoder and the index's exact inner-product search
    (:class:`Searcher`). Built by :func:`harness.api.load_retriever` from a minimal config."""

    def __init__(self, cfg: Mapping[str, Any], index_dir: Path, model_dir: Path | None, *, method: str = "dpr",
                 job: str | None = None, dataset: str | None = None, inputs: Mapping[str, Path] | None = None) -> None:
        if model_dir is None:
            raise ConfigError(f"the DPR index {index_dir} names no model: pass model_dir (--model)")
        self.system = method
        self.searcher = Searcher(Context(cfg, method, dataset), Path(index_dir), Path(model_dir))

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> dict[str, list[tuple[str, float]]]:
        qids, texts = (list(queries), list(queries.values())) if isinstance(queries, Mapping) else \
            ([q.id for q in queries], [q.text for q in queries])
        scores, rows = self.searcher.search(self.searcher.encode(texts), k)
        return self.searcher.results(qids, scores, rows)


# --------------------------------------------------------------------------------------------
# jobs


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Model ``dpr``; index ``dpr`` (spec ``methods.dpr.index``) of any dataset; search ``dpr`` on
    each of ``methods.dpr.datasets``: system ``dpr`` and, with ``bm25_rerank_depths``, ``dpr.bm25-m<k>``
    (BM25's top k re-scored by DPR, SVDR Table 1) from the same model load."""
    m = cfg["methods"][name]
    td, gpu = m["train_dataset"], wants_gpu(cfg, name)
    jobs = [Job("train", name, name, "train_step", gpu=gpu,
                inputs={"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td)},
                keys=training_keys(cfg, name)),
            Job("index", name, name, "build", gpu=gpu, keys=affects(name, "index"),
                inputs={"data": Ref("data"), "model": Ref("model", name)})]
    return jobs + [search_job(cfg, name, d) for d in m.get("datasets", [])]


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    """System ``dpr`` and the BM25 + DPR (m) re-rankings on ``dataset``; on another split (the
    reader's training passages) ``dpr`` alone."""
    depths = sorted(cfg["methods"][name].get("bm25_rerank_depths") or []) if split == "test" else []
    inputs = {"data": Ref("data", dataset=dataset), "model": Ref("model", name), "index": Ref("index", name, dataset)}
    if depths:
        inputs["bm25_run"] = Ref("system", "bm25", dataset)
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset, inputs=inputs,
               gpu=wants_gpu(cfg, name), keys=("evaluate.depth",), params={"depths": depths, "split": split},
               systems=(name, *(f"{name}.bm25-m{k}" for k in depths)))


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return train(ctx, out, inputs["negatives"])


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return build_index(ctx, out, inputs["model"], inputs["data"])


def build_index(ctx: Context, out: Path, model_dir: Path, data_dir: Path | None = None) -> dict[str, Any]:
    """Encode the corpus with the passage encoder; faiss index of spec ``methods.dpr.index``."""
    from harness.indexes import parse_spec
    from harness.indexes.faiss_dense import DenseFaissIndex

    spec = ctx.mcfg.get("index", "faiss:Flat")
    _, factory = parse_spec(spec)
    model = BiEncoder.load(ctx, model_dir, encode_device(ctx.mcfg))
    startup_done()  # the rest is per document (python -m harness estimate)
    folder = data_dir or ctx.data_dir()
    ids: list[str] = []
    pairs = ((d.title, d.text) for d in store.iter_corpus(folder, ids))   # read as encoded (NQ: ~24.5 GiB)
    t0 = time.perf_counter()
    # a Flat index takes each batch as it is encoded (the vectors are not held beside its copy); encoding
    # and adding interleave, so encode_seconds is the whole build here
    index = DenseFaissIndex.build_batches(factory, model.iter_passage_vectors(pairs, store.corpus_size(folder)))
    build_seconds = time.perf_counter() - t0
    index.save(out)
    write_docids(out, ids)
    return {"spec": spec, "documents": len(ids), "dim": index.dim, "encode_seconds": build_seconds,
            "build_seconds": build_seconds}


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """The ``dpr`` run and the BM25 + DPR (m) re-rankings, one model load and one question encoding."""
    from harness.artifacts import write_run_with_meta
    from harness.rerank import stored, write_reranked
    from harness.runs import read_run

    queries = store.read_queries(inputs["data"], job.params.get("split", "test"))
    k = ctx.cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    s = Searcher(ctx, inputs["index"], inputs["model"], encode_device(ctx.mcfg))
    qvecs = s.encode([q.text for q in queries])
    scores, rows = s.search(qvecs, k)
    hits = s.results([q.id for q in queries], scores, rows)
    write_run_with_meta(out / f"{job.systems[0]}.trec", hits, system=job.systems[0], meta={
        "dataset": job.dataset, "depth": k, "seconds": round(time.perf_counter() - t0, 3),
        "note": "wall time of loading, encoding and searching; efficiency figures are in metrics/"})
    depths = list(job.params.get("depths") or [])
    if depths:
        # E(q) as encoded above; E(p) read from a Flat index (the passage encoder's vectors as added),
        # encoded here only where the index compresses them
        xb = s.index.stored_vectors()
        passages = (stored(xb, s.docids, key=lambda d: d.id) if xb is not None else
                    (lambda ds: s.model.encode_passages([d.title for d in ds], [d.text for d in ds])))
        write_reranked(out, read_run(inputs["bm25_run"] / "bm25.trec"), queries, depths,
                       Path(inputs["data"]), stored(qvecs, [q.text for q in queries]),
                       passages, system=f"{job.systems[0]}.bm25", dataset=job.dataset, depth=k,
                       note="BM25 top m re-scored by the trained DPR encoders" + (
                           " (passage vectors read from the Flat index)" if xb is not None else ""))
    return {"queries": len(queries)}
