"""Resolve every published cell to what this profile measures for it.

A cell is (paper, table, row, column). The matrix (configs/matrix/<paper>.yaml) maps the row to
a measured system; the column's dataset label (e.g. "NQ") is mapped to one of the profile's
datasets by config key ``substitutions``; the measure is the published record's ir_measures
string. The result per cell is either a measured value with its source file, or "not run"
with the reason, or "published only".
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.config import REPO, read_yaml, results_root, validate
from harness.tables.published import load_published

MATRIX_DIR = REPO / "configs" / "matrix"
SCALE = {"%": 100.0, "ratio": 1.0}


@lru_cache(maxsize=None)
def load_matrix(paper: str) -> dict[str, Any]:
    path = MATRIX_DIR / f"{paper}.yaml"
    if not path.exists():
        return {"paper": paper, "tables": {}}
    doc = read_yaml(path)
    validate(doc, "matrix", source=str(path))
    return doc


@dataclass
class Cell:
    row: str
    column: str
    published: float | None
    unit: str
    measure: str | None
    note: str | None
    kind: str = "not run"             # measured | not run | published only | text
    reason: str = ""
    system: str | None = None
    dataset: str | None = None        # the profile's dataset key
    source: Path | None = None        # file the measured value comes from
    measured: float | None = None
    status: str = ""
    device: str | None = None         # where an efficiency figure was measured (metrics "device")


def split_system(system: str) -> tuple[str, str | None]:
    """A system id is ``<method>`` or ``<method>.<variant>`` (e.g. ``svdr.beta-m20``, ``bpr.hash``)."""
    method, _, variant = system.partition(".")
    return method, variant or None


def system_runs(cfg: Mapping[str, Any], system: str, dataset: str) -> str | None:
    """None if ``system`` is measured on ``dataset`` in this profile, else the reason it is not."""
    name, variant = split_system(system)
    method = cfg["methods"].get(name)
    if method is None:
        return f"system {system!r} has no methods.{name} section in profile {cfg['profile']}"
    if not method.get("enabled", True):
        return f"methods.{name}.enabled is false in profile {cfg['profile']}"
    if dataset not in method.get("datasets", []):
        return f"{name} is not run on {dataset} in profile {cfg['profile']} (methods.{name}.datasets)"
    if variant is not None and variant not in method.get("variants", [variant]):
        return f"variant {variant!r} is not in methods.{name}.variants of profile {cfg['profile']}"
    return None


def eval_path(cfg: Mapping[str, Any], system: str, dataset: str) -> Path:
    return results_root(cfg) / "eval" / dataset / f"{system}.json"


def metrics_path(cfg: Mapping[str, Any], system: str, dataset: str) -> Path:
    """Efficiency figures of a system: ``{"values": {name: {"value": v, "unit": u}}, ...}``."""
    return results_root(cfg) / "metrics" / dataset / f"{system}.json"


def source_path(cfg: Mapping[str, Any], system: str, dataset: str, measure: str) -> Path:
    """Where a measure lives: ``metric:<name>`` in the metrics file, anything else (an
    ir_measures string such as Success@20 or nDCG@10) in the eval file."""
    if measure.startswith("metric:"):
        return metrics_path(cfg, system, dataset)
    return eval_path(cfg, system, dataset)


def column_spec(column: str, tmatrix: Mapping[str, Any]) -> dict[str, Any]:
    """The matrix's view of a column: its paper dataset label and, optionally, its measure."""
    spec = dict(tmatrix.get("columns", {}).get(column, {}))
    spec.setdefault("dataset", tmatrix.get("datasets", {}).get(column, column.split(" ", 1)[0]))
    return spec


@lru_cache(maxsize=None)
def published(paper: str) -> dict[str, Any]:
    """load_published, parsed and validated once per process (the Snakefile asks per table)."""
    return load_published(paper)


def resolve_table(cfg: Mapping[str, Any], paper: str, table: str) -> tuple[dict[str, Any], list[Cell]]:
    doc = published(paper)
    tinfo = next(t for t in doc["tables"] if t["id"] == table)
    matrix = load_matrix(paper)
    tmatrix = matrix["tables"].get(table, {})
    default_reason = tmatrix.get("not_run") or matrix.get("defaults", {}).get("not_run", "not implemented in this harness yet")
    systems = tmatrix.get("systems", {})
    pending = tmatrix.get("pending", {})
    published_only = set(tmatrix.get("published_only", []))
    cells = []
    for rec in doc["records"]:
        if rec["table"] != table:
            continue
        c = Cell(rec["row"], rec["column"], rec["value"], rec["unit"], rec.get("measure"), rec.get("note"))
        cells.append(c)
        if rec["value"] is None and not rec.get("measure"):
            c.kind, c.reason = "text", "descriptive cell or mark; nothing to measure"
            if rec["row"] in published_only:
                c.kind = "published only"
            continue
        if rec["row"] in published_only:
            c.kind, c.reason = "published only", "system outside the five papers"
            continue
        system = systems.get(rec["row"])
        if system is None:
            c.reason = pending.get(rec["row"], default_reason)
            continue
        c.system = system
        spec = column_spec(rec["column"], tmatrix)
        c.measure = spec.get("measure") or c.measure
        if not c.measure:
            c.reason = f"no measurement defined for column {rec['column']!r} (configs/matrix/{paper}.yaml)"
            continue
        label = spec["dataset"]
        key = cfg["substitutions"].get(label)
        if key is None:
            why = cfg["tables"].get("unavailable", {}).get(label, "")
            c.reason = f"no dataset of profile {cfg['profile']} stands in for {label}" + (f": {why}" if why else "")
            continue
        c.dataset = key
        why = system_runs(cfg, system, key)
        if why:
            c.reason = why
            continue
        c.kind, c.source = "measured", source_path(cfg, system, key, c.measure)
    return tinfo, cells


def required_inputs(cfg: Mapping[str, Any], paper: str, table: str) -> list[str]:
    """Files a table needs in this profile (the Snakefile's input function)."""
    _, cells = resolve_table(cfg, paper, table)
    return sorted({str(c.source) for c in cells if c.kind == "measured"})
