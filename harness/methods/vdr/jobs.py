"""Jobs (harness/plan.py): what methods.svdr / methods.vdr produce, and the thin steps that produce it."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.methods import METHODS
from harness.methods.base import (Context, affects, start_key as base_start_key, training_keys, variant_model_id,
                                  wants_gpu)
from harness.methods.vdr.index import write_emb_index, write_token_index
from harness.methods.vdr.measure import (intrain, latency, latency_baselines, latency_rerank,
                                         write_index_metrics)
from harness.methods.vdr.scale import scale_measure
from harness.methods.vdr.search import search_ablation, search_variants
from harness.methods.vdr.settings import (SYNTHETIC_DEFAULTS, TOKEN_INDEX_KEYS, scale_settings,
                                          settings, train_signature)
from harness.methods.vdr.synthetic import synthetic
from harness.methods.vdr.train import train
from harness.job import Job, Ref

SEARCH_VARIANTS = ("full", "alpha", "beta")


def _family(cfg: Mapping[str, Any]) -> list[str]:
    """Enabled methods served by this package, in name order (svdr before vdr)."""
    return sorted(n for n, mc in cfg["methods"].items()
                  if n in METHODS and METHODS.get(n) == __package__ and mc.get("enabled", True))


def _token_owner(cfg: Mapping[str, Any], name: str) -> str:
    """The family method whose token index this one shares (same tokenizer, length, skip_vocab)."""
    want = {k: settings(cfg["methods"][name], None, name)[k] for k in TOKEN_INDEX_KEYS}
    for other in _family(cfg):
        if {k: settings(cfg["methods"][other], None, other)[k] for k in TOKEN_INDEX_KEYS} == want:
            return other
    return name


def model_id(cfg: Mapping[str, Any], name: str, ablation: str | None) -> str:
    """Model id of a method's main model or ablation: an ablation whose training settings equal an
    enabled family method's main model (``ref`` = svdr and ``nosp`` = vdr when variant_overrides is
    empty), or an earlier ablation's (:func:`harness.methods.base.variant_model_id`), reuses that model."""
    if ablation is None:
        return name
    def signature(a: str | None) -> dict[str, Any]:
        return train_signature(settings(cfg["methods"][name], a, name))
    want = signature(ablation)
    for other in _family(cfg):
        if train_signature(settings(cfg["methods"][other], None, other)) == want:
            return other
    names = list(cfg["methods"][name].get("variants") or {})
    earlier = names[:names.index(ablation)] if ablation in names else names
    return variant_model_id(name, ablation, signature, earlier, prefix="abl-")


def _model_jobs(cfg: Mapping[str, Any], name: str, td: str, gpu: bool, tok: str) -> list[Job]:
    """The token index ``<owner>.token``, the model ``<m>``, the embedding index ``<m>.emb`` and the
    ablation models ``<m>.abl-<a>`` that reuse no other model."""
    owner = _token_owner(cfg, name)
    model_keys = training_keys(cfg, name)
    backbone = settings(cfg["methods"][owner], None, owner)["backbone"]
    jobs = [Job("index", tok, owner, "build_token", inputs={"data": Ref("data")},  # T(D): the backbone's tokenizer
                keys=(*affects(owner, "index.token"), f"backbones.{backbone}"), mem_mb=4000),
            Job("train", name, name, "train_step", gpu=gpu, keys=model_keys,
                inputs={"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td),
                        "token_index": Ref("index", tok, td)}),
            Job("index", f"{name}.emb", name, "build_emb", gpu=gpu, keys=affects(name, "index.emb"),
                inputs={"data": Ref("data"), "model": Ref("model", name)})]
    for a in cfg["methods"][name].get("variants") or {}:
        mid = model_id(cfg, name, a)
        if mid.startswith(f"{name}.abl-"):
            jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"ablation": a},
                            keys=(*model_keys, *affects(name, "model.variant", at={"variants": a})),
                            inputs={"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td),
                                    "token_index": Ref("index", tok, td)}))
    return jobs


def _ablation_search_jobs(cfg: Mapping[str, Any], name: str, td: str, gpu: bool, tok: str) -> list[Job]:
    """One search job per ablation model and ablation dataset (systems <m>.abl-<a>-full|beta)."""
    mc = cfg["methods"][name]
    ablations = list(mc.get("variants") or {})
    jobs = []
    for d in (mc.get("variant_datasets") or [td]) if ablations else []:
        for a in ablations:
            mid = model_id(cfg, name, a)
            jobs.append(Job("search", f"{name}.abl-{a}", name, "run_ablation_search", d, gpu=gpu,
                            keys=("evaluate.depth",), params={"ablation": a},
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", mid),
                                    "token_index": Ref("index", tok, d)},
                            systems=(f"{name}.abl-{a}-full", f"{name}.abl-{a}-beta")))
    return jobs


def _measure_jobs(cfg: Mapping[str, Any], name: str, d: str, gpu: bool, tok: str) -> list[Job]:
    """The efficiency figures on one efficiency dataset: index facts, Table 2 (latency, baselines),
    Table 3 (in-training retrieval), Table 5 (synthetic index), as the section asks."""
    mc = cfg["methods"][name]
    lat = mc.get("latency") or {}
    jobs = [Job("measure", f"{name}.index", name, "measure_index", d, mem_mb=2000,
                inputs={"token_index": Ref("index", tok, d), "emb_index": Ref("index", f"{name}.emb", d)},
                systems=(f"{name}.index", f"{name}.index-token", f"{name}.index-emb"))]
    if lat:
        ldepths = sorted(lat.get("rerank_depths") or [])
        jobs.append(Job("measure", f"{name}.latency", name, "measure_latency", d, gpu=gpu,
                        keys=("timing", "evaluate.depth", *affects(name, "measure.latency")),
                        inputs={"data": Ref("data", dataset=d), "model": Ref("model", name)},
                        systems=tuple(f"{name}.lat-{r}" for r in
                                      ("full", "alpha", "beta", *(f"beta-m{k}" for k in ldepths)))))
    base = lat.get("baselines") or []
    if base:
        jobs.append(Job("measure", f"{name}.lat-baselines", name, "measure_baselines", d,
                        keys=("timing", "evaluate.depth", *affects(name, "measure.lat-baselines")),
                        inputs={"data": Ref("data", dataset=d), "bm25_index": Ref("index", "bm25", d),
                                "dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", d)},
                        systems=tuple(f"{name}.lat-{b}" for b in base)))
    if mc.get("intrain"):
        jobs.append(Job("measure", f"{name}.intrain", name, "measure_intrain", d,
                        keys=("timing", *affects(name, "measure.intrain")),
                        inputs={"data": Ref("data", dataset=d), "model": Ref("model", name),
                                "token_index": Ref("index", tok, d), "bm25_index": Ref("index", "bm25", d),
                                "dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", d)},
                        systems=tuple(f"{name}.intrain-{x}" for x in ("bm25", "dpr", "beta"))))
    if mc.get("synthetic"):
        syn = {**SYNTHETIC_DEFAULTS, **mc["synthetic"]}
        jobs.append(Job("measure", f"{name}.synthetic", name, "measure_synthetic", d,
                        keys=("seed", "timing", *affects(name, "measure.synthetic")),
                        systems=(*(f"{name}.synth-a{a}" for a in syn["densities"]),
                                 *(f"{name}.synth-bs{b}" for b in syn["batch_sizes"]))))
    return jobs


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models ``<m>`` and ``<m>.abl-<a>`` (Figure 3 ablations), the token index ``<owner>.token``
    (shared by methods with the same tokenizer settings) and the embedding index ``<m>.emb``; one
    search job per dataset (systems <m>.full|alpha|beta|beta-m<k>), one per ablation model on the
    ablation datasets (<m>.abl-<a>-full|beta), and the efficiency figures on the efficiency datasets."""
    mc = cfg["methods"][name]
    td, gpu = settings(mc, None, name)["train_dataset"], wants_gpu(cfg, name)
    tok = f"{_token_owner(cfg, name)}.token"
    jobs = _model_jobs(cfg, name, td, gpu, tok)
    jobs += [search_job(cfg, name, d) for d in mc.get("datasets", [])]
    jobs += _ablation_search_jobs(cfg, name, td, gpu, tok)
    for d in mc.get("efficiency_datasets") or [td]:
        jobs += _measure_jobs(cfg, name, d, gpu, tok)
    for d in scale_settings(mc)["datasets"]:
        jobs.append(Job("measure", f"{name}.scale", name, "measure_scale", d, mem_mb=10000,
                        keys=("seed", "timing", "evaluate.depth", *affects(name, "measure.scale"), f"datasets.{d}"),
                        systems=tuple(f"{name}.{x}" for x in (
                            "lat-beta", "lat-full", "lat-dpr", "intrain-beta", "intrain-dpr", "intrain-bm25",
                            "index", "index-token", "index-emb"))))
    return jobs


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    """Systems <m>.full|alpha|beta (those ``searches`` names) and <m>.beta-m<k> on ``dataset`` from
    one model load; on another split (the reader's training passages) the beta search alone. The
    embedding index is an input only where a system reads it (full, alpha, the re-ranks)."""
    m = cfg["methods"][name]
    asked = m.get("searches") or SEARCH_VARIANTS
    searches = [v for v in SEARCH_VARIANTS if v in asked] if split == "test" else ["beta"]
    depths = sorted(m.get("rerank_depths") or []) if split == "test" else []
    if depths and "beta" not in searches:
        raise ConfigError(f"methods.{name}.rerank_depths re-rank the beta run, but methods.{name}.searches "
                          f"{searches} has no beta",
                          fix=f"add beta to methods.{name}.searches or set rerank_depths: []")
    variants = (*searches, *(f"beta-m{k}" for k in depths))
    tok = f"{_token_owner(cfg, name)}.token"
    inputs = {"data": Ref("data", dataset=dataset), "model": Ref("model", name),
              "token_index": Ref("index", tok, dataset)}
    if set(variants) != {"beta"}:
        inputs["emb_index"] = Ref("index", f"{name}.emb", dataset)
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), params={"depths": depths, "split": split},
               keys=("evaluate.depth", *affects(name, "search")), inputs=inputs,
               systems=tuple(f"{name}.{v}" for v in variants))


# ---- steps: step(ctx, job, inputs, out) -> info for meta.json ---------------------------------

#: settings only VDR's training reads (beside harness.methods.base.TRAINING_ONLY): the losses, the
#: retrieved negatives' schedule and pool
TRAINING_ONLY = ("sp_loss", "loss", "temperature", "retrieval_start", "retrieval_top_m")


def start_key(cfg: Mapping[str, Any], job: Job) -> Any:
    """What makes model ``job``'s initial checkpoint and its twins' indexes and search what they are
    (harness.methods.base.start_key): on small SVDR's ablation models (Table 5: m, retrieval negatives,
    hard negatives, the semi-parametric loss) start from one checkpoint and are searched alike."""
    a = job.params.get("ablation")
    return base_start_key(job.id, a, settings(cfg["methods"][job.method], a, job.method) if a is not None else {},
                          TRAINING_ONLY)


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return train(ctx, out, inputs["negatives"], token_index_dir=inputs["token_index"],
                 ablation=job.params.get("ablation"))


def build_token(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """T(D): the binary token index (spec token-csr; the tokenizer only). ``build_seconds``
    excludes reading the corpus and writing the file."""
    return write_token_index(ctx, inputs["data"], out)


def build_emb(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """E_θ(D): the embedding index (sparse top-k vectors, spec sparse-csr). ``build_seconds`` =
    encoding + CSR assembly (reading the corpus and writing the file excluded)."""
    return write_emb_index(ctx, inputs["data"], inputs["model"], out)


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """full <E(q), E(D)>, alpha <T(q), E(D)>, beta <E(q), T(D)> and beta + re-rank(m) (the top m of
    the beta run re-scored by <E(q), E(p)>, E(p) read from the embedding index: the vectors the method
    embeds on the fly), from one model load and one question encoding."""
    return search_variants(ctx, inputs, out, job.method, job.systems, job.dataset,
                           job.params.get("split", "test"), job.params.get("depths") or [])


def run_ablation_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """An ablation model's full run (its embedding index built in memory) and beta run (the shared
    token index)."""
    return search_ablation(ctx, inputs, out, job.method, job.params["ablation"], job.dataset)


def measure_index(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    write_index_metrics(ctx, inputs["token_index"], inputs["emb_index"], out / f"{job.method}.index.json")
    return {}


def measure_latency(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    latency(ctx, inputs["model"], out)
    depths = sorted((ctx.mcfg.get("latency") or {}).get("rerank_depths") or [])
    if depths:
        latency_rerank(ctx, inputs["model"], out / f"{job.method}.lat-beta.json", depths, out)
    return {}


def measure_baselines(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    latency_baselines(ctx, inputs, out)
    return {}


def measure_intrain(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    intrain(ctx, inputs["model"], inputs["token_index"], inputs["bm25_index"], inputs["dpr_model"],
            inputs["dpr_index"], out)
    return {}


def measure_synthetic(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    synthetic(ctx, out)
    return {}


def measure_scale(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Tables 2, 3 and the text's index figures at the synthetic dataset's scale (:func:`scale_measure`)."""
    scale_measure(ctx, out)
    return {}
