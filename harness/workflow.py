"""What the generic Snakemake rules ask the harness: a job's inputs, hash and resources, and the
targets of ``reproduce_all`` — all from the plan (:mod:`harness.plan`), none of it per method.

Every function takes the Snakemake ``config`` and ``wildcards`` (``job``, ``dataset``), so the
rules in workflow/rules/ stay one line per field.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness import plan as hplan
from harness.methods.base import section

#: the rule of each stage whose jobs come from the plan -> the plan's stage
RULE_STAGE = {"train": "train", "index": "index", "search": "search", "measure": "measure", "evaluate": "search"}


def _job(cfg: Mapping[str, Any], stage: str, wc: Any) -> hplan.Job:
    dataset = getattr(wc, "dataset", None)
    return hplan.get(cfg).job(RULE_STAGE[stage], wc.job, None if stage == "train" else dataset)


def inputs(cfg: Mapping[str, Any], stage: str, wc: Any) -> dict[str, str]:
    """role -> path of a job's inputs; ``evaluate`` reads the search job's run folder and the data."""
    p = hplan.get(cfg)
    job = _job(cfg, stage, wc)
    if stage == "evaluate":
        return {"data": str(hplan.path(cfg, hplan.Ref("data", dataset=job.dataset))),
                "run": str(hplan.output(cfg, job))}
    return {role: str(path) for role, path in p.inputs(job).items()}


def job_hash(cfg: Mapping[str, Any], stage: str, wc: Any) -> str:
    """The job's hash (a rule param: a changed setting re-runs exactly the jobs that read it)."""
    p = hplan.get(cfg)
    job = _job(cfg, stage, wc)
    if stage == "evaluate":
        return p.eval_hash(job)
    return p.hash(job)


def resources(cfg: Mapping[str, Any], stage: str, wc: Any, what: str) -> int:
    """``gpu`` (0/1), ``mem_mb``, ``runtime`` (minutes) or ``threads`` (cores the scheduler books)
    of a job, as the method declared it."""
    job = _job(cfg, stage, wc)
    if what == "threads":  # the method's torch_threads, capped by scheduler.max_threads_per_job
        want = (section(cfg, job.method) or {}).get("torch_threads") or 1
        cap = (cfg.get("scheduler") or {}).get("max_threads_per_job")
        return 1 if stage == "evaluate" else int(min(want, cap) if cap else want)
    if what == "gpu":
        return int(job.gpu and stage != "evaluate")
    if what == "mem_mb":
        return 4000 if stage == "evaluate" else job.mem_mb
    if what == "runtime":
        return 60 if stage == "evaluate" else (2880 if stage == "train" and job.gpu else 720)
    raise KeyError(what)


def ids(cfg: Mapping[str, Any], stage: str) -> list[str]:
    return hplan.get(cfg).ids(RULE_STAGE[stage]) or ["none"]


def negatives_inputs(cfg: Mapping[str, Any], wc: Any) -> dict[str, str]:
    from harness.negatives import negatives_job

    return {r: str(hplan.path(cfg, ref)) for r, ref in negatives_job(cfg, wc.dataset).inputs.items()}


def negatives_hash(cfg: Mapping[str, Any], wc: Any) -> str:
    from harness.negatives import negatives_job

    return hplan.get(cfg).hash(negatives_job(cfg, wc.dataset))


def data_inputs(cfg: Mapping[str, Any], wc: Any) -> list[str]:
    """Local files a dataset's preparation reads (the smoke fixture), tracked by Snakemake."""
    from harness.datasets import input_files

    return input_files(cfg, wc.dataset)


def data_hash(cfg: Mapping[str, Any], wc: Any) -> str:
    return hplan.get(cfg).ref_hash(hplan.Ref("data", dataset=wc.dataset))


def all_outputs(cfg: Mapping[str, Any]) -> list[str]:
    """Every evaluation of a test-split search job and every measure job: what ``reproduce_all``
    asks for besides the tables, claims and regression (so every declared system is reached)."""
    p = hplan.get(cfg)
    R = hplan.results_root(cfg)
    out = [str(R / "eval" / str(j.dataset) / j.id) for j in p.concrete("search") if j.params.get("split", "test") == "test"]
    out += [str(hplan.output(cfg, j)) for j in p.concrete("measure")]
    return sorted(out)
