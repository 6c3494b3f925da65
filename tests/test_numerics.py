"""harness.numerics: the same seed and config give the same model whatever kernels the CPU offers.

The two-process test trains QCR and DPR (short smoke budgets) twice, in processes whose environments
ask for different CPU kernels (what a different CPU does to the native path); with ``numerics:
portable`` the weight files are byte-identical, with ``native`` they are not (so the test can fail).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import numerics
from harness.errors import HarnessError

#: what another CPU's native path looks like from here: torch's scalar kernels, MKL's SSE2 branch,
#: oneDNN and faiss at lower ISAs, OpenBLAS's oldest x86-64 kernels
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41",
             "FAISS_SIMD_LEVEL": "NONE", "OPENBLAS_CORETYPE": "Prescott"}
SHORT = {"methods": {"qcr": {"schedule": [{"steps": 12, "batch_size": 16, "codes": 8}]},
                     "dpr": {"epochs": 1}}}


def _weights(model: Path) -> dict[str, str]:
    """sha256 of every file of a model folder but its meta.json (times, hosts) and loss log."""
    return {str(p.relative_to(model)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(model.rglob("*")) if p.is_file() and p.name not in ("meta.json", "loss.tsv")}


def _train(repo: Path, out: Path, mode: str, env_extra: dict[str, str]) -> dict[str, dict[str, str]]:
    overlay = out / "overlay.yaml"
    out.mkdir(parents=True)
    overlay.write_text(yaml.safe_dump({**SHORT, "numerics": mode}))
    env = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE_ENV}
    env.update(env_extra)
    models = [out / "smoke" / "models" / m for m in ("qcr", "dpr")]
    r = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "--cores", "2", *map(str, models),
                        "--configfile", str(overlay), "--config", f"results_dir={out}"],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {m.name: _weights(m) for m in models}


@pytest.mark.slow
def test_portable_numerics_give_identical_weights_under_other_cpu_kernels(repo, tmp_path):
    native_a = _train(repo, tmp_path / "native-a", "native", {})
    native_b = _train(repo, tmp_path / "native-b", "native", OTHER_CPU)
    portable_a = _train(repo, tmp_path / "portable-a", "portable", {})
    portable_b = _train(repo, tmp_path / "portable-b", "portable", OTHER_CPU)
    for name, w in (("native, env as is", native_a), ("native, other CPU's kernels", native_b),
                    ("portable, env as is", portable_a), ("portable, other CPU's kernels", portable_b)):
        print(f"{name:32} qcr.pt {w['qcr']['qcr.pt'][:16]}  dpr {hashlib.sha256(str(w['dpr']).encode()).hexdigest()[:16]}")
    for method in ("qcr", "dpr"):
        assert portable_a[method] and portable_a[method] == portable_b[method], method
        assert native_a[method] != native_b[method], f"{method}: the kernels asked for changed nothing"
    meta = yaml.safe_load((tmp_path / "portable-b" / "smoke" / "models" / "qcr" / "meta.json").read_text())
    assert meta["numerics"]["mode"] == "portable"
    assert meta["numerics"]["env"] == numerics.PORTABLE_ENV            # the user's variables were overridden
    assert meta["numerics"]["torch_cpu_capability"] in ("AVX2", "DEFAULT")


def test_requested_reads_default_then_files(tmp_path):
    assert numerics.requested([]) == "portable"
    f = tmp_path / "o.yaml"
    f.write_text("numerics: native\n")
    assert numerics.requested([f]) == "native"
    f.write_text("numerics: fast\n")
    with pytest.raises(HarnessError, match="numerics: 'fast' is not one of portable, native"):
        numerics.requested([f])


def test_measure_jobs_run_native():
    assert numerics.mode_for("train", "portable") == "portable"
    assert numerics.mode_for("search", "portable") == "portable"
    assert numerics.mode_for("measure", "portable") == "native"
    assert numerics.mode_for("train", "native") == "native"


def test_apply_overrides_the_environment():
    env = {"MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "default", "PATH": "/bin"}
    numerics.apply("portable", env)
    assert env["MKL_CBWR"] == "COMPATIBLE" and env["ATEN_CPU_CAPABILITY"] == "avx2" and env["PATH"] == "/bin"
    env = {"MKL_CBWR": "AUTO"}
    assert numerics.apply("native", env) == {} and env == {"MKL_CBWR": "AUTO"}


def test_apply_refuses_once_torch_is_loaded():
    """Set after torch (or numpy, faiss) loaded, the variables would not hold: an error, not a label."""
    code = ("import torch, os; from harness import numerics\n"
            "[os.environ.pop(k, None) for k in numerics.PORTABLE_ENV]\n"
            "try:\n    numerics.apply('portable')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("HarnessError numerics: portable must be set before numpy, torch"), r.stdout + r.stderr


def test_plan_hash_moves_with_numerics():
    """Switching the setting rebuilds what ran under it (the floats differ); measure jobs read no
    such value (they move only through their inputs)."""
    from harness import plan as hplan
    from harness.config import load_config

    a = load_config([])
    pa = hplan.get(a)
    pb = hplan.Plan({**a, "numerics": "native"}, pa.jobs.values())  # the same jobs, the setting changed
    jobs = [j for stage in hplan.STAGES for j in pa.concrete(stage)]
    assert {"train", "search", "measure"} <= {j.stage for j in jobs}
    for job in jobs:
        if job.stage in numerics.STAGES:
            assert pa.values(job)["numerics"] == "portable" and pa.hash(job) != pb.hash(job), job.id
        else:
            assert "numerics" not in pa.values(job), job.id
