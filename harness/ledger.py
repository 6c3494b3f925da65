"""The cost ledger (#28): what rehearsal jobs cost where they ran, committed under ``configs/costs/``
so that ``python -m harness estimate`` projects the paper profile on a fresh checkout, and so that
the measurements of different machines (a CPU box, a GPU node lent for an hour) add up instead of
vanishing with their ``results/`` folders.

One JSON-lines file per machine (:func:`slug` of its hardware), one line per measured job: the job's
meta.json trimmed to what the estimate reads (:data:`KEPT`: its cost, config values and hash,
fallbacks, bytes, an index's spec and fixed bytes, hardware, the harness commit and time it ran; a
search job also the documents of the index it read), and one line per job that failed or did not
finish, with its log's one-line cause. ``python -m harness estimate --record`` writes the ledger of
the machine it runs on from ``results/rehearsal``: a job measured again replaces its line, a job
that now succeeded drops its failure, a job that failed since it was measured keeps its measured line
beside the failure. Reading picks, per job, the record to project from
(:func:`pick`): one measured on a GPU for a job the profile books a GPU for, then one whose settings
are today's rehearsal's (its ``config_hash``), then one of today's code of the job's step (its ``code``:
:func:`harness.methods.code.code_id`), then the reference machine's, then the newest. Each projected row names its source
(the file, the commit, the date) and says where the job's settings changed since it was measured.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.job import Stage

#: the committed ledgers, one file per machine
LEDGER_DIR = Path("configs/costs")
#: the meta.json fields a ledger line keeps (what harness.estimate reads, and the provenance)
KEPT = ("kind", "job", "method", "dataset", "config_hash", "git_commit", "created", "versions", "hardware", "bytes",
        "documents", "cost", "config_values", "fallbacks", "grad_cache_chunk", "spec", "fixed_bytes", "code",
        "batch_capped_at", "generator")


def slug(hw: Mapping[str, Any]) -> str:
    """A machine's file name: its GPU (where the machine had one) or its CPU, vector ISA, cores and
    memory, e.g. ``amd-epyc-avx2-2-cores-23.5gb``; ``unknown`` where the record names none."""
    gpu = hw.get("gpu")
    text = str(gpu) if gpu else (f"{hw.get('cpu', '')} {hw.get('simd', '')} {hw['cpus']} cores {hw.get('mem_gb', '')}gb"
                                 if hw.get("cpu") and hw.get("cpus") else "")
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown"


#: stages whose jobs search an index (their cost per query grows with its documents: the ledger keeps them)
SEARCHING = ("search", "negatives")


def job_key(d: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(stage, job, dataset) of a measured job's meta.json or ledger line: the identity the plan,
    today's rehearsal hashes and the ledger's lines share."""
    return str(Stage.writing(str(d["kind"]))), str(d["job"]), d.get("dataset")


def log_of(stage: str, job: str, dataset: str | None) -> str:
    """The Snakemake log of a stage job, relative to the results folder (workflow/rules/<stage>.smk;
    the shared jobs': workflow/rules/negatives.smk, decontam.smk)."""
    if stage == "negatives":
        return f"logs/negatives/{dataset}.log"
    if stage == "decontam":
        return "logs/decontam.log"
    return f"logs/{stage}/{job}.log" if not dataset else f"logs/{stage}/{job}-{dataset}.log"


def kept_fraction(d: Mapping[str, Any]) -> float | None:
    """The fraction of its tokens a phrase dump kept, of an index job's meta.json (``dump.kept_fraction``)
    or ledger line (``kept_fraction``); None where it built no dump."""
    dump = d.get("dump")
    got = d.get("kept_fraction", dump.get("kept_fraction") if isinstance(dump, Mapping) else None)
    return float(got) if got is not None else None


def entry(d: Mapping[str, Any], searched: int | None = None) -> dict[str, Any]:
    """A ledger line of a measured job's meta.json ``d`` (``searched``: documents of the index a
    search job read, which its line cannot look up later)."""
    out = {k: d[k] for k in KEPT if d.get(k) is not None}
    kept = kept_fraction(d)
    if kept is not None:
        out["kept_fraction"] = kept   # a phrase dump's tokens kept (harness.estimate.kept_fractions)
    if searched:
        out["documents_searched"] = int(searched)
    return out


def measured_jobs(root: Any) -> list[dict[str, Any]]:
    """Every finished job's meta.json under ``root`` that has a ``cost`` (train, index, search, measure,
    the decontamination; the hard negatives' ``<file>.meta.json``); one written before meta.hardware
    named the CPU's vector ISA takes this machine's where every other field of its hardware is this
    machine's. A ``bytes`` given per file (the decontamination's) counts as their total."""
    from harness.meta import hardware

    this = hardware()
    out = []
    for meta in sorted(m for m in Path(root).rglob("*meta.json") if m.name == "meta.json" or m.name.endswith(".meta.json")):
        try:
            d = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and "cost" in d and d.get("job") and Stage.writing(str(d.get("kind"))) is not None:
            hw = d.get("hardware") or {}
            if "simd" not in hw and hw and all(this.get(k) == v for k, v in hw.items()):
                # written before meta.hardware named the vector ISA, on a machine like this one in every field it
                # names: this machine's (the same name covers AVX2 and AVX-512 EPYCs, ~1.7x apart on a BERT step)
                d = {**d, "hardware": {**hw, "simd": this.get("simd")}}
            if isinstance(d.get("bytes"), Mapping):
                d = {**d, "bytes": sum(int(v) for v in d["bytes"].values())}
            out.append({**d, "_path": str(meta)})
    return out


def documents_searched(root: Any, meta: Mapping[str, Any]) -> int | None:
    """Documents of the index a measured search job read (its input's meta.json, found under ``root``
    past ``results/<profile>/``, else as recorded); None where none says."""
    for value in (meta.get("inputs") or {}).values():
        p = Path(str(value))
        # the measured folder first: the path as recorded may name another run's index (a results/ tree
        # beside the working directory)
        for folder in ([Path(root).joinpath(*p.parts[2:])] if len(p.parts) > 2 else []) + [p]:
            try:
                n = json.loads((folder / "meta.json").read_text(encoding="utf-8")).get("documents")
            except (OSError, ValueError, TypeError, AttributeError):
                continue
            if isinstance(n, int) and n > 0:
                return n
    return None


def log_failures(root: Any) -> list[tuple[str, str]]:
    """(log, why) of every job under ``root`` that failed: its log's last ``error: ...`` line (the
    harness's one-line error), or, for a train, index, search or measure job whose log has neither
    that nor its ``done in`` line, that it ended without a word and the log's last line (a process
    the kernel killed, or a library that exited it: libgomp's "Thread creation failed"; a job still
    running reads the same). Snakemake rewrites a job's log when it reruns, so a rerun that
    succeeded is not listed."""
    out = []
    for log in sorted(Path(root).glob("logs/*/*.log")):
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        errors = [ln for ln in lines if ln.startswith("error:")]
        if errors:
            out.append((str(log.relative_to(root)), errors[-1][:400]))
        elif log.parent.name in ("train", "index", "search", "measure") \
                and not any(re.match(rf"{log.parent.name} \S+.*: done in ", ln) for ln in lines):
            last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "(empty)")
            out.append((str(log.relative_to(root)), "ended without the harness's error line or its done line "
                                                    f"(killed, or still running); its log's last line: {last[:300]}"))
    return out


def record(root: Path, folder: Path = LEDGER_DIR, hashes: Mapping[tuple, str] | None = None,
           skipped: list[str] | None = None, jobs: list[dict[str, Any]] | None = None,
           failed: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Write the ledger of every machine ``root``'s measured jobs ran on (normally this one) from the
    rehearsal's results folder ``root``: each measured job's line replaces its earlier one, each failed
    job's log cause is kept (with the machine of the measured jobs where they all ran on one, else
    this machine's hardware) unless the job now has a measured line, beside any measured line it had.
    ``hashes``: today's rehearsal's config hash of each (stage, job, dataset); a job measured with
    other settings (rehearsal-tiny, or an override that changes the job) is not the rehearsal's and is
    left out, its log named in ``skipped``. ``jobs`` and ``failed``: :func:`measured_jobs` and
    :func:`log_failures` of ``root`` where the caller has read them already.
    Returns {file: {"jobs": n, "failures": n}}."""
    from harness.meta import git_commit, hardware

    measured: dict[str, dict[str, dict[str, Any]]] = {}
    machines: dict[str, Any] = {}
    this = hardware()
    for d in measured_jobs(root) if jobs is None else jobs:
        key = job_key(d)
        want = (hashes or {}).get(key)
        if want is not None and d.get("config_hash") != want:
            if skipped is not None:
                skipped.append(log_of(*key))
            continue
        line = entry(d, documents_searched(root, d) if key[0] in SEARCHING else None)
        machines[slug(d.get("hardware") or {})] = d.get("hardware")
        measured.setdefault(slug(d.get("hardware") or {}), {})[log_of(*key)] = line
    # the failures ran where the measured jobs did (a GPU node's folder recorded back on a CPU box), or here
    here = next(iter(machines.values())) if len(machines) == 1 else this
    failed_lines = {log: {"failure": why, "log": log, "hardware": here, "git_commit": git_commit(),
                          "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
                    for log, why in (log_failures(root) if failed is None else failed)}
    if failed_lines:
        measured.setdefault(slug(here), {})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, lines in sorted(measured.items()):
        path = folder / f"{name}.jsonl"
        old = {_key(r): r for r in _lines(path)}
        old.update(lines)
        for log in lines:                     # a job that now succeeded drops its failure
            old.pop(_failed(log), None)
        if name == slug(here):                # a job that failed since it was measured keeps both lines
            old.update({_failed(k): v for k, v in failed_lines.items() if k not in lines})
        rows = [old[k] for k in sorted(old)]
        path.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        written[str(path)] = {"jobs": sum("failure" not in r for r in rows), "failures": sum("failure" in r for r in rows)}
    return written


def _key(r: Mapping[str, Any]) -> str:
    return _failed(str(r["log"])) if "failure" in r else log_of(*job_key(r))


def _failed(log: str) -> str:
    """A failure's key: its job's log, after the job's measured line (kept beside it: a rerun killed or
    out of memory must not erase the cost measured before it)."""
    return f"{log}\tfailed"


def _lines(path: Path) -> list[dict[str, Any]]:
    """The records of one ledger file; a line that is not a JSON object is a DataError naming it."""
    from harness.errors import DataError

    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path}:{n}: not a JSON line ({exc})",
                            fix="restore the file from git, or rewrite it with python -m harness estimate --record") from None
        if not isinstance(r, dict) or not ("failure" in r or ("cost" in r and r.get("job") and r.get("kind"))):
            raise DataError(f"{path}:{n}: neither a measured job (kind, job, cost) nor a failure (failure, log)",
                            fix="restore the file from git, or rewrite it with python -m harness estimate --record")
        out.append(r)
    return out


def read(folder: Path = LEDGER_DIR) -> list[dict[str, Any]]:
    """Every record of the ledgers in ``folder``, each with ``_source``: its file, commit and date."""
    out = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for r in _lines(path):
            when = str(r.get("created") or "")[:10] or "undated"
            out.append({**r, "_source": f"{path} (commit {str(r.get('git_commit') or '?')[:7]}, {when})"})
    return out


def measurements(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in records if "failure" not in r]


def failures(records: Iterable[Mapping[str, Any]], besides: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """(log, cause) of the ledgers' failed jobs, each with the machine it failed on; one that ``besides``
    (this machine's results folder's failures) already lists, the same log with the same cause, is left out.
    A job measured later (on any machine: a fix's rerun, which replaces the failure only in its own
    machine's ledger) keeps its failure with where and when it was measured since appended."""
    records = list(records)
    here = set(besides)
    since: dict[str, Mapping[str, Any]] = {}
    for m in measurements(records):
        log = log_of(*job_key(m))
        if str(m.get("created") or "") > str(since.get(log, {}).get("created") or ""):
            since[log] = m
    out = []
    for r in records:
        if "failure" not in r or (r["log"], str(r["failure"])) in here:
            continue
        cause, later = str(r["failure"]), since.get(str(r["log"]))
        if later is not None and str(later.get("created") or "") > str(r.get("created") or ""):
            cause += (f" (measured since: on {slug(later.get('hardware') or {})}, {str(later['created'])[:10]}, "
                      f"commit {str(later.get('git_commit') or '?')[:7]})")
        out.append((f"{r['log']} on {slug(r.get('hardware') or {})}", cause))
    return out


def every_failure(root: Any, records: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The failed jobs of this machine's results folder ``root`` (:func:`log_failures`), then the
    ledgers' (:func:`failures`) that it does not already list."""
    here = log_failures(root)
    return list(dict.fromkeys(here + failures(records, besides=here)))


def machine(d: Mapping[str, Any]) -> str:
    """The machine a measured job ran on, as the estimate names it: its GPU where it used one, else its
    CPU, SIMD level and cores (``cpu`` where the record does not say)."""
    gpu = (d.get("cost") or {}).get("gpu")
    if gpu:
        return str(gpu)
    hw = d.get("hardware") or {}
    if not hw.get("cpu"):
        return "cpu"
    return f"{hw['cpu']} ({hw['simd'] + ', ' if hw.get('simd') else ''}{hw.get('cpus', '?')} cores)"


def reference_machine(records: Iterable[Mapping[str, Any]]) -> str | None:
    """The machine that measured the most distinct jobs (:func:`job_key`) of ``records``: the one the
    estimate projects from wherever it measured a job (:func:`pick`), so that a total adds up one
    machine's figures where it can (a tie: the name first in order)."""
    jobs: dict[str, set] = {}
    for d in records:
        jobs.setdefault(machine(d), set()).add(job_key(d))
    return min(jobs, key=lambda m: (-len(jobs[m]), m)) if jobs else None


def code_of(r: Mapping[str, Any]) -> str | None:
    """The digest of the method code a measured job ran (:func:`harness.methods.code.code_id`), as its
    record says (written when the job ran; for the records older than the field, read from git at their
    commit by :func:`harness.estimate.with_code`); None where it does not."""
    return str(r["code"]) if r.get("code") else None


def pick(candidates: list[Mapping[str, Any]], gpu_job: bool, current_hash: str | None,
         prefer: str | None = None, code: str | None = None) -> Mapping[str, Any]:
    """The record to project a job from: measured on a GPU where the profile books one, then with
    today's rehearsal settings (``current_hash``), then with today's code of its step (``code``:
    :func:`harness.methods.code.code_id`; a record older than a change to the method's code measured other
    code, e.g. VDR's training before its corpus was read by id: 2.4x the seconds a step), then on the
    ``prefer`` machine (the estimate's :func:`reference_machine`: machines two cores alike differ
    1.4-1.7x a unit), then the newest; a tie goes to the first (this machine's results come before the
    ledgers)."""
    def rank(ir):
        i, r = ir
        used_gpu = (r.get("cost") or {}).get("gpu_peak_bytes") is not None
        return (used_gpu or not gpu_job, current_hash is not None and r.get("config_hash") == current_hash,
                code is not None and code_of(r) == code,
                prefer is not None and machine(r) == prefer, str(r.get("created") or ""), -i)

    return max(enumerate(candidates), key=rank)[1]
