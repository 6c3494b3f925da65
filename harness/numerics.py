"""The numeric code path of the jobs that train, index and search: one config setting, ``numerics``.

``portable`` (smoke, small, ci): every job that trains or encodes runs the same kernels on any
x86-64 machine, whichever vendor and vector width its CPU has, so the same seed and config give the
same model, bit for bit, and the environment a user exports (``ATEN_CPU_CAPABILITY=default``,
``MKL_CBWR=COMPATIBLE``, ...) no longer matters (tests/test_numerics.py). Measured on an AVX-512/AMX
Xeon, a 30-step BERT training's weights change with each of the first three alone, and numpy's matrix
product with the fourth. What each pins:

- ``ATEN_CPU_CAPABILITY=avx2``: torch's own vectorised kernels (reductions, softmax, layer norm,
  Sleef's exp/log) use the AVX2 build on every CPU, not AVX-512 where it exists. AVX2 code is the
  same machine code on Intel and AMD; a CPU without AVX2 falls back (meta.json then shows it).
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility on its one branch that
  Intel documents to give the same results on Intel and compatible (AMD) CPUs; the AVX2 branch is
  Intel-only (on other CPUs it silently runs AUTO). The costly one: matrix products on SSE2.
- ``ONEDNN_MAX_CPU_ISA=AVX2`` (and its old name ``DNNL_MAX_CPU_ISA``): oneDNN's JIT kernels, which
  torch uses for GELU, are generated for AVX2 rather than AVX-512/AMX; ``ONEDNN_DEFAULT_FPMATH_MODE
  =STRICT`` forbids implicit bf16/tf32 down-conversion.
- ``OPENBLAS_CORETYPE=Haswell``: numpy's (and faiss's) OpenBLAS takes its Haswell kernels, which are
  also its Zen kernels, instead of SkylakeX's on an AVX-512 CPU.
- ``FAISS_SIMD_LEVEL=AVX2``: faiss's dynamically dispatched distance kernels (IVF, PQ, HNSW search and
  k-means assignment) at one level (its k-means centroids came out the same at every level here; the
  search kernels' summation order is not promised to).

Thread counts are already fixed by each method's ``torch_threads`` (MKL's CNR needs that too).

Not covered by any variable: MKL's vector math (VML), which torch calls for ``sqrt``, ``log2``,
``log10``, ``asin``, ``acos`` and ``atan`` on float tensors. Its results depend on how the CPU's
approximation instructions round, whatever ``MKL_CBWR`` says: on this project's AMD EPYC (Zen 4) and
under QEMU emulating an Intel Haswell, the same binaries and variables give different bits for
``torch.sqrt`` (tests/test_numerics.py). ``torch.optim.AdamW``'s default (for-each) step takes that
``sqrt`` of its second moment on every step, so a model trained on an Intel CPU differed in its last
bits from one trained on an AMD CPU, which FSQ rounding (QCR), k-means, LSH signs and IVF assignment
then turned into different codes: ci's qcr Success@100 0.3526 recorded on an Intel Xeon, 0.3637 on an
AMD EPYC, both portable. So portable also trains with AdamW's fused CPU step (:func:`optimizer_options`),
whose square root is the CPU's correctly rounded one (the same bits everywhere), and QCR's entropy
loss takes ``torch.cdist``'s exact-difference form (its matmul form ends in the same VML ``sqrt``).

Portable's matrix products run on MKL's SSE2 branch, half the speed of numpy's OpenBLAS on its
(pinned) Haswell kernels here; the one product that dominates CPU training and encoding, the
vocabulary projection of VDR/SVDR and LightRetriever's sparse side, therefore runs in numpy under
portable (:mod:`harness.models.projection`, ``python -m harness bench projection``: 1.9x).

``native``: the kernels each library picks for this CPU (fastest; the paper profile, which says
so). Measure jobs always run native: their figures time the machine as it is, not a pinned path.

The variables are read when each library loads, so :func:`apply` runs before numpy, torch or faiss
is imported (``harness.stages`` calls it first; reading the setting needs only YAML).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

#: the config setting's values
MODES = ("portable", "native")
#: stages whose jobs run under the setting (measure jobs time the machine as it is)
STAGES = ("train", "index", "search")

PORTABLE_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "ONEDNN_DEFAULT_FPMATH_MODE": "STRICT",
    "FAISS_SIMD_LEVEL": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
}
#: libraries whose kernel choice the variables steer; they read them when they load
_LOADERS = ("numpy", "torch", "faiss")
#: the revision of what portable computes; job hashes carry it (:func:`identity`), so an artifact
#: built on an earlier portable path is rebuilt (2: AdamW's fused step, not MKL VML's sqrt; 3: the
#: vocabulary projection's product in numpy's OpenBLAS, harness.models.projection)
PORTABLE_REVISION = 3
_active = "native"  # the mode apply() set in this process


def identity(mode: str) -> str:
    """What a job's hash carries for ``mode``: ``portable/<revision>`` or ``native``."""
    return f"portable/{PORTABLE_REVISION}" if mode == "portable" else mode


def active() -> str:
    """The mode :func:`apply` set in this process ("native" before any call)."""
    return _active


@lru_cache(maxsize=1)
def blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries (numpy's OpenBLAS), found once per process
    (scanning them costs ~0.3 ms; limiting through it ~15 us): products that must not depend on the
    thread count run under ``blas_controller().limit(limits=1)`` (:mod:`harness.indexes.blas`,
    :mod:`harness.models.projection`)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def optimizer_options() -> dict[str, Any]:
    """Keyword arguments for ``torch.optim.AdamW`` in this process: portable takes the fused CPU
    step (no MKL VML ``sqrt``: the same bits on every x86-64 CPU); native keeps torch's default."""
    return {"fused": True} if _active == "portable" else {}


def requested(config_paths: Iterable[str | Path]) -> str:
    """The ``numerics`` value of configs/default.yaml merged with ``config_paths`` (the files a
    stage command gets), read without importing anything heavy; the full validation follows in
    ``load_config``, which :func:`check` compares with."""
    from harness import REPO
    from harness.io import read_yaml

    mode = "portable"
    for path in (REPO / "configs" / "default.yaml", *map(Path, config_paths)):
        doc = read_yaml(path) if Path(path).exists() else None
        if isinstance(doc, Mapping) and "numerics" in doc:
            mode = doc["numerics"]
    if mode not in MODES:
        raise HarnessError(f"config key numerics: {mode!r} is not one of {', '.join(MODES)} "
                           f"(fix: numerics: portable for bit-identical models on any x86-64 CPU, native for speed)")
    return mode


def mode_for(stage: str, mode: str) -> str:
    return mode if stage in STAGES else "native"


def apply(mode: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the variables of ``mode`` in ``environ`` (os.environ): portable overrides whatever the
    environment asked for. Raises when a library they steer is already loaded in this process (the
    setting would silently not hold). Returns the variables set."""
    global _active
    env = os.environ if environ is None else environ
    if mode_for("train", mode) != "portable":
        if environ is None:
            _active = "native"
        return {}
    if environ is None:
        loaded = [m for m in _LOADERS if m in sys.modules]
        changed = [k for k, v in PORTABLE_ENV.items() if env.get(k) != v]
        if loaded and changed:
            raise HarnessError(f"numerics: portable must be set before {', '.join(loaded)} is imported "
                               f"(would change {', '.join(changed)} too late); call harness.numerics.apply first")
    env.update(PORTABLE_ENV)
    if environ is None:
        _active = "portable"
    return dict(PORTABLE_ENV)


def describe(mode: str) -> dict[str, Any]:
    """What meta.json records: the setting, the variables in force, and the kernel levels the loaded
    libraries report (torch's CPU capability, faiss's SIMD level)."""
    out: dict[str, Any] = {"mode": mode, "identity": identity(mode),
                           "env": {k: os.environ[k] for k in sorted(PORTABLE_ENV) if k in os.environ},
                           "adamw": optimizer_options() or "torch default"}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    faiss = sys.modules.get("faiss")
    if faiss is not None and hasattr(faiss, "SIMDConfig"):
        out["faiss_simd_level"] = faiss.SIMDConfig.get_level_name()
    return out


def check(cfg: Mapping[str, Any], mode: str) -> None:
    """The validated config must say what :func:`requested` read (it read the same files)."""
    if cfg.get("numerics", "portable") != mode:
        raise HarnessError(f"numerics: read {mode!r} before loading the config but the config says "
                           f"{cfg.get('numerics')!r}; pass the setting in a config file, not as an override")
