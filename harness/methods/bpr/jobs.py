"""BPR's jobs in the plan (:func:`declare`, :func:`search_job`) and the step functions they name,
``step(ctx, job, inputs, out) -> dict`` (info for meta.json)."""
from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.artifacts import hits_from_rows, read_docids, write_run_with_meta
from harness.datasets import store
from harness.io import write_json
from harness.methods import dpr
from harness.methods.base import Context, affects, start_key as base_start_key, training_keys, wants_gpu
from harness.methods.bpr.index import build_binary_index, build_dpr_baseline, build_index
from harness.methods.bpr.measure import efficiency
from harness.methods.bpr.scale import scale_efficiency
from harness.methods.bpr.search import Searcher, _DenseSystem, write_run
from harness.methods.bpr.settings import (_check, dpr_baseline, dpr_baselines, efficiency_systems, model_id,
                                          scale_settings, search_variants, settings, train_variants,
                                          variant_context)
from harness.methods.bpr.train import train
from harness.job import Job, Ref
from harness.models.runtime import encode_device


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    """Every search variant of the main model on ``dataset`` (one model load, one encoding); on
    another split (the reader's training passages) the default search alone, ``bpr.bflat``."""
    systems = tuple(f"{name}.{v}" for v in search_variants(cfg)) if split == "test" else (f"{name}.bflat",)
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), params={"split": split}, systems=systems,
               keys=("evaluate.depth", *affects(name, "search")),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", name),
                       "index": Ref("index", name, dataset), "hash_index": Ref("index", f"{name}.hash", dataset)})


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models ``bpr`` and ``bpr.<variant>`` (Tables 7/9); indexes ``bpr`` (linear scan), ``bpr.hash``
    (hash lookup over its codes) and the DPR baselines ``dpr.<b>`` (from DPR's Flat vectors); searches
    ``bpr`` (every search variant), ``bpr.<variant>`` and ``bpr.dpr-baselines`` per dataset; the
    efficiency figures (index bytes, query time) of every Table 1/2 system."""
    s = settings(cfg)
    _check(s)
    td, gpu = s["train_dataset"], wants_gpu(cfg, name)
    model_keys = training_keys(cfg, name)
    data = {"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td)}
    jobs = [Job("train", name, name, "train_step", gpu=gpu, keys=model_keys, inputs=data),
            Job("index", name, name, "build", gpu=gpu, keys=affects(name, "index"),
                inputs={"data": Ref("data"), "model": Ref("model", name)}),
            Job("index", f"{name}.hash", name, "build_hash", keys=affects(name, "index.hash"),
                inputs={"source": Ref("index", name)}, mem_mb=4000)]
    baselines = dpr_baselines(cfg)
    for b in baselines:
        jobs.append(Job("index", f"dpr.{b}", name, "build_baseline", params={"baseline": b},
                        keys=(*affects(name, "index.baseline", at={"dpr_baselines": b}), "seed"),
                        inputs={"dpr_index": Ref("index", "dpr")}))
    variants = train_variants(cfg)
    for v in variants:
        if model_id(cfg, v) != name:
            jobs.append(Job("train", model_id(cfg, v), name, "train_step", gpu=gpu, params={"variant": v}, inputs=data,
                            keys=(*model_keys, *affects(name, "model.variant", at={"variants": v}))))
    for d in cfg["methods"][name].get("datasets", []):
        jobs.append(search_job(cfg, name, d))
        if baselines:
            jobs.append(Job("search", f"{name}.dpr-baselines", name, "run_baselines", d, gpu=gpu,
                            keys=("evaluate.depth",), systems=tuple(f"dpr.{b}" for b in baselines),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", "dpr"),
                                    **{f"index_{b}": Ref("index", f"dpr.{b}", d) for b in baselines}}))
    for d in cfg["methods"][name].get("variant_datasets") or [td]:
        for v in variants:
            jobs.append(Job("search", f"{name}.{v}", name, "run_variant", d, gpu=gpu, params={"variant": v},
                            keys=("evaluate.depth", *affects(name, "search.variant", at={"variants": v})),
                            systems=(f"{name}.{v}",),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", model_id(cfg, v))}))
    for d in cfg["methods"][name].get("efficiency_datasets") or [td]:
        jobs.append(Job("measure", f"{name}.efficiency", name, "measure_efficiency", d,
                        keys=("timing", "evaluate.depth", *affects(name, "measure.efficiency")),
                        systems=tuple(efficiency_systems(cfg)),
                        inputs={"data": Ref("data", dataset=d), "dpr_model": Ref("model", "dpr"),
                                "bpr_model": Ref("model", name), "dpr_index": Ref("index", "dpr", d),
                                "bpr_index": Ref("index", name, d), "hash_index": Ref("index", f"{name}.hash", d),
                                **{f"index_{b}": Ref("index", f"dpr.{b}", d) for b in baselines}}))
    for d in scale_settings(cfg)["datasets"]:
        jobs.append(Job("measure", f"{name}.scale", name, "measure_scale", d, mem_mb=10000,
                        keys=("seed", "timing", "evaluate.depth", *affects(name, "measure.scale"), f"datasets.{d}"),
                        systems=("dpr", "dpr.hnsw", "dpr.lsh", "dpr.pq", "bpr.bflat", "bpr.bhash", "bpr.no-rerank")))
    return jobs



#: settings only BPR's training reads (beside harness.methods.base.TRAINING_ONLY): L_cand, L_rerank, beta's schedule
TRAINING_ONLY = ("gamma", "cand_loss", "margin", "cand_reduction")


def start_key(cfg: Mapping[str, Any], job: Job) -> Any:
    """What makes model ``job``'s initial checkpoint and its twins' search what they are
    (harness.methods.base.start_key): on small the 8 train variants (Tables 7 / 9: gamma, the
    candidate loss, alpha) start from one checkpoint and are searched alike."""
    v = job.params.get("variant")
    return base_start_key(job.id, v, settings(cfg, v) if v is not None else {}, TRAINING_ONLY)


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    variant = job.params.get("variant")
    info = train(variant_context(ctx.cfg, variant), out, inputs["negatives"])
    return {"variant": variant, **info}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return build_index(variant_context(ctx.cfg, None, job.dataset), out, inputs["model"])


def build_hash(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    s = settings(ctx.cfg)
    return build_binary_index(s["hash_index"], inputs["source"], out, nflip=int(s["hash_nflip"]))


def build_baseline(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    s = settings(ctx.cfg)
    spec = dpr_baseline(ctx.cfg, job.params["baseline"])
    return build_dpr_baseline(spec, inputs["dpr_index"], out, train_size=s["baseline_train_size"], seed=ctx.cfg["seed"])

def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Runs of every search variant of the main model (one model load and one question encoding)."""
    bctx = variant_context(ctx.cfg, None, job.dataset)
    queries = store.read_queries(inputs["data"], job.params.get("split", "test"))
    k = ctx.cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    qvecs = dpr.BiEncoder.load(bctx, inputs["model"], encode_device(bctx.mcfg)).encode_questions([q.text for q in queries])
    t_enc = time.perf_counter() - t0
    for system in job.systems:
        v = system.partition(".")[2]
        t1 = time.perf_counter()
        s = Searcher(bctx, inputs["index"], None, variant=v, hash_dir=inputs["hash_index"])
        scores, rows = s.search(qvecs, k)
        write_run(out, system, s, queries, scores, rows, t_enc + time.perf_counter() - t1, dataset=job.dataset,
               split=job.params.get("split", "test"), search_variant=v, n_candidates=s.n_candidates,
               rerank=s.rerank, depth=k)
    return {"queries": len(queries)}


def run_variant(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """A train variant's run: its binary index (built in a temporary folder: nothing else reads it)
    searched by linear scan + rerank."""
    v = job.params["variant"]
    vctx = variant_context(ctx.cfg, v, job.dataset)
    queries = store.read_queries(inputs["data"], "test")
    t0 = time.perf_counter()
    qvecs = dpr.BiEncoder.load(vctx, inputs["model"], encode_device(vctx.mcfg)).encode_questions([q.text for q in queries])
    with tempfile.TemporaryDirectory(prefix="bpr-index-") as tmp:
        t1 = time.perf_counter()
        built = build_index(vctx, Path(tmp), inputs["model"])
        t_index = time.perf_counter() - t1
        s = Searcher(vctx, Path(tmp), None, variant="bflat")
        scores, rows = s.search(qvecs, ctx.cfg["evaluate"]["depth"])
        write_run(out, job.systems[0], s, queries, scores, rows, time.perf_counter() - t0, dataset=job.dataset,
               train_variant=v, n_candidates=s.n_candidates, depth=ctx.cfg["evaluate"]["depth"])
    # the corpus it encodes is priced per document, the rest per query (harness.cost.record)
    return {"queries": len(queries), "variant": v, "corpus_documents": int(built["documents"]),
            "corpus_seconds": round(t_index, 3)}


def run_baselines(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Runs of the DPR baseline indexes (HNSW, LSH, PQ) with DPR's question encoder (one load)."""
    dctx = Context(ctx.cfg, "dpr", job.dataset)
    queries = store.read_queries(inputs["data"], "test")
    k = ctx.cfg["evaluate"]["depth"]
    qvecs = dpr.BiEncoder.load(dctx, inputs["model"], encode_device(dctx.mcfg)).encode_questions([q.text for q in queries])
    specs = dpr_baselines(ctx.cfg)
    for system in job.systems:
        b = system.partition(".")[2]
        t0 = time.perf_counter()
        scores, rows = _DenseSystem(inputs[f"index_{b}"], specs[b]).search(qvecs, k)
        hits = hits_from_rows(read_docids(inputs[f"index_{b}"]), [q.id for q in queries], scores, rows)
        write_run_with_meta(out / f"{system}.trec", hits, system=system, meta={
            "dataset": job.dataset, "spec": specs[b], "depth": k, "seconds": round(time.perf_counter() - t0, 3)})
    return {"queries": len(queries)}


def measure_efficiency(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Index bytes and query time (protocol bpr-query-time) of every Table 1/2 system."""
    res = efficiency(ctx.cfg, str(job.dataset), dpr_model=inputs["dpr_model"], bpr_model=inputs["bpr_model"],
                     dpr_index=inputs["dpr_index"], bpr_index=inputs["bpr_index"], hash_index=inputs["hash_index"],
                     baseline_indexes={b: inputs[f"index_{b}"] for b in dpr_baselines(ctx.cfg)})
    for system, doc in res.items():
        write_json(out / f"{system}.json", doc)
        v = doc["values"]
        print(f"{system}/{job.dataset}: index {v['index_bytes']['value']:,} B, query {v['query_ms']['value']:.3f} ms")
    return {}


def measure_scale(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table 1's index sizes and query times at the synthetic dataset's scale (:func:`scale_efficiency`)."""
    scale_efficiency(ctx, str(job.dataset), out)
    return {}
