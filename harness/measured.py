"""Look up measured values by name: ``<dataset>/<system>/<measure>`` from the eval JSONs (or, for
``metric:<name>``, the metrics JSONs)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.io import read_json
from harness.tables.matrix import eval_path, metrics_path, system_runs


def parse_key(key: str) -> tuple[str, str, str]:
    parts = key.split("/", 2)
    if len(parts) != 3:
        raise ConfigError(f"measured key {key!r} must read <dataset>/<system>/<measure>, e.g. squad-open/dpr/Success@20")
    return parts[0], parts[1], parts[2]


def source(cfg: Mapping[str, Any], key: str) -> Path:
    """The eval file of the key's system, or its metrics file for a ``metric:<name>`` measure."""
    dataset, system, measure = parse_key(key)
    if measure.startswith("metric:"):
        return metrics_path(cfg, system, dataset)
    return eval_path(cfg, system, dataset)


def lookup(cfg: Mapping[str, Any], key: str) -> float | None:
    """A measured value; ``metric:<name>`` values in their dimension's base unit (bytes, seconds)."""
    dataset, system, measure = parse_key(key)
    path = source(cfg, key)
    if not path.exists():
        return None
    if measure.startswith("metric:"):
        from harness.units import UNITS

        entry = read_json(path).get("values", {}).get(measure.removeprefix("metric:"))
        return None if entry is None else float(entry["value"]) * UNITS[entry["unit"]][1]
    return read_json(path)["measures"].get(measure)


def available(cfg: Mapping[str, Any], key: str) -> str | None:
    """None if the profile measures ``key``, else why not."""
    dataset, system, _ = parse_key(key)
    if dataset not in cfg["datasets"]:
        return f"dataset {dataset!r} is not in profile {cfg['profile']}"
    return system_runs(cfg, system, dataset)
