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
SHORT = {"methods": {"qcr": {"schedule": [{"steps": 4, "batch_size": 16, "codes": 8}]},
                     "dpr": {"epochs": 1, "max_train_questions": 32}}}


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
            assert pa.values(job)["numerics"] == numerics.identity("portable") == f"portable/{numerics.PORTABLE_REVISION}"
            assert pa.hash(job) != pb.hash(job), job.id
        else:
            assert "numerics" not in pa.values(job), job.id


def test_bench_numerics_sums_job_seconds_by_stage(tmp_path):
    """`bench numerics` attributes time to stages from Snakemake's benchmark files."""
    from harness.bench.numerics import stage_seconds

    head = "s\th:m:s\tmax_rss\tmax_vms\tcpu_time\n"
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "dpr.tsv").write_text(head + "12.5\t0:00:12\t100\t200\t20.0\n")
    (tmp_path / "train" / "qcr.tsv").write_text(head + "7.5\t0:00:07\t100\t200\t7.0\n")
    (tmp_path / "search" / "bm25").mkdir(parents=True)
    (tmp_path / "search" / "bm25" / "scifact.tsv").write_text(head + "3.0\t0:00:03\tNA\tNA\t2.5\n")
    (tmp_path / "report.tsv").write_text(head + "1.0\t0:00:01\t1\t1\t0.5\n" + "x\t-\t-\t-\t-\n")
    assert stage_seconds(tmp_path) == {"train": 20.0, "search": 3.0, "report": 1.0}
    assert stage_seconds(tmp_path, "cpu_time") == {"train": 27.0, "search": 2.5, "report": 0.5}
    assert stage_seconds(tmp_path / "absent") == {}


#: short train_loop runs in a fresh process: a small transformer-like stack (linear, GELU, layer
#: norm, softmax), AdamW as harness.train builds it, once per variant named on the command line
#: (``fused``: portable's AdamW step; ``default-adamw``: AdamW's for-each step, the portable path
#: before revision 2), all in one process (under QEMU every process start costs tens of seconds);
#: prints the sha256 of the weights and of torch.sqrt per variant
_PROBE = r'''
import hashlib, sys
from harness import numerics
numerics.apply(sys.argv[1])
import torch
from harness.train import TrainSettings, set_seed, train_loop
from harness.methods.qcr import entropy_loss  # QCR's loss over its FSQ codebook (torch.cdist)
import numpy as np  # the vocabulary projection's product (numpy's OpenBLAS under portable)
from harness.models.projection import segment_max
torch.set_num_threads(2)
fused = numerics.optimizer_options
def run():
    set_seed(13)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 32))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 64, generator=g), torch.randint(0, 32, (96,), generator=g)
    def step(batch, i, rng):
        idx = torch.tensor(batch)
        return torch.nn.functional.cross_entropy(model(x[idx]), y[idx]), {}
    train_loop(list(range(96)), step, list(model.parameters()), seed=13, out=None, modules=[model],
               settings=TrainSettings(epochs=2, batch_size=16, lr=1e-3, log_every=100))
    w = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
    s = hashlib.sha256(torch.sqrt(torch.rand(4096, generator=g) + 0.1).numpy().tobytes()).hexdigest()[:16]
    z, book = torch.randn(256, 5, generator=g).requires_grad_(), torch.randn(625, 5, generator=g)
    entropy_loss(z, book)[0].backward()
    w = hashlib.sha256((w + str(z.grad.numpy().tobytes())).encode()).hexdigest()[:16]
    r = np.random.default_rng(0)
    pv, pa = segment_max(r.standard_normal((600, 64), dtype=np.float32), r.standard_normal((3000, 64), dtype=np.float32),
                         None, [0, 100, 600], threads=2)
    w = hashlib.sha256((w + str(pv.tobytes()) + str(pa.tobytes())).encode()).hexdigest()[:16]
    return w, s
for variant in sys.argv[2:]:
    numerics.optimizer_options = (lambda: {}) if variant == "default-adamw" else fused
    w, s = run()
    print("weights", variant, w, "sqrt", s)
'''


@pytest.fixture(scope="module")
def qemu(apt_install) -> str:
    """qemu-x86_64 (Debian's qemu-user), installed with apt-get when missing, else a skip saying why."""
    import shutil

    if shutil.which("qemu-x86_64") is None:
        apt_install(["qemu-user"], "no CPU emulator for the emulated-CPU test")
    path = shutil.which("qemu-x86_64")
    if path is None:
        pytest.skip("apt-get installed qemu-user but qemu-x86_64 is not on PATH")
    return path


def _probe(mode: str, emulator: list[str]) -> dict[str, tuple[str, str]]:
    """Run _PROBE under ``emulator`` (e.g. [qemu, "-cpu", "Haswell"]; [] for this CPU):
    {variant: (weights hash, sqrt hash)} for the variants ``fused`` and ``default-adamw``."""
    env = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE_ENV}
    cmd = [*emulator, sys.executable, "-c", _PROBE, mode, "fused", "default-adamw"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("weights ")]
    assert r.returncode == 0 and len(lines) == 2, r.stdout[-2000:] + r.stderr[-2000:]
    return {variant: (w, s) for _, variant, w, _, s in lines}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="x86-64 Linux only")
def test_portable_training_is_the_same_on_an_emulated_intel_cpu(qemu):
    """Another CPU for real: QEMU's Haswell (an Intel CPUID, its own rounding of the approximation
    instructions) against this machine's CPU. MKL VML's torch.sqrt differs between the two whatever
    the variables say, and so did AdamW's default step built on it; portable's fused step does not."""
    haswell = [qemu, "-cpu", "Haswell"]
    here, there = _probe("portable", []), _probe("portable", haswell)
    (native_w, native_sqrt), (emu_w, emu_sqrt) = here["fused"], there["fused"]
    old_native_w, old_emu_w = here["default-adamw"][0], there["default-adamw"][0]
    print(f"\nportable/{numerics.PORTABLE_REVISION} (fused AdamW): weights {native_w} here, {emu_w} on QEMU's Haswell"
          f"\nportable/1 (AdamW's default step): weights {old_native_w} here, {old_emu_w} on QEMU's Haswell"
          f"\ntorch.sqrt (MKL VML): {native_sqrt} here, {emu_sqrt} there")
    assert native_sqrt != emu_sqrt, "VML's sqrt gave the same bits on both: the emulated CPU is no other CPU here"
    assert old_native_w != old_emu_w, "AdamW's default step gave the same weights on both CPUs: the test shows nothing"
    assert native_w == emu_w, "portable training gave different weights on another CPU"
