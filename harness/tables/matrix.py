"""Resolve every published cell to what this profile measures for it.

A cell is (paper, table, row, column). The matrix (configs/matrix/<paper>.yaml) maps the row to
a measured system; the column's dataset label (e.g. "NQ") is mapped to one of the profile's
datasets by config key ``substitutions`` (or to several, whose mean stands in for a paper's average
over sets of which the profile wires some: ``{mean_of: [...]}``); the measure is the published record's ir_measures
string. The result per cell is either a measured value with its source file, or "not run"
with the reason, or "published only".
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harness.config import REPO, read_yaml, validate
from harness.measured import locate, mean_of, stand_in
from harness.published import load_published

MATRIX_DIR = REPO / "configs" / "matrix"
SCALE = {"%": 100.0, "ratio": 1.0}


@cache
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
    dataset: str | None = None        # the profile's dataset key (the first of ``datasets``)
    datasets: list[str] = field(default_factory=list)   # a mean's sets (substitutions.<label>.mean_of)
    source: Path | None = None        # file the measured value comes from (set when filled)
    sources: list[Path] = field(default_factory=list)   # files that may hold it (first with the value wins)
    outputs: list[Path] = field(default_factory=list)   # the rule outputs (folders) they live in
    measured: float | None = None
    status: str = ""
    device: str | None = None         # where an efficiency figure was measured (metrics "device")
    projected: bool = False           # scaled from a measured fraction (metrics "kind": "projected")

    @property
    def sets(self) -> list[str]:
        """Every dataset the cell reads: a mean's sets, else its one dataset (none where it has none)."""
        return self.datasets or ([self.dataset] if self.dataset else [])


def column_spec(column: str, tmatrix: Mapping[str, Any]) -> dict[str, Any]:
    """The matrix's view of a column: its paper dataset label and, optionally, its measure."""
    spec = dict(tmatrix.get("columns", {}).get(column, {}))
    spec.setdefault("dataset", tmatrix.get("datasets", {}).get(column, column.split(" ", 1)[0]))
    return spec


def record_target(rec: Mapping[str, Any], tmatrix: Mapping[str, Any]) -> tuple[str | None, str | None, dict[str, Any]]:
    """(system, measure, column spec) the reproduction matrix maps a published record to (system None
    where the row is not wired)."""
    spec = column_spec(rec["column"], tmatrix)
    system = spec.get("systems", {}).get(rec["row"], tmatrix.get("systems", {}).get(rec["row"]))
    return system, spec.get("measure") or rec.get("measure"), spec


@cache
def published(paper: str) -> dict[str, Any]:
    """load_published, parsed and validated once per process (the Snakefile asks per table)."""
    return load_published(paper)


def resolve_table(cfg: Mapping[str, Any], paper: str, table: str) -> tuple[dict[str, Any], list[Cell]]:
    doc = published(paper)
    tinfo = next(t for t in doc["tables"] if t["id"] == table)
    matrix = load_matrix(paper)
    tmatrix = matrix["tables"].get(table, {})
    default_reason = tmatrix.get("not_run") or matrix.get("defaults", {}).get("not_run", "not implemented in this harness yet")
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
        system, measure, spec = record_target(rec, tmatrix)
        if system is None:
            c.reason = pending.get(rec["row"], default_reason)
            continue
        if spec.get("not_run"):
            c.reason = spec["not_run"]
            continue
        c.system = system
        c.measure = measure
        if not c.measure:
            c.reason = f"no measurement defined for column {rec['column']!r} (configs/matrix/{paper}.yaml)"
            continue
        keys, why = stand_in(cfg, spec["dataset"])
        if why:
            c.reason = why
            continue
        c.dataset, c.datasets = keys[0], mean_of(cfg, spec["dataset"])
        for key in keys:
            sources, outputs, why = locate(cfg, system, key, c.measure)
            if why:
                c.reason = why + (f" (one of the {len(keys)} sets whose mean stands in for {spec['dataset']})"
                                  if c.datasets else "")
                break
            c.sources += sources
            c.outputs += outputs
        if why:
            continue
        c.kind, c.source = "measured", c.sources[0]
    return tinfo, cells


def required_inputs(cfg: Mapping[str, Any], paper: str, table: str) -> list[str]:
    """Files a table needs in this profile (the Snakefile's input function)."""
    from harness.learning import required

    _, cells = resolve_table(cfg, paper, table)
    outs = {str(o) for c in cells if c.kind == "measured" for o in c.outputs}
    outs |= {str(o) for c in cells if c.kind == "measured" for d in c.sets
             for o in required(cfg, str(c.system), d)}  # the learning check's evaluations
    return sorted(outs)
