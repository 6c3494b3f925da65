"""QCR's jobs for the plan (harness/plan.py): ``declare`` (models, code indexes, runs, RRF fusions,
measures), ``search_job``, and the step functions the jobs name, each a thin call into the module
of its concern."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.fusion import fusion_job
from harness.job import Job, Ref
from harness.methods.base import Context, affects, start_key as base_start_key, training_keys, variant_model_id, wants_gpu
from harness.methods.qcr.index import code_index, nopos_index, words_index
from harness.methods.qcr.kmeans import fit_centroids, kmeans_index, kmeans_runs
from harness.methods.qcr.measure import analysis, efficiency, fig3
from harness.methods.qcr.search import search_model
from harness.methods.qcr.settings import check, grid_models, settings, train_signature
from harness.methods.qcr.train import train


def model_id(cfg: Mapping[str, Any], variant: str | None) -> str:
    """``qcr`` for the main model and for a variant whose training equals it, else ``qcr.<variant>``."""
    return variant_model_id("qcr", variant, lambda v: train_signature(settings(cfg, v)))


def _systems(prefix: str, full: bool, main: bool) -> tuple[str, ...]:
    """System ids of one model's search job: ``qcr`` + ``qcr.rescore`` ...; ``qcr.v`` + ``qcr.v-rescore`` ..."""
    sep = "." if main else "-"
    out = [prefix, f"{prefix}{sep}rescore"]
    if main:
        out.append(f"{prefix}.nopos")
    if full:
        out.append(f"{prefix}{sep}words")
    return tuple(out)


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test", variant: str | None = None
               ) -> Job:
    """Every system of one model on ``dataset`` (one model load, one question encoding)."""
    s = settings(cfg)
    main = variant is None
    mid = model_id(cfg, variant)
    full = main or variant in (s["full_variants"] or [])
    jid = mid if main else f"qcr.{variant}"
    inputs = {"data": Ref("data", dataset=dataset), "model": Ref("model", mid), "index": Ref("index", jid, dataset)}
    if full:
        inputs["words_index"] = Ref("index", f"{jid}.words", dataset)
    if main:
        inputs["nopos_index"] = Ref("index", f"{jid}.nopos", dataset)
    return Job("search", jid if split == "test" else f"{jid}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), params={"split": split, "variant": variant},
               systems=_systems(jid, full, main) if split == "test" else (jid,), inputs=inputs,
               keys=("evaluate.depth", *affects(name, "search")))


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models (main, variants, Figure 3 grid, k-means), their code indexes (and words / no-position
    indexes), one search job per model and dataset, RRF fusions, and the measure jobs."""
    s = settings(cfg)
    check(s)
    variants = list(s["variants"] or {}) + grid_models(s)
    models: dict[str | None, str] = {None: "qcr"}
    for v in variants:
        models[v] = model_id(cfg, v)
    datasets = list(s.get("datasets") or [])
    jobs = _train_jobs(cfg, name, s, models) + _model_jobs(cfg, name, s, variants, models, datasets)
    dpr_on = "dpr" in cfg["methods"] and cfg["methods"]["dpr"].get("enabled", True)
    if s["kmeans"]["enabled"] and (s["kmeans"]["encoder"] != "dpr" or dpr_on):  # else its cells say "not run"
        jobs += _kmeans_jobs(cfg, name, s, datasets)
    if datasets:
        jobs += _measure_jobs(name, s, datasets, models, dpr_on)
    return jobs


def _train_jobs(cfg: Mapping[str, Any], name: str, s: Mapping[str, Any], models: Mapping[str | None, str]
                ) -> list[Job]:
    """One train job per distinct model (a variant that trains as the main model shares ``qcr``)."""
    gpu = wants_gpu(cfg, name)
    data = {"data": Ref("data", dataset=s["train_dataset"])}
    jobs = []
    for v, mid in models.items():
        if v is not None and mid == "qcr":
            continue
        vkeys = () if v is None else (affects(name, "model.variant", at={"variants": v}) if v in (s["variants"] or {})
                                      else affects(name, "model.grid"))
        jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"variant": v}, inputs=data,
                        keys=(*_model_keys(cfg, name, settings(cfg, v)), *vkeys), mem_mb=6000))
    return jobs


def _model_keys(cfg: Mapping[str, Any], name: str, sv: Mapping[str, Any]) -> tuple[str, ...]:
    """A model's hash keys from its own settings ``sv``: the backbone it trains from (a variant's own,
    e.g. the paper's Contriever for QCR-uns.), and for generated queries a generator named by a key of
    config backbones: that backbone's definition (``training_pairs`` builds it from there)."""
    keys = training_keys(cfg, name, backbone=sv["backbone"])
    gen = sv["generator"]["model"]
    if sv["training_data"] == "generated" and gen in cfg["backbones"]:
        return (*keys, f"backbones.{gen}")
    return keys


def _model_jobs(cfg: Mapping[str, Any], name: str, s: Mapping[str, Any], variants: list[str],
                models: Mapping[str | None, str], datasets: list[str]) -> list[Job]:
    """Per model: its code index (+ words, + no-position for the main model), and per dataset its
    search job and (full variants) its RRF fusion of codes and words."""
    gpu = wants_gpu(cfg, name)
    idx_keys = affects(name, "index")
    jobs = []
    for v in [None, *variants]:
        jid = "qcr" if v is None else f"qcr.{v}"
        full = v is None or v in (s["full_variants"] or [])
        jobs.append(Job("index", jid, name, "build", gpu=gpu, params={"variant": v}, keys=idx_keys,
                        inputs={"data": Ref("data"), "model": Ref("model", models[v])}, mem_mb=4000))
        if full:
            jobs.append(Job("index", f"{jid}.words", name, "build_words", params={"variant": v}, keys=idx_keys,
                            inputs={"data": Ref("data"), "source": Ref("index", jid)}, mem_mb=4000))
        if v is None:
            jobs.append(Job("index", f"{jid}.nopos", name, "build_nopos", params={"variant": v}, keys=idx_keys,
                            inputs={"data": Ref("data"), "source": Ref("index", jid)}, mem_mb=4000))
        for d in datasets:
            jobs.append(search_job(cfg, name, d, variant=v))
            if full:
                sep = "." if v is None else "-"
                codes_sys = jid if s["rrf_codes"] == "codes" else f"{jid}{sep}rescore"
                w = float(s["rrf_weight"])
                jobs.append(fusion_job(f"{jid}{sep}rrf", name, d, [codes_sys, s["words_system"]], "rrf",
                                       keys=affects(name, "search.fusion"),
                                       rrf_k=int(s["rrf_k"]), weights=[w, 1.0 - w]))
    return jobs


def _kmeans_jobs(cfg: Mapping[str, Any], name: str, s: Mapping[str, Any], datasets: list[str]) -> list[Job]:
    """The k-means baseline: centroids, its index and words index, one search job per dataset. Its
    centroid, index and search jobs encode with the method's device, as QCR's own (the corpus's
    tokens through a BERT-base: MS MARCO's 8.8M passages on the paper profile), so they ask for a GPU
    where the method does."""
    gpu = wants_gpu(cfg, name)
    # the backbone key: encoder "backbone" reads it (with encoder dpr, DPR's model hash carries DPR's
    # backbone)
    seeded = ("seed", f"backbones.{s['backbone']}")
    kkeys = (*affects(name, "model.kmeans"), *seeded)
    ikeys = (*affects(name, "index.kmeans"), *seeded)
    enc = {"encoder": Ref("model", "dpr")} if s["kmeans"]["encoder"] == "dpr" else {}
    data = {"data": Ref("data", dataset=s["train_dataset"])}
    jobs = [Job("train", "qcr.kmeans", name, "train_kmeans", inputs={**data, **enc}, keys=kkeys, mem_mb=6000, gpu=gpu),
            Job("index", "qcr.kmeans", name, "build_kmeans", keys=ikeys, gpu=gpu,
                inputs={"data": Ref("data"), "model": Ref("model", "qcr.kmeans"), **enc}, mem_mb=4000),
            Job("index", "qcr.kmeans-words", name, "build_words", params={"kmeans": True}, keys=ikeys,
                inputs={"data": Ref("data"), "source": Ref("index", "qcr.kmeans")}, mem_mb=4000)]
    for d in datasets:
        jobs.append(Job("search", "qcr.kmeans", name, "run_kmeans", d, gpu=gpu,
                        systems=("qcr.kmeans", "qcr.kmeans-words"),
                        keys=(*affects(name, "search.kmeans"), *seeded, "evaluate.depth"),
                        inputs={"data": Ref("data", dataset=d), "model": Ref("model", "qcr.kmeans"), **enc,
                                "index": Ref("index", "qcr.kmeans", d),
                                "words_index": Ref("index", "qcr.kmeans-words", d)}))
    return jobs


def _measure_jobs(name: str, s: Mapping[str, Any], datasets: list[str], models: Mapping[str | None, str],
                  dpr_on: bool) -> list[Job]:
    """The analysis job (Figures 2, A.2, Table 2), Figure 3 (where the grid has models) and efficiency."""
    a = s["analysis"]
    ad = a["dataset"] or datasets[0]
    noent = a["noent_variant"] if a["noent_variant"] in (s["variants"] or {}) else None
    extra = {}
    if noent:
        extra = {"noent_model": Ref("model", models[noent]), "noent_index": Ref("index", f"qcr.{noent}", ad)}
    jobs = [Job("measure", "qcr.analysis", name, "measure_analysis", ad,
                systems=("qcr.fig2-positive", "qcr.fig2-hard", "qcr.fig2-random", "qcr.usage-docs",
                         "qcr.usage-queries", *((f"qcr.{noent}-usage-docs", f"qcr.{noent}-usage-queries")
                                                if noent else ()),
                         *(f"qcr.pmi-{i}" for i in range(1, int(a["pmi_codes"]) + 1))),
                keys=(*affects(name, "measure.analysis"), "seed"),
                params={"noent": noent},
                inputs={"data": Ref("data", dataset=ad), "model": Ref("model", "qcr"),
                        "index": Ref("index", "qcr", ad), "bm25": Ref("system", s["words_system"], ad),
                        **extra})]
    grid = grid_models(s)
    if grid:
        jobs.append(Job("measure", "qcr.fig3", name, "measure_fig3", ad,
                        systems=("qcr.fig3", *(f"qcr.fig3-{g.removeprefix('grid-')}" for g in grid)),
                        keys=(*affects(name, "measure.fig3"), "evaluate.ir_measures"), params={"grid": grid},
                        inputs={"data": Ref("data", dataset=ad),
                                **{f"run_{g}": Ref("system", f"qcr.{g}", ad) for g in grid}}))
    eff = ("qcr.eff-codes", "qcr.eff-rescore", "qcr.eff-words-index", "qcr.eff-bm25", "qcr.eff-dpr")
    dpr_in = {"dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", ad)} if dpr_on else {}
    jobs.append(Job("measure", "qcr.efficiency", name, "measure_efficiency", ad, systems=eff,
                    keys=("timing", "evaluate.depth", *affects(name, "measure.efficiency"), *affects("bm25", "search")),
                    inputs={"data": Ref("data", dataset=ad), "model": Ref("model", "qcr"),
                            "index": Ref("index", "qcr", ad), "words_index": Ref("index", "qcr.words", ad),
                            "bm25_index": Ref("index", "bm25", ad), **dpr_in}))
    return jobs


# --------------------------------------------------------------------------------------------
# steps: step(ctx, job, inputs, out) -> info for meta.json



#: settings only QCR's training reads (beside harness.methods.base.TRAINING_ONLY): the loss, the training
#: texts; ``schedule`` stands in the key as the code counts it sets (:func:`start_key`)
TRAINING_ONLY = ("entropy_weight", "training_data", "crop", "generator", "schedule", "chunk_size", "probe_sub_batches")


def start_key(cfg: Mapping[str, Any], job: Job) -> Any:
    """What makes model ``job``'s initial checkpoint and its twins' indexes and search what they are
    (harness.methods.base.start_key): the schedule's steps and batch sizes are training's, its code
    counts are not (the tokenizer's [QCR<i>] tokens, K at inference); on small the K-32 grid models
    and the no-entropy variant start from one checkpoint, the K-8 grid models from another."""
    from harness.methods.qcr.settings import codes_k, max_codes

    v = job.params.get("variant")
    if v is None:
        return job.id
    s = settings(cfg, v)
    return [("codes", codes_k(s), max_codes(s)), *base_start_key(job.id, v, s, TRAINING_ONLY)]


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    v = job.params.get("variant")
    s = settings(ctx.cfg, v)
    return {"variant": v, **train(ctx.cfg, s, inputs["data"], out)}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Encode the corpus into codes (``codes.npy``, doc ids) and index their strings."""
    return code_index(settings(ctx.cfg), inputs["model"], inputs["data"], out)


def build_words(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """"w/ words": the source index's code strings plus the analysed words of each passage."""
    return words_index(settings(ctx.cfg), inputs["source"], inputs["data"], out,
                       kmeans=bool(job.params.get("kmeans")))


def build_nopos(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """The source index's codes without position prefixes (the §4.2 ablation)."""
    return nopos_index(settings(ctx.cfg), inputs["source"], out)


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Codes run, rescored run, [no-position run], [codes + words run] of one model."""
    return search_model(settings(ctx.cfg), inputs, out, systems=job.systems, dataset=job.dataset,
                        split=job.params.get("split", "test"), k=int(ctx.cfg["evaluate"]["depth"]))


def train_kmeans(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """faiss k-means over a seeded sample of the training corpus's token vectors (§4.4)."""
    return fit_centroids(ctx.cfg, settings(ctx.cfg), inputs, out)


def build_kmeans(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Every corpus token replaced by its nearest centroid id (``k<id>``, one per token, no positions)."""
    return kmeans_index(ctx.cfg, settings(ctx.cfg), inputs, out)


def run_kmeans(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return kmeans_runs(ctx.cfg, settings(ctx.cfg), inputs, out, dataset=job.dataset,
                       k=int(ctx.cfg["evaluate"]["depth"]))


def measure_analysis(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 2, Figure A.2 and Table 2 (:func:`harness.methods.qcr.measure.analysis`)."""
    return analysis(ctx.cfg, settings(ctx.cfg), job.dataset, inputs, out, noent=job.params.get("noent"))


def measure_fig3(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 3: Success@100 of the grid models (batch size x K), evaluated as the evaluate stage does."""
    return fig3(ctx.cfg, job.dataset, job.params["grid"], inputs, out)


def measure_efficiency(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Index bytes, build seconds and query latency (:func:`harness.methods.qcr.measure.efficiency`)."""
    return efficiency(ctx.cfg, settings(ctx.cfg), job.dataset, inputs, out)
