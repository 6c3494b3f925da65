"""LightRetriever's jobs (harness/plan.py): models (main and variants), their indexes, one search job
per model and evaluation set, the hybrid fusions, Figure 5 and Table 1; and the thin step functions
the jobs name."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.methods.base import Context, affects, start_key as base_start_key, training_keys, wants_gpu
from harness.methods.lightretriever import measure
from harness.methods.lightretriever.index import build_index
from harness.methods.lightretriever.search import Searcher
from harness.methods.lightretriever.settings import (
    NAME,
    check,
    eval_datasets,
    model_id,
    needs_sparse,
    settings,
    systems_of,
    variants,
)
from harness.methods.lightretriever.train import train
from harness.models.runtime import torch_for
from harness.job import Job, Ref


def _train_keys(cfg: Mapping[str, Any], s: Mapping[str, Any], v: str | None) -> tuple[str, ...]:
    keys = training_keys(cfg, NAME, at={"instructions": s["train_datasets"]})
    keys += tuple(f"datasets.{k}" for k in s["train_datasets"])
    if v is not None:
        keys += affects(NAME, "model.variant", at={"variants": v})
        if s["backbone"] != cfg["methods"][NAME]["backbone"]:
            keys += (f"backbones.{s['backbone']}",)
    return keys


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test", variant: str | None = None
               ) -> Job:
    """Every system of one model on ``dataset`` but the hybrid (one model load, one cache table)."""
    s = settings(cfg, variant)
    mid = model_id(variant)
    kinds = systems_of(settings(cfg), variant)
    systems = [kinds[k] for k in ("dense", "base", "sparse") if k in kinds]
    if variant is None and split == "test":
        systems += [f"{NAME}.topk{k}" for k in s["sparse_topk"]]
    if variant is not None and split == "test":
        systems += [f"{mid}-d{d}" for d in s["mrl_dims"] or []]
    return Job("search", mid if split == "test" else f"{mid}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), systems=tuple(systems) if split == "test" else (mid,),
               params={"split": split, "variant": variant},
               keys=("evaluate.depth", *affects(name, "search", at={"instructions": dataset})),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", mid),
                       "index": Ref("index", mid, dataset)})


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models (main and variants), their indexes of any dataset, one search job per model and
    evaluation set, the hybrid fusions, and the Table 1 speed job."""
    from harness.fusion import fusion_job

    s = settings(cfg)
    check(cfg, s)
    m, gpu = f"methods.{name}", wants_gpu(cfg, name)
    data = {}
    for key in s["train_datasets"]:
        data[f"data_{key}"] = Ref("data", dataset=key)
        data[f"negatives_{key}"] = Ref("negatives", dataset=key)
    data["decontam"] = Ref("decontam")
    jobs: list[Job] = []
    for v in [None, *variants(s)]:
        vs = settings(cfg, v)
        mid = model_id(v)
        jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"variant": v}, inputs=data,
                        keys=_train_keys(cfg, vs, v), mem_mb=8000))
        jobs.append(Job("index", mid, name, "build", gpu=gpu, params={"variant": v, "sparse": needs_sparse(s, v)},
                        keys=affects(name, "index"),
                        inputs={"data": Ref("data"), "model": Ref("model", mid)}, mem_mb=8000))
        kinds = systems_of(s, v)
        for d in eval_datasets(s, variant=v is not None):
            jobs.append(search_job(cfg, name, d, variant=v))
            if "hybrid" in kinds:
                wd, wsp = (float(x) for x in s["hybrid_weights"])
                jobs.append(fusion_job(kinds["hybrid"], name, d, [kinds["dense"], kinds["sparse"]], "interpolate",
                                       keys=affects(name, "search.fusion"), alpha=wd / (wd + wsp)))
    jobs += _fig5_jobs(cfg, s)
    sp = s["speed"]
    if sp["dataset"]:
        if sp["dataset"] not in cfg["datasets"]:
            raise ConfigError(f"{m}.speed.dataset: unknown dataset {sp['dataset']!r}")
        bs = [f"{NAME}.speed-bs{b}" for b in sp["batch_sizes"]]
        shapes = [f"{NAME}.speed-{sh}-bs{b}" for sh in sp["shapes"] for b in sp["shape_batch_sizes"]]
        # on the method's device: Table 1's GPU columns (the full-size encoder and the lookup on CUDA) are
        # timed where the job has a GPU, which a cluster gives it only when it books one
        jobs.append(Job("measure", f"{NAME}.speed", name, "measure_speed", sp["dataset"], systems=(*bs, *shapes),
                        keys=affects(name, "measure.speed"), mem_mb=12000, gpu=gpu,
                        inputs={"data": Ref("data", dataset=sp["dataset"]), "model": Ref("model", NAME)}))
    return jobs


def fig5_points(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, list[tuple[int, str]]]:
    """Figure 5's points: dense = [(dims, system)] of the MRL variant (its full size last), sparse =
    [(top-k, system)] of the main model; empty lists where the profile has neither."""
    mrl_v = next((v for v in variants(s) if settings(cfg, v)["mrl_dims"]), None)
    dense = []
    if mrl_v is not None and "dense" in systems_of(s, mrl_v):
        vs = settings(cfg, mrl_v)
        dense = [(int(d), f"{model_id(mrl_v)}-d{d}") for d in sorted(vs["mrl_dims"])] + [(0, model_id(mrl_v))]
    sparse = [(int(k), f"{NAME}.topk{k}") for k in sorted(s["sparse_topk"] or [])]
    return {"dense": dense, "sparse": sparse}


def _fig5_jobs(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> list[Job]:
    """One measure job per dataset where both Figure 5 curves are searched."""
    pts = fig5_points(cfg, s)
    if not pts["dense"] and not pts["sparse"]:
        return []
    vds = eval_datasets(s, variant=True)
    out = []
    for d in [x for x in s["datasets"] if x in vds]:
        runs = {f"run_{sid}": Ref("system", sid, d) for _, sid in pts["dense"] + pts["sparse"]}
        n = max(len(pts["dense"]), len(pts["sparse"]))
        out.append(Job("measure", f"{NAME}.fig5", NAME, "measure_fig5", d,
                       systems=tuple(f"{NAME}.fig5-{kind}-{i}" for kind in ("dense", "sparse") for i in range(n)
                                     if i < len(pts[kind])),
                       keys=("evaluate.ir_measures",), params={"points": {k: [list(p) for p in v] for k, v in pts.items()}},
                       inputs={"data": Ref("data", dataset=d), **runs}))
    return out


# --------------------------------------------------------------------------------------------
# steps



#: settings only LightRetriever's training reads (beside harness.methods.base.TRAINING_ONLY): its losses
TRAINING_ONLY = ("kl", "flops_weight", "flops_ramp_steps", "temperature", "sparse_temperature", "grad_cache_chunk")


def start_key(cfg: Mapping[str, Any], job: Job) -> Any:
    """What makes model ``job``'s initial checkpoint and its twins' indexes and search what they are
    (harness.methods.base.start_key): on small the no-KL variant starts where ``ref`` does."""
    v = job.params.get("variant")
    return base_start_key(job.id, v, settings(cfg, v) if v is not None else {}, TRAINING_ONLY)


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    v = job.params.get("variant")
    return {"variant": v, **train(ctx.cfg, settings(ctx.cfg, v), inputs, out)}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Encode the corpus once: the dense faiss index (``dense/``) and, where the model's sparse side is
    searched, the Lucene impact index (``sparse/``) and the float sparse matrix (``sparse.npz``)."""
    return build_index(ctx.cfg, inputs, out, sparse=bool(job.params.get("sparse")))


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """The dense (light), full-size baseline and sparse runs of one model (+ Figure 5's top-k / MRL runs)."""
    torch_for(ctx.mcfg)
    return Searcher(ctx.cfg, job, inputs).write_runs(job.systems, out)


def measure_fig5(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 5 (``measure.fig5``): nDCG@10 against the dense dims and sparse terms kept, ``fig5.png``."""
    return measure.fig5(ctx.cfg, job, inputs, out)


def measure_speed(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table 1 (``measure.speed``): query-encoding speed of the trained model and of paper-sized shapes."""
    return measure.speed(ctx.cfg, job, inputs, out)
