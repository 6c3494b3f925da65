"""DensePhrases' jobs: ``declare`` (models, variants and the query-side fine-tuned model, their phrase
dumps + indexes, searches, measure jobs), ``search_job`` and the training steps."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.methods.base import Context, affects, start_key as base_start_key, training_keys, wants_gpu
from harness.methods.densephrases.index import index_specs
from harness.methods.densephrases.qs import train_qs
from harness.methods.densephrases.settings import NAME, _sys, check, model_id, model_of, settings, variants
from harness.methods.densephrases.train import train
from harness.job import INIT, Job, Ref


def _train_keys(cfg: Mapping[str, Any], s: Mapping[str, Any], v: str | None) -> tuple[str, ...]:
    keys = training_keys(cfg, NAME, backbone=s["backbone"])
    return keys if v is None else (*keys, *affects(NAME, "model.variant", at={"variants": v}))


def _variant_keys(v: str | None, artifact: str) -> tuple[str, ...]:
    """A variant's own settings, which its search and RC steps read (``artifact``: ``search.variant``,
    ``measure.variant``): hashed there as well as through its model, since a variant may read an earlier
    variant's model (:func:`model_of`)."""
    return () if v is None else affects(NAME, artifact, at={"variants": v})


def answer_systems(cfg: Mapping[str, Any], s: Mapping[str, Any], dataset: str) -> list[tuple[str, Job]]:
    """Every (system, search job) whose answers are scored on ``dataset``."""
    out = []
    jobs = [search_job(cfg, NAME, dataset)]
    if s["qs"]["enabled"]:
        jobs.append(search_job(cfg, NAME, dataset, qs_model=True))
    if dataset in s["variant_datasets"]:
        jobs += [search_job(cfg, NAME, dataset, variant=v) for v in variants(s)]
    for j in jobs:
        out += [(sid, j) for sid in j.systems]
    return out


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test", variant: str | None = None,
               qs_model: bool = False) -> Job:
    """The phrase search of one model on one dataset: systems = the model's id for its main index,
    plus ``.flat`` / ``.opq``-style ids for the other indexes of the main model."""
    s = settings(cfg, variant)
    mid = f"{NAME}.qs" if qs_model else model_id(variant)
    base = model_of(cfg, variant)
    names = ["main"] if (variant is not None or qs_model) else list(index_specs(s, False))
    systems = tuple(mid if n == "main" else _sys(mid, n) for n in names)
    jid = mid if split == "test" else f"{mid}.{split}"
    return Job("search", jid, name, "run_search", dataset, systems=systems, gpu=wants_gpu(cfg, name),
               params={"variant": variant, "split": split, "indexes": names, "qs": qs_model},
               keys=(*affects(name, "search"), "evaluate.depth", *_variant_keys(variant, "search.variant")),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", mid if qs_model else base),
                       "index": Ref("index", base, dataset)}, mem_mb=4000)


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models (main, variants, the query-side fine-tuned model), their phrase dumps + indexes,
    searches, and the measure jobs (EM/F1, reading comprehension, speed, Table C.3)."""
    s = settings(cfg)
    check(cfg, s)
    gpu = wants_gpu(cfg, name)
    td = s["train_dataset"]
    data = {"data": Ref("data", dataset=td)}
    jobs: list[Job] = []
    for v in [None, *variants(s)]:
        vs = settings(cfg, v)
        mid = model_id(v)
        if model_of(cfg, v) != mid:  # the same training as an earlier variant: its model and index serve both
            continue
        inputs = dict(data)
        if vs["distill"] or vs["qg"]:
            inputs["reader"] = Ref("model", "reader")
        jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"variant": v}, inputs=inputs,
                        keys=_train_keys(cfg, vs, v), mem_mb=6000))
        jobs.append(Job("index", mid, name, "build", gpu=gpu, params={"variant": v, "gold_only": v is not None},
                        keys=affects(name, "index"),
                        inputs={"data": Ref("data"), "model": Ref("model", mid), "train_data": Ref("data", dataset=td)},
                        mem_mb=8000))
    if s["qs"]["enabled"]:
        jobs.append(Job("train", f"{NAME}.qs", name, "qs_step", gpu=gpu, params={"variant": None},
                        keys=(*affects(name, "model.qs"), "seed"),
                        inputs={**data, "model": Ref("model", NAME), "index": Ref("index", NAME, td)}, mem_mb=6000))
    for d in s["datasets"]:
        pairs = answer_systems(cfg, s, d)
        jobs += list({j.id: j for _, j in pairs}.values())
        jobs.append(Job("measure", f"{NAME}.em", name, "measure_em", d, systems=tuple(sid for sid, _ in pairs),
                        keys=(f"datasets.{d}.answer_rule",),
                        inputs={"data": Ref("data", dataset=d),
                                **{f"run_{i}": Ref("system", sid, d) for i, (sid, _) in enumerate(pairs)}}))
    for d in s["rc_datasets"]:
        jobs.append(rc_job(cfg, name, d, [None, *(variants(s) if d in s["variant_datasets"] else [])]))
    t = s["timing"]
    if t["dataset"]:
        d = t["dataset"]
        inputs = {"data": Ref("data", dataset=d), "model": Ref("model", NAME), "index": Ref("index", NAME, d)}
        systems = [f"{NAME}.speed"]
        if t["baseline"] and cfg["methods"].get("dpr", {}).get("enabled", False) and cfg.get("reader"):
            inputs.update({"dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", d),
                           "reader": Ref("model", "reader")})
            systems.append(f"{NAME}.speed-dpr")
        jobs.append(Job("measure", f"{NAME}.speed", name, "measure_speed", d, systems=tuple(systems),
                        keys=(*affects(name, "measure.speed"), "reader.top_k"), inputs=inputs,
                        mem_mb=8000))
    if s["c3_datasets"]:
        jobs.append(Job("measure", f"{NAME}.c3", name, "measure_c3", td,
                        systems=tuple(f"{NAME}.c3-{r}" for r in s["c3_datasets"]), keys=affects(name, "measure.c3"),
                        inputs={f"data_{r}": Ref("data", dataset=k) for r, k in s["c3_datasets"].items()}))
    return jobs


def rc_job(cfg: Mapping[str, Any], name: str, dataset: str, vs: list[str | None],
           twin_of: Mapping[str, Mapping[str, str]] | None = None) -> Job:
    """Reading comprehension (D = {p}) of the models of variants ``vs`` on ``dataset``: system ``i``
    (``densephrases.rc``, ``densephrases.<v>-rc``) reads variant ``i``'s model. It scores the objective
    every variant trains for (L_single, Eq. 6: the answer's span within its gold passage; Table 6's
    "None" trains on nothing else), so the learning check compares it with the models' start beside
    their search (params ``learning``: each question's F1, graded as the search's nDCG@10 is).
    ``twin_of``: the check's twin (harness.plan.learning_twins), on the initial checkpoints of ``vs``'
    models; system -> {checked model: its own system of this measure} (params ``learning_twin_of``)."""
    systems = tuple(_sys(model_id(v), "rc") for v in vs)
    params: dict[str, Any] = {"variants": vs, "learning": "f1"}
    if twin_of is not None:
        params["learning_twin_of"] = {k: dict(m) for k, m in twin_of.items()}
    init = INIT if twin_of is not None else ""
    return Job("measure", f"{NAME}.rc{init}", name, "measure_rc", dataset, systems=systems,
               params=params, keys=(*affects(name, "measure.rc"), f"datasets.{dataset}.answer_rule",
                                    *dict.fromkeys(k for v in vs for k in _variant_keys(v, "measure.variant"))),
               inputs={"data": Ref("data", dataset=dataset),
                       "train_data": Ref("data", dataset=settings(cfg)["train_dataset"]),
                       **{f"model_{i}": Ref("model", model_of(cfg, v) + init) for i, v in enumerate(vs)}})


def learning_twin(cfg: Mapping[str, Any], job: Job, starts: Mapping[str, str]) -> Job | None:
    """The learning check's twin of the reading-comprehension job ``job`` (harness.plan.learning_twins):
    the same measure on the initial checkpoints that stand for its checked models (``starts``: checked
    model -> the model whose ``@init`` twin is its start), each read once."""
    twin_of: dict[str, dict[str, str]] = {}
    firsts: dict[str, str | None] = {}  # start model -> the first variant of the job whose model starts there
    for v, own in zip(job.params["variants"], job.systems, strict=True):
        m = model_of(cfg, v)
        if m in starts:
            first = firsts.setdefault(starts[m], v)
            twin_of.setdefault(_sys(model_id(first), "rc"), {}).setdefault(m, own)
    return rc_job(cfg, job.method, str(job.dataset), list(firsts.values()), twin_of=twin_of) if twin_of else None


#: settings only DensePhrases' training reads (beside harness.methods.base.TRAINING_ONLY)
TRAINING_ONLY = ("loss_weights", "negatives", "prebatch_batches", "prebatch_start", "distill", "distill_direction", "qg",
                 "grad_cache_chunk")


def start_key(cfg: Mapping[str, Any], job: Job) -> Any:
    """What makes model ``job``'s initial checkpoint, and its twins' index and search, what they are
    (harness.methods.base.start_key): the variants' D_small indexes and searches are one configuration,
    so on small 7 of the 9 variant models start from one checkpoint; the main model (its own dump and
    indexes) is its own."""
    v = job.params.get("variant")
    return base_start_key(job.id, v, settings(cfg, v) if v is not None else {}, TRAINING_ONLY)


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    v = job.params.get("variant")
    return {"variant": v, **train(ctx.cfg, settings(ctx.cfg, v), inputs, out)}


def qs_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return train_qs(ctx.cfg, settings(ctx.cfg), inputs, out)
