"""The stage commands every generic rule runs: ``python -m harness <stage> --job ID [--dataset KEY] --out PATH``.

``train``, ``index``, ``search`` and ``measure`` look the job up in the plan (:mod:`harness.plan`),
check every input's meta.json hash against the current config, and call the step the method
declared, ``step(ctx, job, inputs, out)``, on a temporary folder that is moved into place only when
the step succeeds (a killed job leaves nothing that looks finished). The folder gets a meta.json:
the job, its config hash and the values behind it, the inputs' hashes, commit, versions, hardware,
seconds, bytes, and whatever the step returned.

``evaluate`` scores every run of one search job's folder (one job per folder, not per system).
``data``, ``negatives`` and ``decontam`` run the jobs no method declares (harness.plan.shared_jobs);
``decontam-report`` renders LightRetriever's Tables 6 and 7 from the decontamination.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from harness.config import add_config_argument, load_config, names_config
from harness.io import atomic_path
from harness.job import Stage
from harness.recording import recording

def _args(stage: str, argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"python -m harness {stage}", description=__doc__.split("\n")[0])
    add_config_argument(ap)
    ap.add_argument("--job", required=True, help="job id of the plan (`python -m harness plan` lists them)")
    ap.add_argument("--dataset", help="dataset key (every stage but train)")
    ap.add_argument("--out", type=Path, required=True)
    return ap.parse_args(argv)


def run_stage(stage: str, argv: list[str]) -> int:
    import importlib

    from harness import numerics

    args = _args(stage, argv)
    requested = numerics.requested(args.config)
    mode = numerics.mode_for(stage, requested)
    numerics.apply(mode)  # before numpy, torch and faiss load (load_config imports them)
    from harness import plan as hplan
    from harness.meta import write_meta
    from harness.methods.code import code_id
    from harness.methods.base import Context, sub_batch_key

    cfg = load_config(args.config)
    numerics.check(cfg, requested)
    p, job, inputs = hplan.resolve(cfg, stage, args.job, args.dataset)
    from harness.workflow import announce

    announce(cfg, job)
    fn = getattr(importlib.import_module(job.module), job.step)
    from harness import cost

    cost.allow_fallbacks(cfg.get("device_fallback", False))  # the rehearsal: cuda -> cpu, fp16 -> fp32, recorded
    view, reads = recording(cfg)  # which settings the step reads: meta.json settings_read
    ctx = Context(view, job.method, job.dataset)
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        t_step = time.perf_counter()
        with _init_only(job), cost.memory_guard(f"{stage} {job.id}", cfg.get("device_fallback", False),
                                                sub_batch=sub_batch_key(job.method) if stage == "train" else None):
            info: dict[str, Any] = dict(fn(ctx, job, inputs, tmp) or {})  # (_init_only: harness.learning's control)
        if stage == "train":
            from harness.train import loss_check

            info["learning"] = {"init_checkpoint": bool(job.params.get("init")), "loss": loss_check(tmp)}
        info["step_seconds"] = round(time.perf_counter() - t_step, 4)  # the method's own work, imports included
        info["cost"] = cost.record(stage, info, info["step_seconds"])  # seconds per unit, peaks (python -m harness estimate)
        if cost.fallbacks():
            info["fallbacks"] = cost.fallbacks()
        unhashed = p.unhashed_reads(job, reads)  # a harness bug if any: the artifact goes stale when one changes
        write_meta(tmp, Stage(stage).artifact, spec=info.pop("spec", job.id), config_hash=p.hash(job),
                   seconds=time.perf_counter() - t0,
                   extra={"job": job.id, "method": job.method, "dataset": job.dataset, "systems": list(job.systems),
                          "profile": cfg.get("profile"),   # python -m harness estimate prices the rehearsal's alone
                          # the method's source as it ran (harness.ledger.pick)
                          "code": code_id(str(stage), job.method, job.step, module=job.module),
                          "config_values": p.values(job), "input_hashes": p.input_hashes(job),
                          "inputs": {r: str(v) for r, v in inputs.items()}, "numerics": numerics.describe(mode),
                          "settings_read": sorted(reads), "settings_unhashed": unhashed,
                          "warm_start": bool(os.environ.get("HARNESS_WARM_CHILD")),  # harness.warm
                          **info})
    where = f" on {job.dataset}" if job.dataset else ""
    if unhashed:
        from harness.progress import console

        console(f"warning: {stage} {job.id}{where} read settings its hash does not cover: {', '.join(unhashed)}")
    print(f"{stage} {job.id}{where}: done in {time.perf_counter() - t0:.1f}s"
          + (f" ({', '.join(job.systems)})" if job.systems else ""))
    return 0


def _init_only(job: Any):
    """:func:`harness.train.init_checkpoint` for a train job with param ``init`` (the plan's
    learning twins), else nothing."""
    from contextlib import nullcontext

    if job.stage == "train" and job.params.get("init"):
        from harness.train import init_checkpoint

        return init_checkpoint()
    return nullcontext()


def train(argv: list[str]) -> int:
    return run_stage("train", argv)


def index(argv: list[str]) -> int:
    return run_stage("index", argv)


def search(argv: list[str]) -> int:
    return run_stage("search", argv)


def measure(argv: list[str]) -> int:
    return run_stage("measure", argv)


def evaluate(argv: list[str]) -> int:
    """Every ``<system>.trec`` of a search job's folder -> ``<out>/<system>.json``."""
    from harness import plan as hplan
    from harness.evaluate.run import PER_QUERY_SUFFIX, evaluate_run, write_per_query
    from harness.io import write_json

    args = _args("evaluate", argv)
    cfg = load_config(args.config)
    p = hplan.get(cfg)
    job = p.job("search", args.job, args.dataset)
    from harness.workflow import announce

    announce(cfg, job, "evaluate")
    run_dir = hplan.check_input(p, "run", hplan.Ref("run", job.id, job.dataset))
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        for system in job.systems:
            per_query: dict[str, dict[str, float]] = {}
            res = evaluate_run(cfg, str(job.dataset), run_dir / f"{system}.trec", split=job.params.get("split", "test"),
                               per_query=per_query)
            res["system"] = system
            write_json(tmp / f"{system}.json", res)
            write_per_query(tmp / f"{system}{PER_QUERY_SUFFIX}", per_query)  # what the claims' paired tests read
            print(f"{system}/{job.dataset}: " + ", ".join(f"{k}={v:.4f}" for k, v in res["measures"].items()))
    return 0


def negatives(argv: list[str]) -> int:
    """`python -m harness negatives --dataset KEY --out FILE`: BM25 hard negatives of a training
    dataset (:mod:`harness.negatives`), with their meta.json."""
    from harness import negatives as hneg, plan as hplan
    from harness.io import write_json, write_jsonl

    ap = argparse.ArgumentParser(prog="python -m harness negatives", description=hneg.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(ap)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    p = hplan.get(cfg)
    job = p.job("negatives", "negatives", args.dataset)  # the plan's job (harness.plan.shared_jobs)
    inputs = {r: hplan.check_input(p, r, ref) for r, ref in job.inputs.items()}
    from harness import cost
    from harness.meta import provenance
    from harness.methods.code import code_id

    cost.allow_fallbacks(False)
    t0 = time.perf_counter()
    records = hneg.mine(cfg, args.dataset, inputs["data"], inputs["index"])
    write_jsonl(args.out, records)
    seconds = time.perf_counter() - t0
    # its cost per training question (python -m harness estimate), with the meta.json a stage job's has
    write_json(Path(f"{args.out}.meta.json"), {"kind": "negatives", "job": job.id, "method": job.method,
                                                 "code": code_id("negatives", job.method, job.step),
                                                 "dataset": args.dataset, "config_hash": p.hash(job),
                                                 "config_values": p.values(job),
                                                 "inputs": {r: str(v) for r, v in inputs.items()},
                                                 **provenance(), "seconds": round(seconds, 3),
                                                 "bytes": args.out.stat().st_size, "queries": len(records),
                                                 "cost": cost.record("negatives", {"queries": len(records)}, seconds)})
    n_empty = sum(1 for r in records if not r["negatives"])
    print(f"{len(records)} training questions, {n_empty} without a BM25 negative")
    return 0


def plan_main(argv: list[str]) -> int:
    """`python -m harness plan`: list every job of the config (stage, id, dataset, method.step, systems)."""
    from harness import plan as hplan

    ap = argparse.ArgumentParser(prog="python -m harness plan", description=plan_main.__doc__)
    add_config_argument(ap)
    args = ap.parse_args(argv)
    p = hplan.get(load_config(args.config))
    for (stage, id_, dataset), job in sorted(p.jobs.items(), key=lambda kv: tuple(map(str, kv[0]))):
        print(f"{stage:8} {id_:28} {dataset or '*':14} {job.method}.{job.step}"
              + (f"  -> {' '.join(job.systems)}" if job.systems else ""))
    return 0


def data(argv: list[str]) -> int:
    """`python -m harness data --dataset KEY --out DIR`: fetch, verify and convert one dataset."""
    from harness import plan as hplan
    from harness.datasets import prepare
    from harness.errors import ConfigError
    from harness.meta import write_meta

    ap = argparse.ArgumentParser(prog="python -m harness data", description=data.__doc__)
    add_config_argument(ap)
    ap.add_argument("--dataset", required=True, help="dataset key (config key datasets.<key>)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.dataset not in cfg["datasets"]:
        raise ConfigError(f"unknown dataset {args.dataset!r}; config key datasets defines: {', '.join(cfg['datasets'])}")
    dcfg = cfg["datasets"][args.dataset]
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        info = prepare(args.dataset, dcfg, cfg, tmp)
        write_meta(tmp, "dataset", spec=dcfg["id"], config_hash=hplan.data_hash(cfg, args.dataset),
                   seconds=time.perf_counter() - t0, extra={"key": args.dataset, "family": dcfg["family"], **info})
    print(f"{args.dataset}: {info.get('documents')} documents, queries {info.get('queries')}")
    return 0


def decontam(argv: list[str]) -> int:
    """`python -m harness decontam --config YAML... --out-dir DIR`: the plan's decontamination job
    (its query sets from config key ``decontam``, its config hash in meta.json); with
    ``--train``/``--test`` instead of ``--config``, any query files (:func:`harness.decontam.stage.main`)."""
    from harness import plan as hplan
    from harness.decontam import stage
    from harness.decontam.report import DEFAULT_K, DEFAULT_TABLE7, plan as query_sets

    if not names_config(argv):
        return stage.main(argv)
    ap = argparse.ArgumentParser(prog="python -m harness decontam",
                                 description="the plan's decontamination job (config key decontam)",
                                 epilog="without --config: python -m harness decontam --train NAME=PATH ... "
                                        "--test NAME=PATH ... --out-dir DIR")
    add_config_argument(ap)
    ap.add_argument("--out-dir", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    p = hplan.get(cfg)
    job = p.job("decontam", "decontam")
    for role, ref in job.inputs.items():
        hplan.check_input(p, role, ref)
    train, test = query_sets(cfg)
    dc = cfg["decontam"]
    from harness import cost

    cost.allow_fallbacks(False)
    meta = stage.run([(s.name, s.path(cfg)) for s in train], [(s.name, s.path(cfg)) for s in test], args.out_dir,
                     k=int(dc.get("k", DEFAULT_K)), table7_per_set=int(dc.get("table7_per_set", DEFAULT_TABLE7)),
                     workers=int(dc.get("workers", 1)),
                     identity={"job": job.id, "method": job.method, "config_hash": p.hash(job),
                               "config_values": p.values(job), "input_hashes": p.input_hashes(job)},
                     costed=True)
    stage.summary(meta, args.out_dir)
    return 0


def decontam_report(argv: list[str]) -> int:
    """`python -m harness decontam-report`: LightRetriever's Tables 6 and 7 measured on this
    profile's decontamination (:func:`harness.decontam.report.render`)."""
    from harness.decontam.report import render

    ap = argparse.ArgumentParser(prog="python -m harness decontam-report",
                                 description="render LightRetriever Tables 6/7 for this profile's decontamination")
    add_config_argument(ap)
    ap.add_argument("--decontam", type=Path, required=True, help="output folder of rule decontam")
    ap.add_argument("--out", type=Path, required=True,
                    help="markdown of Table 6 (its .csv, 7-measured.md and 7-measured.csv are written beside it)")
    args = ap.parse_args(argv)
    paths = render(load_config(args.config), args.decontam, args.out)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
