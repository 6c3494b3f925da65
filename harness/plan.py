"""The plan: every artifact a config produces, declared by the methods as data.

Each enabled method's module declares, from its config section, :class:`Job` records — models
(stage ``train``), indexes (``index``), runs (``search``: one job writes every system of one model
on one dataset) and efficiency figures (``measure``) — with their inputs (:class:`Ref`) and the
config keys they read. The workflow's generic stage rules ask this module for a job's inputs,
resources and hash, and run ``python -m harness <stage> --job ID [--dataset KEY]``; the same
command runs by hand. Nothing in workflow/ names a method.

Paths (under ``results/<profile>/``)::

    data/<dataset>                 negatives/<dataset>.jsonl      decontam/
    models/<job>                   indexes/<job>/<dataset>
    runs/<dataset>/<job>/<system>.trec      eval/<dataset>/<job>/<system>.json
    metrics/<dataset>/<job>/<system>.json

A job's hash covers every config key it reads and, transitively, the hashes of its inputs
(BM25 settings -> negatives -> every model trained on them; backbone definitions -> models). It
is written to the artifact's meta.json; loading an input compares it with the current config
and refuses a mismatch, naming the key that differs (:func:`check_input`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.config import lookup_key, results_root
from harness.errors import ConfigError, DataError
from harness.numerics import STAGES as NUMERIC_STAGES, identity as numeric_identity
from harness.recording import plain

from harness.job import INIT, KINDS, STAGES, Job, Ref, Stage, output_ref  # noqa: F401 (the plan's vocabulary, re-exported)


#: top-level config keys no artifact's content depends on (where results go, what the profile is
#: called, where downloads come from: files are checked by checksum; numerics is hashed as its
#: identity, harness.numerics.identity)
UNHASHED = ("profile", "description", "results_dir", "numerics", "scheduler", "data")


# --------------------------------------------------------------------------------------------
# paths


def path(cfg: Mapping[str, Any], ref: Ref) -> Path:
    """Where an input lives."""
    R = results_root(cfg)
    k = ref.kind
    if k == "data":
        return R / "data" / str(ref.dataset)
    if k == "negatives":
        return R / "negatives" / f"{ref.dataset}.jsonl"
    if k == "decontam":
        return R / "decontam"
    if k == "model":
        return R / "models" / str(ref.id)
    if k == "index":
        return R / "indexes" / str(ref.id) / str(ref.dataset)
    if k == "run":
        return R / "runs" / str(ref.dataset) / str(ref.id)
    if k == "metrics":
        return R / "metrics" / str(ref.dataset) / str(ref.id)
    if k == "eval":  # the evaluation of a search job's runs (written by the evaluate rule)
        return R / "eval" / str(ref.dataset) / str(ref.id)
    raise ConfigError(f"unknown artifact kind {k!r} (known: {', '.join((*KINDS, 'eval'))})")


def output(cfg: Mapping[str, Any], job: Job) -> Path:
    return path(cfg, output_ref(job))


def pattern(cfg: Mapping[str, Any], kind: str) -> str:
    """The output pattern of an artifact kind with Snakemake's wildcards ``{job}`` and ``{dataset}``
    (``results/smoke/indexes/{job}/{dataset}``): the rules ask for it, so each path is spelled once,
    in :func:`path`."""
    return str(path(cfg, Ref(kind, "{job}", "{dataset}")))


# --------------------------------------------------------------------------------------------
# the plan


class Plan:
    """Every job of a config, by (stage, id, dataset)."""

    def __init__(self, cfg: Mapping[str, Any], jobs: Iterable[Job]) -> None:
        self.cfg = cfg
        self.jobs: dict[tuple[str, str, str | None], Job] = {}
        for j in jobs:
            if j.stage not in STAGES:
                raise ConfigError(f"job {j.id!r} of methods.{j.method}: unknown stage {j.stage!r}")
            key = (j.stage, j.id, j.dataset)
            old = self.jobs.get(key)
            if old is not None and old != j:
                raise ConfigError(f"two different {j.stage} jobs are both named {j.id!r}"
                                  f"{' on ' + j.dataset if j.dataset else ''} (methods.{old.method}, methods.{j.method})")
            self.jobs[key] = j
        self._hash: dict[tuple[str, str | None, str | None], str] = {}
        self._systems: dict[tuple[str, str], Job] | None = None

    # ---- lookup --------------------------------------------------------------------------
    def ids(self, stage: str) -> list[str]:
        return sorted({j.id for (s, _, _), j in self.jobs.items() if s == stage})

    def job(self, stage: str, id: str, dataset: str | None = None) -> Job:
        j = self.jobs.get((stage, id, dataset))
        if j is None and dataset is not None:
            t = self.jobs.get((stage, id, None))
            if t is not None:
                return t.at(dataset)
        if j is None:
            import difflib

            known = self.ids(stage)
            close = difflib.get_close_matches(id, known, n=1)
            where = f" on dataset {dataset!r}" if dataset else ""
            raise ConfigError(f"no {stage} job {id!r}{where} in this config" + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; {stage} jobs: {', '.join(known) or 'none'}")
        return j

    def check(self) -> None:
        """Every concrete job's inputs resolve to a job of the plan (or to data); an unknown system,
        index or model named by a config section fails here, before any job runs."""
        for (stage, _, dataset), job in self.jobs.items():
            if dataset is None and Stage(stage).per_dataset:
                continue
            try:
                self.inputs(job)
            except ConfigError as exc:
                where = f"methods.{job.method}" if job.method in self.cfg["methods"] else job.method
                raise ConfigError(f"config section {where} ({stage} job {job.id!r}): {exc}") from None
        for key in ((self.cfg.get("scheduler") or {}).get("mem_mb") or {}):  # bookings name jobs of this plan
            stage, _, job_id = str(key).partition(" ")
            job_id, _, on = job_id.partition(" on ")   # '<stage> <job id> on <dataset>': that dataset's job
            if not any(s == stage and i == job_id and (not on or d == on)
                       for s, i, d in (self.closure() if on else self.jobs)):
                import difflib

                known = sorted({f"{s} {i}" for s, i, _ in self.jobs})
                close = difflib.get_close_matches(str(key), known, n=1)
                raise ConfigError(f"scheduler.mem_mb: {key!r} names no job of this plan (a key is '<stage> <job id>', "
                                  f"e.g. 'index dpr', or '<stage> <job id> on <dataset>')"
                                  + (f"; did you mean {close[0]!r}?" if close else ""),
                                  fix="spell the key as `snakemake -n` prints the job's stage and id")

    def concrete(self, stage: str) -> list[Job]:
        """Jobs with a fixed dataset (or none needed); templates are left out."""
        return [j for (s, _, d), j in sorted(self.jobs.items(), key=lambda kv: str(kv[0])) if s == stage
                and (d is not None or not Stage(stage).per_dataset)]

    def evaluated(self) -> list[Job]:
        """The search jobs on a test split: each is one evaluate job of the DAG (``reproduce_all`` asks
        for every one)."""
        return [j for j in self.concrete("search") if j.params.get("split", "test") == "test"]

    def closure(self) -> dict[tuple[str, str, str | None], Job]:
        """Every job the DAG runs: the concrete jobs and, through their inputs, the jobs that make
        those inputs (an index job per dataset is a template, made concrete for each dataset that
        reads it: :meth:`concrete` leaves it out)."""
        jobs: dict[tuple[str, str, str | None], Job] = {}
        todo = [(j.stage, j.id, j.dataset) for st in STAGES for j in self.concrete(st)]
        while todo:
            key = todo.pop()
            if key in jobs:
                continue
            jobs[key] = self.job(*key)
            todo.extend(d for d in (self.producer(ref) for ref in jobs[key].inputs.values()) if d is not None)
        return jobs

    def systems(self) -> dict[tuple[str, str], Job]:
        """(system, dataset) -> the search job whose run folder holds ``<system>.trec`` (derived once:
        the plan does not change after it is built, and every ``system`` input asks for it)."""
        if self._systems is not None:
            return self._systems
        out: dict[tuple[str, str], Job] = {}
        for j in self.concrete("search"):
            if j.params.get("split", "test") != "test" or "learning_twin_of" in j.params:
                continue
            for s in j.systems:
                if (s, j.dataset) in out:
                    raise ConfigError(f"system {s!r} on {j.dataset} is written by two search jobs: "
                                      f"{out[(s, j.dataset)].id} and {j.id}")
                out[(s, str(j.dataset))] = j
        self._systems = out
        return out

    def metric_jobs(self, system: str, dataset: str) -> list[Job]:
        """Measure jobs that write figures of ``system`` on ``dataset`` (first has precedence)."""
        return [j for j in self.concrete("measure") if j.dataset == dataset and system in j.systems
                and "learning_twin_of" not in j.params]

    # ---- inputs ---------------------------------------------------------------------------
    def run_of(self, ref: Ref) -> Ref:
        """A ``system`` ref as the ``run`` ref of the search job that writes the system."""
        if ref.kind != "system":
            return ref
        job = self.systems().get((str(ref.id), str(ref.dataset)))
        if job is None:
            import difflib

            known = sorted({s for s, d in self.systems() if d == ref.dataset})
            close = difflib.get_close_matches(str(ref.id), known, n=1)
            raise ConfigError(f"no search job writes system {ref.id!r} on {ref.dataset}"
                              + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; systems there: {', '.join(known) or 'none'}")
        return Ref("run", job.id, ref.dataset)

    def producer(self, ref: Ref) -> tuple[str, str, str | None] | None:
        """(stage, id, dataset) of the job that makes ``ref`` (None for data, which the plan does not
        make; a negatives or decontam ref names no id: its job's id is its stage's name)."""
        ref = self.run_of(ref)
        stage = Stage.writing(ref.kind)
        if stage is None:
            return None
        return stage, str(ref.id or stage.value), (ref.dataset if stage.per_dataset else None)

    def inputs(self, job: Job) -> dict[str, Path]:
        """role -> path of every input (what the rule lists and the step reads)."""
        out = {}
        for role, ref in job.inputs.items():
            ref = self.run_of(ref)
            prod = self.producer(ref)  # a run ref: run_of is the identity here
            if prod is not None:
                self.job(*prod)  # raises if nothing produces it
            out[role] = path(self.cfg, ref)
        return out

    # ---- hashes ---------------------------------------------------------------------------
    def values(self, job: Job) -> dict[str, Any]:
        """The config values a job reads (its own keys and params); a variant's entry without its runtime
        fields (:func:`without_runtime`)."""
        vals = {k: without_runtime(k, lookup_key(self.cfg, k)) for k in job.keys}
        if job.stage in NUMERIC_STAGES:  # the kernels a job ran on change its floats (harness.numerics)
            vals["numerics"] = numeric_identity(self.cfg.get("numerics", "portable"))
        if job.params:
            vals["params"] = json.loads(json.dumps(job.params, sort_keys=True, default=str))
        return vals

    def ref_hash(self, ref: Ref) -> str:
        ref = self.run_of(ref)
        key = (ref.kind, ref.id, ref.dataset)
        if key in self._hash:
            return self._hash[key]
        if ref.kind == "data":
            h = data_hash(self.cfg, str(ref.dataset))
        else:
            h = self.hash(self.job(*self.producer(ref)))  # type: ignore[misc]
        self._hash[key] = h
        return h

    def hash(self, job: Job) -> str:
        return _digest({"stage": job.stage, "id": job.id, "values": self.values(job), "inputs": self.input_hashes(job)})

    def eval_hash(self, job: Job) -> str:
        """Hash of the evaluation of a search job: the runs' hash, the evaluate settings, the answer rule."""
        return _digest({"run": self.hash(job), "evaluate": self.cfg["evaluate"],
                        "rule": lookup_key(self.cfg, f"datasets.{job.dataset}.answer_rule"),
                        "relevance": lookup_key(self.cfg, f"datasets.{job.dataset}.relevance")})

    def input_hashes(self, job: Job) -> dict[str, str]:
        return {r: self.ref_hash(ref) for r, ref in sorted(job.inputs.items())}

    # ---- what the hashes cover ----------------------------------------------------------------
    def hashed_keys(self, job: Job) -> set[str]:
        """Every config key the job's hash covers: its own keys and, through its inputs' hashes,
        theirs (a model's settings are covered in the hash of each index built from it)."""
        keys = set(job.keys)
        for ref in job.inputs.values():
            keys |= self._ref_keys(self.run_of(ref))
        return keys

    def _ref_keys(self, ref: Ref) -> set[str]:
        if ref.kind == "data":
            return {f"datasets.{ref.dataset}"}
        return self.hashed_keys(self.job(*self.producer(ref)))  # type: ignore[misc]

    def unhashed_reads(self, job: Job, reads: Iterable[str]) -> list[str]:
        """The config keys a job's step read (``settings_read`` of its meta.json) that no hash of
        the job covers, runtime settings aside (:data:`harness.methods.base.RUNTIME_KEYS`): each
        is a setting whose change would leave the artifact stale."""
        from harness.methods.base import runtime_key
        from harness.recording import covered

        hashed = self.hashed_keys(job) | set(UNHASHED)
        return sorted(k for k in reads if not covered(k, hashed) and not runtime_key(k) and _present(self.cfg, k))


def unhashed_in_results(cfg: Mapping[str, Any]) -> dict[str, list[str]]:
    """artifact folder -> the settings its step read that no hash covers, for every artifact of the
    config's results tree whose meta.json records ``settings_read`` (judged by this code's plan, so
    a fixed declaration clears an old artifact's finding)."""
    p = get(cfg)
    found: dict[str, list[str]] = {}
    for job in p.closure().values():  # index jobs per dataset too (templates made concrete)
        meta = output(cfg, job) / "meta.json"
        if not meta.exists():
            continue
        reads = json.loads(meta.read_text(encoding="utf-8")).get("settings_read")
        bad = p.unhashed_reads(job, reads or [])
        if bad:
            found[str(meta.parent)] = bad
    return dict(sorted(found.items()))


def _present(cfg: Mapping[str, Any], dotted: str) -> bool:
    """Whether the config sets a dotted key. A read of a key the config leaves out (its default is
    used) is no stale input: setting it later adds it to the hashes of the jobs that hash their
    section's keys (training_keys); reads of absent keys are checked by the smoke DAG's test."""
    node: Any = plain(cfg)
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def without_runtime(key: str, value: Any) -> Any:
    """``value`` of config key ``key`` as a hash reads it: a variant's entry (``methods.<m>.variants.<v>``)
    or ``variant_overrides`` without its runtime fields (:func:`harness.methods.base.runtime_key`:
    ``grad_cache_chunk``, ``torch_threads``, ...), which no hash covers at the section's top level
    either; so a variant trained in other sub-batches on a machine with less memory is the same model
    (the paper profile's LightRetriever LLMs set their own). Any other value as it is."""
    parts = key.split(".")
    if not (isinstance(value, Mapping) and parts[0] == "methods" and len(parts) >= 3
            and parts[2] in ("variants", "variant_overrides")):
        return value
    from harness.methods.base import runtime_key

    section = ".".join(parts[:2])
    return {f: v for f, v in value.items() if not runtime_key(f"{section}.{f}")}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_hash(cfg: Mapping[str, Any], dataset: str) -> str:
    """The identity of a prepared dataset: its config section and the local files it reads. Needs no
    plan: the data job writes it into its meta.json without declaring every method's jobs."""
    return _digest({"dataset": lookup_key(cfg, f"datasets.{dataset}"), "files": data_file_digest(cfg, dataset)})


def data_file_digest(cfg: Mapping[str, Any], dataset: str) -> str:
    """Digest of the local files a dataset's preparation reads (the smoke fixture), so that an
    edited fixture changes the hash of everything built from it."""
    from harness.datasets import input_files

    h = hashlib.sha256()
    for f in input_files(cfg, dataset):
        p = Path(f)
        h.update(p.name.encode())
        h.update(p.read_bytes() if p.exists() else b"<missing>")
    return h.hexdigest()[:16]


_PINNED: list[Any] = [None, None]  # (a config no one changes any more, its plan): see pin


def get(cfg: Mapping[str, Any]) -> Plan:
    """The plan of ``cfg`` (cached per config content; a step's recording view is read plainly:
    building the plan is not a read of its settings); the pinned config's plan by identity."""
    if _PINNED[0] is cfg:
        return _PINNED[1]
    return _cached(json.dumps(plain(cfg), sort_keys=True, default=str))


def pin(cfg: Mapping[str, Any]) -> Plan:
    """The plan of a config that is fixed from now on (Snakemake's, once the Snakefile is read), built
    once; :func:`get` then returns it by identity. Finding a plan by content serialises the whole
    config, which every input function of every job paid (a quarter of a paper-profile dry run).
    The config itself is held, so its id is never reused."""
    if _PINNED[0] is not cfg:
        _PINNED[:] = [cfg, get(cfg)]
    return _PINNED[1]


@lru_cache(maxsize=8)
def _cached(blob: str) -> Plan:
    import importlib

    from harness.methods import METHODS, STEPS

    cfg = json.loads(blob)
    # enabled methods (sections under methods) and steps (top-level sections such as reader)
    declarers = [(name, METHODS.get(name)) for name, mcfg in cfg["methods"].items() if mcfg.get("enabled", True)]
    declarers += [(name, module) for name, module in STEPS.items()
                  if cfg.get(name) is not None and cfg[name].get("enabled", True)]
    jobs: list[Job] = []
    for name, module in declarers:  # a job runs in its method's module unless it names another
        jobs += [j if j.module else replace(j, module=METHODS.get(j.method) if j.method in METHODS else module)
                 for j in importlib.import_module(module).declare(cfg, name)]
    jobs += shared_jobs(cfg, jobs)
    jobs += learning_twins(cfg, jobs)
    plan = Plan(cfg, jobs)
    plan.check()
    return plan


def checked_models(cfg: Mapping[str, Any], jobs: Iterable[Job]) -> list[Job]:
    """The train jobs whose models get a learning check against their initial checkpoint (config
    ``learning.check``: ``main``, each method's own model, the one named like the method; ``all``,
    every model that trains through the loop; ``none``)."""
    mode = (cfg.get("learning") or {}).get("check", "none")
    trains = [j for j in jobs if j.stage == "train" and j.step == "train_step" and INIT not in j.id]
    if mode == "all":
        return trains
    return [j for j in trains if j.id == j.method] if mode == "main" else []


def _collection(cfg: Mapping[str, Any], dataset: str) -> str:
    """The collection a dataset reads (its config ``id``; squad-open-ir and squad-open share one)."""
    return str((cfg.get("datasets", {}).get(dataset) or {}).get("id", dataset))


def own_collections(cfg: Mapping[str, Any], method: str) -> tuple[set[str], set[str]]:
    """The datasets method ``method`` trains on (``train_dataset`` / ``train_datasets``) and their
    collections: a test split of these is the in-distribution test set of a learning check (QCR
    trains on squad-open and is checked on squad-open-ir's 2,351 questions, the same collection, not
    on SciFact's 300 out-of-domain ones)."""
    sec = cfg["methods"].get(method) or {}
    names = {sec["train_dataset"]} if sec.get("train_dataset") else set(sec.get("train_datasets") or [])
    return names, {_collection(cfg, d) for d in names}


def learning_twins(cfg: Mapping[str, Any], jobs: Iterable[Job]) -> list[Job]:
    """The learning check's controls (harness.learning): for each checked model ``M``, ``M@init``
    (the same train step inside :func:`harness.train.init_checkpoint`: its weights before
    training), a twin of each index built from ``M``, and a twin of ``M``'s own search job (the
    search job named ``M``, on one dataset: one of ``M``'s training collections where it is searched
    there, else the first by name) reading the twins: the same code, settings and queries, the
    untrained weights. A twin search job writes its systems under its own id; it is no system's
    producer. Its params ``learning_twin_of`` map each of its systems to {checked model: that model's
    own system}.

    Checked models whose start is one computation share one twin: the method's
    ``start_key(cfg, train_job)`` (where its module has one) says what makes a model's initial
    checkpoint, its index and its search what they are (harness.methods.base.start_key: its settings
    but for those only training reads), and models of one method with equal keys, searched on the
    same dataset with systems of the same kinds, are compared with the twin of the first of them
    (variants that differ in training alone: on small, 7 of DensePhrases' share one ``@init``, 8 of
    BPR's, 6 of SVDR's).

    A measure job that scores a model's own training objective (params ``learning``: the name of the
    per-question figure its files list, e.g. DensePhrases' reading comprehension, ``f1``) gets a twin
    too, built by its module's ``learning_twin(cfg, job, starts)`` (``starts``: checked model -> the
    model whose twin stands for its start), with ``learning_twin_of`` in the same form; a model with
    such a twin is compared with its start on it as well as on its search (harness.learning)."""
    import importlib

    jobs = list(jobs)
    searched = {j.id for j in jobs if j.stage == "search"}
    checked = {j.id: j for j in checked_models(cfg, jobs) if j.id in searched}  # the reader: no search job
    own: dict[str, Job] = {}  # checked model -> its own search job on the dataset its twin searches
    for m, job in checked.items():
        names, colls = own_collections(cfg, job.method)
        cands = [j for j in jobs if j.stage == "search" and j.id == m and j.dataset
                 and j.params.get("split", "test") == "test"]
        if cands:
            own[m] = min(cands, key=lambda j: (j.dataset not in names, _collection(cfg, j.dataset) not in colls, j.dataset))
    starts: dict[str, str] = {}  # checked model -> the model whose twin is its start
    firsts: dict[Any, str] = {}
    for m, job in checked.items():
        module = importlib.import_module(job.module)
        key = module.start_key(cfg, job) if hasattr(module, "start_key") else m
        # the same dataset and systems of the same kinds (``<model>-rescore``...): compared position by position
        where = (own[m].dataset, [s.removeprefix(m) for s in own[m].systems]) if m in own else None
        starts[m] = firsts.setdefault(json.dumps([job.method, key, where], sort_keys=True, default=str), m)
    models = set(starts.values())
    out = [replace(j, id=j.id + INIT, params={**j.params, "init": True}) for j in checked.values() if j.id in models]
    indexes = {j.id for j in jobs if j.stage == "index" and any(r.kind == "model" and r.id in models for r in j.inputs.values())}

    def swap(inputs: Mapping[str, Ref]) -> dict[str, Ref]:
        return {role: replace(r, id=r.id + INIT) if (r.kind == "model" and r.id in models)
                or (r.kind == "index" and r.id in indexes) else r for role, r in inputs.items()}

    out += [replace(j, id=j.id + INIT, inputs=swap(j.inputs)) for j in jobs if j.stage == "index" and j.id in indexes]
    for m in sorted(models & set(own)):
        j = own[m]
        twin_of = {s: {o: own[o].systems[i] for o in checked if starts[o] == m and o in own}
                   for i, s in enumerate(j.systems)}
        out.append(replace(j, id=j.id + INIT, inputs=swap(j.inputs), params={**j.params, "learning_twin_of": twin_of}))
    for j in jobs:  # the objective's measure: the method says which of its systems each checked model feeds
        if j.stage == "measure" and j.params.get("learning") and j.dataset:
            twin = importlib.import_module(j.module).learning_twin(cfg, j, starts)
            out += [replace(twin, module=twin.module or j.module)] if twin is not None else []
    return out


def shared_jobs(cfg: Mapping[str, Any], jobs: Iterable[Job]) -> list[Job]:
    """The jobs no method declares but methods' jobs read: the decontamination (where config key
    ``decontam`` names training sets) and the BM25 hard negatives of each dataset a job asks for.
    Ordinary jobs of the plan (listed, hashed, checked as inputs like any other); each runs by its
    own command (``python -m harness negatives`` / ``decontam --config``), which calls ``job.step``
    of ``job.module`` with the paths the plan resolves."""
    from harness.decontam.report import decontam_job, plan as decontam_sets
    from harness.negatives import negatives_job

    wanted = sorted({str(ref.dataset) for j in jobs for ref in j.inputs.values() if ref.kind == "negatives"})
    out = [negatives_job(cfg, d) for d in wanted]
    if decontam_sets(cfg)[0]:
        out.append(decontam_job(cfg))
    return out


# --------------------------------------------------------------------------------------------
# artifact checks


def check_input(p: Plan, role: str, ref: Ref) -> Path:
    """The input's path after comparing its meta.json config hash with the current config's."""
    ref = p.run_of(ref)
    where = path(p.cfg, ref)
    if not where.exists():
        raise DataError(f"input {role} ({where}) does not exist", fix="run the rule that produces it first")
    meta_path = Path(f"{where}.meta.json") if where.is_file() else where / "meta.json"
    if not meta_path.exists():
        raise DataError(f"{where} has no meta.json (an incomplete artifact)", fix=f"delete {where} and re-run")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    want = p.ref_hash(ref)
    got = meta.get("config_hash")
    if got != want and ref.kind == "data":  # no job of the plan: the dataset's settings and local files
        raise ConfigError(f"{where} was prepared with config hash {got}, the current config gives {want}: config key "
                          f"datasets.{ref.dataset} (or a local file it reads) changed since",
                          fix=f"delete {where} (or run snakemake with --forcerun {where}) so that it is prepared again")
    if got != want:
        prod = _producing_job(p, ref)
        raise ConfigError(f"{where} was built with config hash {got}, the current config gives {want}: "
                          f"{_what_differs(p, prod, meta)}",
                          fix=f"delete {where} (or run snakemake with --forcerun) so that it is rebuilt")
    return where


def _producing_job(p: Plan, ref: Ref) -> Job:
    return p.job(*p.producer(ref))  # type: ignore[misc]


def _what_differs(p: Plan, job: Job, meta: Mapping[str, Any]) -> str:
    old = meta.get("config_values") or {}
    new = p.values(job)
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if keys:
        k = keys[0]
        return f"config key {k} changed ({old.get(k)!r} -> {new.get(k)!r})" + (
            f" and {len(keys) - 1} more" if len(keys) > 1 else "")
    old_in = meta.get("input_hashes") or {}
    for role, h in p.input_hashes(job).items():
        if old_in.get(role) != h:
            return f"its input {role} ({path(p.cfg, job.inputs[role])}) changed"
    return "the artifact predates config hashes"


def resolve(cfg: Mapping[str, Any], stage: str, id: str, dataset: str | None) -> tuple[Plan, Job, dict[str, Path]]:
    """The job and its checked inputs, for a stage command."""
    p = get(cfg)
    job = p.job(stage, id, dataset)
    return p, job, {role: check_input(p, role, ref) for role, ref in job.inputs.items()}
