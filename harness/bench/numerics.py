"""`python -m harness bench numerics`: what ``numerics: portable`` costs against ``native``.

Runs the same Snakemake target(s) once per setting, each from an empty results folder
(``<out>/<mode>``), one after the other on this machine, and prints each run's wall, the
ratio portable / native, and where the time went (the sum of Snakemake's per-job benchmark
seconds by stage). Every job runs in both (data, decontamination and measure jobs read no
``numerics``; they are the same work), so the ratio is the whole run's cost of the setting.
The environment's own kernel variables (``MKL_CBWR``, ``ATEN_CPU_CAPABILITY``, ...) are removed for
both runs, so ``native`` is what this CPU picks by itself.

    python -m harness bench numerics                                   # smoke reproduce_all
    HARNESS_DATA_MIRROR=../shared/data python -m harness bench numerics \\
        --config configs/profiles/small.yaml configs/profiles/ci.yaml --target regression

No target to meet: the figures are for choosing the setting (README, "Same seed, same model, any CPU").
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from harness.config import REPO, add_config_argument, load_config, results_root
from harness.errors import ConfigError
from harness.io import read_benchmarks
from harness.numerics import MODES, PORTABLE_ENV


def stage_seconds(bench_dir: Path, column: str = "s") -> dict[str, float]:
    """Sum of a column of Snakemake's benchmark files under ``bench_dir`` (``s``: the jobs' own
    wall seconds; ``cpu_time``: their CPU seconds, which another load on the machine inflates far
    less), by stage (its first-level folder; a file directly under it is its own stage)."""
    out: dict[str, float] = defaultdict(float)
    for key, value in read_benchmarks(bench_dir, column).items():
        out[key.split("/", 1)[0]] += value
    return dict(out)


def run_mode(mode: str, targets: list[str], config_paths: list[str], profile: str, out: Path,
             cores: str) -> dict[str, Any]:
    results_dir = out / mode
    if results_dir.exists():
        shutil.rmtree(results_dir)
    results_dir.mkdir(parents=True)
    overlay = out / f"{mode}.yaml"
    overlay.write_text(yaml.safe_dump({"numerics": mode}))
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV}
    root = results_root({"results_dir": results_dir, "profile": profile})
    targets = [t.replace("{R}", str(root)) for t in targets]  # a file target inside this mode's results
    cmd = [sys.executable, "-m", "snakemake", "--nolock", "--keep-going", "--cores", cores, *targets,
           "--configfile", *config_paths, str(overlay), "--config", f"results_dir={results_dir}"]
    log = out / f"{mode}.log"
    print(f"numerics {mode}: {' '.join(cmd)}  (log {log})", flush=True)
    t0 = time.perf_counter()
    with log.open("w") as f:
        r = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - t0
    failed = sorted(set(re.findall(r"^Error in rule (\w+):", log.read_text(), re.M)))
    if r.returncode and failed != ["regression"]:
        raise ConfigError(f"bench numerics: the {mode} run failed (exit {r.returncode}; rules {', '.join(failed)}); "
                          f"see {log}", fix="fix the failing job (its log is named in the Snakemake log), then run again")
    if failed:  # the values of another setting may leave the expected file's tolerances: timed all the same
        print(f"numerics {mode}: the regression check failed (the expected values are portable's); timed as run")
    return {"mode": mode, "wall_s": round(wall, 1), "regression_failed": bool(failed),
            "stages_s": stage_seconds(root / "benchmarks"),
            "stages_cpu_s": stage_seconds(root / "benchmarks", "cpu_time")}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness bench numerics", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(ap)
    ap.add_argument("--target", nargs="+", default=["reproduce_all"],
                    help="Snakemake target(s); {R} stands for the mode's results folder, e.g. {R}/models/dpr")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                    help="settings to run, in this order (default: portable, then native)")
    ap.add_argument("--cores", default="all")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "bench-numerics",
                    help="scratch folder; each setting's results go to <out>/<mode> (emptied first)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    configs = [str(Path(c).resolve()) for c in args.config]
    args.out.mkdir(parents=True, exist_ok=True)
    profile = load_config(configs)["profile"]
    runs = [run_mode(m, args.target, configs, profile, args.out.resolve(), args.cores) for m in args.modes]
    stages = sorted({s for r in runs for s in r["stages_s"]})
    print(f"\nbench numerics: {' '.join(args.target)} on profile {profile}, {os.cpu_count()} cores, "
          f"{platform.processor() or platform.machine()}; runs in the order {', '.join(args.modes)}")
    print(f"{'':14}" + "".join(f"{r['mode']:>12}" for r in runs) + ("       ratio" if len(runs) == 2 else ""))
    rows = [("wall", [r["wall_s"] for r in runs])] + [
        (f"  {s}", [r["stages_s"].get(s, 0.0) for r in runs]) for s in stages]
    rows += [("cpu", [sum(r["stages_cpu_s"].values()) for r in runs])] + [
        (f"  {s}", [r["stages_cpu_s"].get(s, 0.0) for r in runs]) for s in stages]
    for name, vals in rows:
        ratio = f"{vals[0] / vals[1]:>11.2f}x" if len(vals) == 2 and vals[1] else ""
        print(f"{name:14}" + "".join(f"{v:>11.1f}s" for v in vals) + ratio)
    print("  (stage rows under wall: the sum of the jobs' own seconds, Snakemake's benchmark files; jobs overlap "
          "on several cores, so they add up to more than the wall; under cpu: the jobs' CPU seconds, the figure "
          "to compare when the machine was not idle)")
    print("target: none; the ratio is the cost of numerics: portable on this machine")
    if args.json:
        args.json.write_text(json.dumps({"targets": args.target, "config": configs, "runs": runs,
                                         "cpu": platform.processor(), "cores": os.cpu_count()}, indent=2))
    return 0
