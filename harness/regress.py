"""`python -m harness regress`: compare measured values with configs/expected/<profile>.yaml.

Each expected entry is ``{key: <dataset>/<system>/<measure>, value: v, tol: t}``; a measured
value outside [v - t, v + t], or missing, is a breach. All breaches are printed; the exit status
is 1 when there is any, and the report file is written only when there is none.
``--record`` writes the expected file from the current measurements (review before committing);
``--record --seeds N`` first runs the values' jobs under N seeds (the config's seed and the next
N-1, each extra seed in ``<results_dir>/seed-<s>``, reusing every artifact whose job hash no seed
changes) and derives each tolerance from the spread by :data:`TOL_RULE`, the spread written beside
the value (``spread:``) and in its note.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.config import REPO, add_config_argument, load_config, read_yaml, validate
from harness.errors import ConfigError
from harness.io import atomic_write_text, read_json, write_json
from harness.measured import available, check_measure, lookup, outputs, parse_key

EXPECTED_DIR = REPO / "configs" / "expected"

#: how --record --seeds turns a spread into a tolerance (written in every note it sets)
TOL_RULE = ("tol = max(3 x the seeds' sample sd, the binomial SE sqrt(p(1-p)/n) at p = the value clipped to "
            "[1/n, 1-1/n] where the value is a mean of n per-query values in [0, 1] (the largest SE such a mean "
            "can have)), at least 0.001 (0.1 % of a metric: value), rounded up to 3 decimals; "
            "a deterministic value (its run is the same under every seed): 0.001")
#: the clause the hand-written notes ended with before tolerances were measured
_OLD_CLAUSE = "; tolerance covers thread-order float differences"


def expected_path(profile: str) -> Path:
    return EXPECTED_DIR / f"{profile}.yaml"


def load_expected(profile: str, path: Path | None = None) -> dict[str, Any]:
    """configs/expected/<profile>.yaml (or ``path``), validated; a misspelled measure fails here."""
    path = expected_path(profile) if path is None else Path(path)
    if not path.exists():
        raise ConfigError(f"no expected values for profile {profile!r}: {path} is missing",
                          fix=f"run the profile, then `python -m harness regress --record` and review {path}")
    doc = read_yaml(path)
    validate(doc, "expected", source=str(path))
    for i, e in enumerate(doc["values"]):
        check_measure(parse_key(e["key"])[2], f"{path}: values[{i}] (key {e['key']})")
    return doc


def check(cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    doc = load_expected(cfg["profile"])
    rows, breaches = [], []
    for e in doc["values"]:
        got = lookup(cfg, e["key"])
        ok = got is not None and abs(got - e["value"]) <= e["tol"]
        rows.append({"key": e["key"], "expected": e["value"], "tol": e["tol"], "measured": got, "ok": ok})
        if not ok:
            breaches.append(f"{e['key']}: measured {'missing' if got is None else f'{got:.4f}'}, "
                            f"expected {e['value']:.4f} ± {e['tol']} ({available(cfg, e['key']) or ', '.join(map(str, outputs(cfg, e['key'])))})")
    return rows, breaches


def required_inputs(cfg: dict[str, Any]) -> list[str]:
    """Eval files the expected values name ([] when the profile has no expected file yet: the
    regression rule then reports the missing configs/expected/<profile>.yaml itself)."""
    if not expected_path(cfg["profile"]).exists():
        return []
    doc = load_expected(cfg["profile"])
    return sorted({str(o) for e in doc["values"] for o in outputs(cfg, e["key"])})


def record(cfg: dict[str, Any], keys: list[str], tol: float) -> Path:
    """Write the measured values of ``keys``; an entry already in the file keeps its tolerance and
    note (they are judgements, not measurements), a new one gets ``tol``; entries of other keys stay
    as they are (recording a new method's values never drops another's)."""
    old = {e["key"]: e for e in load_expected(cfg["profile"])["values"]} if expected_path(cfg["profile"]).exists() else {}
    values = [e for k, e in old.items() if k not in keys]
    for key in keys:
        got = lookup(cfg, key)
        if got is None:
            raise ConfigError(f"cannot record {key}: not measured yet ({available(cfg, key) or 'run the profile first'})")
        entry = {"key": key, "value": round(got, 4), "tol": old.get(key, {}).get("tol", tol)}
        for kept in ("note", "spread"):
            if old.get(key, {}).get(kept):
                entry[kept] = old[key][kept]
        values.append(entry)
    path = expected_path(cfg["profile"])
    header = (f"# Expected measured values of profile {cfg['profile']}, recorded from a real run with\n"
              f"# `python -m harness regress --record`; tol is absolute (measures are fractions in [0, 1]).\n")
    atomic_write_text(path, header + yaml.safe_dump({"profile": cfg["profile"], "values": values}, sort_keys=False))
    return path


def _ceil3(x: float) -> float:
    return math.ceil(round(x * 1000, 6)) / 1000


def tolerance(values: Sequence[float], n: int | None, deterministic: bool, metric: bool = False) -> dict[str, Any]:
    """The tolerance of one expected value from its values under several seeds (the first is the
    recorded one), by :data:`TOL_RULE`; returns the spread entry with ``tol``."""
    v = values[0]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    se = None
    if n:  # a mean over n queries of per-query values in [0, 1]
        p = min(max(v, 1 / n), 1 - 1 / n)
        se = math.sqrt(p * (1 - p) / n)
    if deterministic:
        tol = 0.001
    else:
        floor = max(0.001, 0.001 * abs(v)) if metric else 0.001
        tol = _ceil3(max(3 * sd, se or 0.0, floor))
    return {"sd": round(sd, 5), "se": None if se is None else round(se, 5), "tol": tol}


def _spread_note(note: str | None, seeds: Sequence[int], values: Sequence[float], spread: Mapping[str, Any],
                 n: int | None, deterministic: bool) -> str:
    head = _SPREAD_TAIL.sub("", (note or "").replace(_OLD_CLAUSE, "")).rstrip()
    vals = ", ".join(f"{x:.4f}" for x in values)
    if deterministic:
        tail = f"seeds {'/'.join(map(str, seeds))}: {vals}; deterministic (its run is the same under every seed)"
    else:
        tail = (f"seeds {'/'.join(map(str, seeds))}: {vals} (sd {spread['sd']:.4f}"
                + (f"; n {n:,} queries, binomial SE {spread['se']:.4f}" if spread.get("se") is not None else "")
                + f") -> tol {spread['tol']}")
    return f"{head} | {tail}" if head else tail


def seed_config(cfg: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The config of one seed: the config's own seed keeps its results folder, another seed gets
    ``<results_dir>/seed-<seed>``."""
    if seed == cfg["seed"]:
        return dict(cfg)
    return {**cfg, "seed": seed, "results_dir": f"{cfg['results_dir']}/seed-{seed}"}


def link_unchanged(base: Mapping[str, Any], other: Mapping[str, Any]) -> list[Path]:
    """Hard-link into ``other``'s results every finished artifact of ``base`` whose job hash is the
    same under both configs (data, BM25, decontamination: what no seed changes), so that a seed
    re-runs only what it changes. A plan job's folder is linked only when its meta.json carries that hash."""
    from harness import plan as hplan
    from harness.meta import META, read_meta

    pb, po = hplan.get(base), hplan.get(other)
    refs: set[hplan.Ref] = set()
    for stage in hplan.STAGES:
        for job in po.concrete(stage):
            refs.add(hplan.output_ref(job))
            refs.update(job.inputs.values())
    linked = []
    for ref in sorted({po.run_of(r) for r in refs}, key=str):
        src, dst = hplan.path(base, ref), hplan.path(other, ref)
        h = po.ref_hash(ref)
        if dst.exists() or not src.exists() or h != pb.ref_hash(ref):
            continue
        if ref.kind in ("model", "index", "run", "metrics") and (
                not (src / META).exists() or read_meta(src).get("config_hash") != h):
            continue  # a plan job's folder whose meta.json says it was built under other settings
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, copy_function=os.link)
        else:  # a file artifact (negatives) and the meta.json beside it
            for name in (src.name, src.name + ".meta.json"):
                if (src.parent / name).exists():
                    os.link(src.parent / name, dst.parent / name)
        linked.append(dst)
    return linked


def run_seed(config_paths: Sequence[str], cfg: Mapping[str, Any], keys: Sequence[str], cores: str) -> None:
    """Snakemake makes the evaluation/metrics files of ``keys`` under ``cfg`` (its seed and results folder)."""
    targets = sorted({str(o) for k in keys for o in outputs(cfg, k)})
    # resumable: a recording killed part-way (a session's end) is run again with the same command; its
    # finished artifacts are kept and an interrupted job's output is made again (--rerun-incomplete)
    cmd = [sys.executable, "-m", "snakemake", "--cores", cores, "--rerun-incomplete", "--keep-going",
           *targets,  # targets before --configfile/--config
           *(["--configfile", *config_paths] if config_paths else []),
           "--config", f"seed={cfg['seed']}", f"results_dir={cfg['results_dir']}"]
    print(f"seed {cfg['seed']}: {len(targets)} targets under {cfg['results_dir']}", flush=True)
    r = subprocess.run(cmd, cwd=REPO, check=False)
    if r.returncode:
        raise ConfigError(f"the seed-{cfg['seed']} run failed (exit {r.returncode}): {' '.join(cmd)}",
                          fix="see the Snakemake log above; fix the failing job, then record again")


_SPREAD_TAIL = re.compile(r"(?:^| \| )seeds \d+(?:/\d+)*: .*$", re.S)   # what _spread_note appended last time
_QUESTIONS = re.compile(r"(\d[\d,]*)(?: of [\d,]+)? test questions")


def _queries(cfg: Mapping[str, Any], key: str) -> int | None:
    """How many queries a value is a mean over: the eval file's ``queries``; for a ``metric:``
    fraction (unit ratio, e.g. a reader's EM) the count its description gives ("200 of 2351 test
    questions" -> 200), else None."""
    from harness.measured import find_key

    found = find_key(cfg, key)
    if found.path is None:
        return None
    if not key.split("/", 2)[2].startswith("metric:"):
        return read_json(found.path).get("queries")
    raw = found.raw or {}
    m = _QUESTIONS.search(str(raw.get("what", ""))) if raw.get("unit") == "ratio" else None
    return int(m.group(1).replace(",", "")) if m else None


def _source_hash(cfg: Mapping[str, Any], key: str) -> str | None:
    """The config hash of the folder a key's value comes from: the search job's run folder of an
    evaluation measure, the measure job's folder of a ``metric:`` value."""
    from harness import plan as hplan
    from harness.measured import find_key
    from harness.meta import META

    dataset, system, measure = parse_key(key)
    if measure.startswith("metric:"):
        found = find_key(cfg, key)
        folder = found.path.parent if found.path is not None else None
    else:
        folder = hplan.path(cfg, hplan.get(cfg).run_of(hplan.Ref("system", system, dataset)))
    if folder is None or not (folder / META).exists():
        return None
    return read_json(folder / META).get("config_hash")


def record_seeds(config_paths: Sequence[str], cfg: dict[str, Any], keys: list[str], n_seeds: int,
                 cores: str = "all", run: bool = True) -> Path:
    """Run ``keys`` under ``n_seeds`` seeds and write each value (the config's seed) with the
    tolerance :func:`tolerance` derives from the spread."""
    seeds = [cfg["seed"] + i for i in range(n_seeds)]
    cfgs = [seed_config(cfg, s) for s in seeds]
    for c in cfgs:
        if run:
            if c is not cfgs[0]:
                print(f"seed {c['seed']}: linked {len(link_unchanged(cfgs[0], c))} unchanged artifacts", flush=True)
            run_seed(config_paths, c, keys, cores)
    old = {e["key"]: e for e in load_expected(cfg["profile"])["values"]} if expected_path(cfg["profile"]).exists() else {}
    values = [e for k, e in old.items() if k not in keys]
    numerics = cfg.get("numerics", "portable")
    for key in keys:
        got = [lookup(c, key) for c in cfgs]
        if any(g is None for g in got):
            miss = [s for s, g in zip(seeds, got) if g is None]
            raise ConfigError(f"cannot record {key}: not measured under seed(s) {miss} "
                              f"({available(cfg, key) or 'run the profile first'})")
        hashes = {_source_hash(c, key) for c in cfgs}
        deterministic = len(hashes) == 1 and None not in hashes
        n = _queries(cfg, key)
        sp = tolerance(got, n, deterministic, metric=key.split("/", 2)[2].startswith("metric:"))
        entry = {"key": key, "value": round(got[0], 4), "tol": sp["tol"],
                 "note": _spread_note(old.get(key, {}).get("note"), seeds, got, sp, n, deterministic),
                 "spread": {"seeds": seeds, "values": [round(g, 4) for g in got], "sd": sp["sd"], "n": n,
                            "se": sp["se"], "deterministic": deterministic, "numerics": numerics}}
        values.append(entry)
    order = {e["key"]: i for i, e in enumerate(old.values())}
    values.sort(key=lambda e: order.get(e["key"], len(order)))
    path = expected_path(cfg["profile"])
    rule = textwrap.fill(TOL_RULE + ".", width=100, initial_indent="# ", subsequent_indent="# ")
    header = (f"# Expected measured values of profile {cfg['profile']}, recorded from real runs with\n"
              f"# `python -m harness regress --record --seeds {n_seeds}` (numerics: {numerics}); tol is absolute\n"
              f"# (measures are fractions in [0, 1]); `spread` holds what each seed measured.\n{rule}\n")
    atomic_write_text(path, header + yaml.dump({"profile": cfg["profile"], "values": values}, Dumper=_Dumper,
                                               sort_keys=False, width=110, allow_unicode=True))
    return path


class _Dumper(yaml.SafeDumper):
    """YAML without anchors, lists of numbers on one line (a spread's seeds and values)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(list, lambda d, v: d.represent_sequence(
    "tag:yaml.org,2002:seq", v, flow_style=all(isinstance(x, (int, float)) for x in v)))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness regress", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--out", type=Path, help="report JSON, written only when every value is within tolerance")
    ap.add_argument("--record", nargs="*", metavar="KEY", help="write configs/expected/<profile>.yaml for these keys")
    ap.add_argument("--tol", type=float, default=0.02, help="tolerance used by --record without --seeds")
    ap.add_argument("--seeds", type=int, help="with --record: run under this many seeds and derive each tolerance "
                    "from the spread (" + TOL_RULE.replace("%", "%%") + ")")
    ap.add_argument("--cores", default="all", help="with --seeds: Snakemake's --cores")
    ap.add_argument("--no-run", action="store_true", help="with --seeds: the seeds' results exist; only record")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.record is not None:
        keys = args.record or [e["key"] for e in load_expected(cfg["profile"])["values"]]
        if args.seeds:
            if args.seeds < 2:
                raise ConfigError("--seeds needs at least 2 seeds to measure a spread", fix="--seeds 3")
            path = record_seeds(args.config, cfg, keys, args.seeds, args.cores, run=not args.no_run)
        else:
            path = record(cfg, keys, args.tol)
        print(f"wrote {path}")
        return 0
    rows, breaches = check(cfg)
    for r in rows:
        mark = "ok  " if r["ok"] else "FAIL"
        got = "missing" if r["measured"] is None else f"{r['measured']:.4f}"
        print(f"{mark} {r['key']}: {got} (expected {r['expected']:.4f} ± {r['tol']})")
    if breaches:
        print(f"regression: {len(breaches)} of {len(rows)} values outside tolerance:")
        for b in breaches:
            print(f"  BREACH {b}")
        return 1
    same = sum(round(r["measured"], 4) == r["expected"] for r in rows)
    print(f"regression: all {len(rows)} values within tolerance (profile {cfg['profile']}); {same} of them "
          f"identical to the recorded value at 4 decimals")
    if args.out:
        write_json(args.out, {"profile": cfg["profile"], "values": rows})
    return 0
