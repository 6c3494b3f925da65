"""What the generic Snakemake rules ask the harness: a job's inputs, hash and resources, and the
targets of ``reproduce_all`` — all from the plan (:mod:`harness.plan`), none of it per method.

Every function takes the Snakemake ``config`` and ``wildcards`` (``job``, ``dataset``), so the
rules in workflow/rules/ stay one line per field. Snakemake's config is fixed once the Snakefile has
been read, so each function finds the plan by pinning it (:func:`harness.plan.pin`): one plan per run,
found by identity, here and in the modules the rules call.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import plan as hplan
from harness.job import INIT, Stage
from harness.methods.base import section


def _stage(rule: str) -> Stage:
    """The plan's stage of a generic rule: the stage's own rule, or ``evaluate`` (a search job's runs)."""
    return Stage.SEARCH if rule == "evaluate" else Stage(rule)


def _job(cfg: Mapping[str, Any], stage: str, wc: Any) -> hplan.Job:
    """The plan's job of a rule's wildcards (a rule without ``{job}``, negatives or decontam, runs the
    one job its stage has per dataset or in all, named as the stage)."""
    st = _stage(stage)
    return hplan.pin(cfg).job(st, getattr(wc, "job", st.value), getattr(wc, "dataset", None) if st.per_dataset else None)


def inputs(cfg: Mapping[str, Any], stage: str, wc: Any) -> dict[str, str]:
    """role -> path of a job's inputs; ``evaluate`` reads the search job's run folder and the data."""
    p = hplan.pin(cfg)
    job = _job(cfg, stage, wc)
    if stage == "evaluate":
        return {"data": str(hplan.path(cfg, hplan.Ref("data", dataset=job.dataset))),
                "run": str(hplan.output(cfg, job))}
    return {role: str(path) for role, path in p.inputs(job).items()}


def job_hash(cfg: Mapping[str, Any], stage: str, wc: Any) -> str:
    """The job's hash (a rule param: a changed setting re-runs exactly the jobs that read it)."""
    p = hplan.pin(cfg)
    job = _job(cfg, stage, wc)
    if stage == "evaluate":
        return p.eval_hash(job)
    return p.hash(job)


def resources(cfg: Mapping[str, Any], stage: str, wc: Any, what: str) -> int:
    """``gpu`` (0/1), ``mem_mb``, ``runtime`` (minutes) or ``threads`` (cores the scheduler books)
    of a job, as the method declared it."""
    job = _job(cfg, stage, wc)
    if what == "threads":  # the threads the job runs (torch's; a Lucene method's), capped by scheduler.max_threads_per_job
        sec = section(cfg, job.method) or {}
        want = sec.get("torch_threads") or sec.get("threads") or 1
        cap = (cfg.get("scheduler") or {}).get("max_threads_per_job")
        return 1 if stage == "evaluate" else int(min(want, cap) if cap else want)
    if what == "gpu":
        return int(job.gpu and stage != "evaluate")
    if what == "mem_mb":
        return 4000 if stage == "evaluate" else booked_mem_mb(cfg, job)
    if what == "runtime":
        return 60 if stage == "evaluate" else (2880 if stage == "train" and job.gpu else 720)
    raise KeyError(what)


def booked_mem_mb(cfg: Mapping[str, Any], job: hplan.Job) -> int:
    """The memory (MB) a job books: the profile's ``scheduler.mem_mb`` entry for it (``"<stage> <job
    id>"``, on every dataset: what an index it builds or loads holds at the profile's scale, from the
    cost estimate) or what its method declared (``Job.mem_mb``). A learning check's ``@init`` twin
    builds and loads an index of the same shape: it books what its twin's entry books; a variant's
    train job (``bpr.a0``) without an entry of its own books its method's (``train bpr``: the same
    training corpora held), else what its method declared. ``"<stage> <job id> on <dataset>"`` books
    one dataset's job (LightRetriever's index of MS MARCO, not of SciFact)."""
    booked = ((cfg.get("scheduler") or {}).get("mem_mb") or {})
    own = job.id.replace(INIT, "")
    # a variant's train job holds what its method's does (the same training corpora)
    base = booked.get(f"{job.stage} {job.method}", job.mem_mb) if str(job.stage) == "train" else job.mem_mb
    twin = booked.get(f"{job.stage} {own}", base)
    found = booked.get(f"{job.stage} {job.id}", twin)
    return int(booked.get(f"{job.stage} {job.id} on {job.dataset}", found) if job.dataset else found)


def _served(cfg: Mapping[str, Any]) -> dict[tuple[str, str, str | None], set[tuple[str, str]]]:
    """job key -> the (paper, table) pairs whose cells it produces, directly (a search job through its
    evaluation, a measure job) or upstream of them (models, indexes): derived once per plan."""
    from harness.tables.matrix import published, resolve_table
    from harness.published import PAPERS

    p = hplan.pin(cfg)
    cached = getattr(p, "_served_tables", None)
    if cached is not None:
        return cached
    by_output = {}
    for j in p.concrete("search") + p.concrete("measure"):
        out = hplan.output(cfg, j) if j.stage != "search" else hplan.path(cfg, hplan.Ref("eval", j.id, j.dataset))
        by_output[str(out)] = (j.stage, j.id, j.dataset)
    served: dict[tuple[str, str, str | None], set[tuple[str, str]]] = {}

    def visit(key: tuple[str, str, str | None], tables: set[tuple[str, str]]) -> None:
        if tables <= served.get(key, set()):
            return
        served.setdefault(key, set()).update(tables)
        for ref in p.job(*key).inputs.values():
            prod = p.producer(ref)
            if prod is not None:
                visit(prod, tables)

    for paper in PAPERS:
        for t in published(paper)["tables"]:
            _, cells = resolve_table(cfg, paper, t["id"])
            for key in {by_output.get(str(o)) for c in cells if c.kind == "measured" for o in c.outputs} - {None}:
                visit(key, {(paper, t["id"])})
    p._served_tables = served  # type: ignore[attr-defined]  # the plan is cached per config
    return served


SERVES_FILE = "serves.json"


def _key(job: hplan.Job) -> str:
    return f"{job.stage}/{job.id}/{job.dataset or ''}"


def serves_text(tables: set[tuple[str, str]]) -> str:
    """``svdr Table 1, 2; bpr Table 8`` (or what the job is for when no table cell reads it)."""
    if not tables:
        return "no paper table (claims, regression or a figure of a measure job only)"
    by_paper: dict[str, list[str]] = {}
    for paper, table in sorted(tables):
        by_paper.setdefault(paper, []).append(table)
    return "; ".join(f"{paper} Table {', '.join(ts)}" for paper, ts in by_paper.items())


def serves_map(cfg: Mapping[str, Any]) -> dict[str, str]:
    """``<stage>/<job>/<dataset>`` -> the paper tables that job serves, for every concrete job of the plan."""
    served = _served(cfg)
    p = hplan.pin(cfg)
    jobs = [j for stage in ("train", "index", "search", "measure") for j in p.concrete(stage)]
    jobs += [p.job(*k) for k in served if k[0] == "index"]  # index templates instantiated per dataset
    out = {_key(j): serves_text(served.get((j.stage, j.id, j.dataset), set())) for j in jobs}
    for j in jobs:  # a learning twin serves the check of its model (harness.learning), not a table
        if hplan.INIT in j.id:
            twin_of = j.params.get("learning_twin_of") or {}  # system -> {checked model: its system}
            model = ", ".join(sorted({m for ms in twin_of.values() for m in ms})) or j.id.split(hplan.INIT)[0]
            out[_key(j)] = f"the learning check of {model} (its initial checkpoint, harness/learning.py)"
    return out


def dry_run_argv(argv: list[str]) -> bool:
    """Whether a Snakemake command line asks for a dry run: ``-n``, ``--dry-run``/``--dryrun``, or
    ``-n`` among combined short flags (``-np``)."""
    for a in argv:
        if a == "--":
            break
        if a in ("--dry-run", "--dryrun") or (a.startswith("-") and not a.startswith("--") and a[1:].isalpha()
                                              and "n" in a[1:] and len(a) <= 4):
            return True
    return False


def write_serves(cfg: Mapping[str, Any]) -> Path:
    """``<results>/<profile>/serves.json`` (rewritten only when it changes): the Snakefile writes it
    once per run, so that a job prints the tables it serves without deriving them again."""
    import json

    from harness.config import results_root
    from harness.io import atomic_write_text

    path = results_root(cfg) / SERVES_FILE
    text = json.dumps(serves_map(cfg), indent=0, sort_keys=True) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return path


def announce(cfg: Mapping[str, Any], job: hplan.Job, stage: str | None = None) -> None:
    """A job's first line, on the console (Snakemake's output) and in its log: what it is and which
    paper tables it serves (from serves.json; nothing said when the job runs without the workflow)."""
    import json

    from harness.progress import console
    from harness.config import results_root

    path = results_root(cfg) / SERVES_FILE
    if not path.exists():
        return
    text = json.loads(path.read_text(encoding="utf-8")).get(_key(job))
    if text:
        where = f" on {job.dataset}" if job.dataset else ""
        console(f"{stage or job.stage} {job.id}{where}: serves {text}")


def ids(cfg: Mapping[str, Any], stage: str) -> list[str]:
    return hplan.pin(cfg).ids(_stage(stage)) or ["none"]


def data_inputs(cfg: Mapping[str, Any], wc: Any) -> list[str]:
    """Local files a dataset's preparation reads (the smoke fixture), tracked by Snakemake."""
    from harness.datasets import input_files

    return input_files(cfg, wc.dataset)


def data_hash(cfg: Mapping[str, Any], wc: Any) -> str:
    return hplan.pin(cfg).ref_hash(hplan.Ref("data", dataset=wc.dataset))


def all_outputs(cfg: Mapping[str, Any]) -> list[str]:
    """Every evaluation of a test-split search job and every measure job: what ``reproduce_all``
    asks for besides the tables, claims and regression (so every declared system is reached)."""
    p = hplan.pin(cfg)
    out = [str(hplan.path(cfg, hplan.Ref("eval", j.id, j.dataset))) for j in p.evaluated()]
    out += [str(hplan.output(cfg, j)) for j in p.concrete("measure")]
    return sorted(out)


#: Snakemake's default ``--max-jobs-per-timespan 100/1s`` as (jobs, seconds), the limit steady_scheduler drops
SNAKEMAKE_DEFAULT_RATE = (100, 1)


def steady_scheduler(workflow: Any) -> bool:
    """Stop Snakemake's local scheduler from spinning (called from the Snakefile's ``onstart``).

    Snakemake 9's scheduler loop starts a ``threading.Timer`` of its job-rate limiter's timespan
    (default ``--max-jobs-per-timespan 100/1s``) on every pass, and every finished job wakes the loop
    once more, so each finished job adds a chain of passes that lasts the whole run (snakemake#3744,
    open): near the end of a 304-job smoke run the loop ran some 300 times a second (170,000 timer
    threads started in 20 minutes) and the Snakemake process took a third of one of the machine's two
    cores from the jobs. A local run needs no submission-rate limit: drop it, as Snakemake does for a
    dry run. Only on local execution and only the default limit (:data:`SNAKEMAKE_DEFAULT_RATE`): a
    cluster run's limit, and any other the user set, stays. True when it was dropped."""
    sched = getattr(workflow, "scheduler", None)
    limiter = getattr(sched, "job_rate_limiter", None)
    if limiter is None or not getattr(workflow, "local_exec", False):
        return False
    if (getattr(limiter, "max_jobs", None), getattr(limiter, "timespan", None)) != SNAKEMAKE_DEFAULT_RATE:
        return False
    sched.job_rate_limiter = None
    return True
