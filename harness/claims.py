"""`python -m harness claims --out results/claims/<profile>.csv`: check configs/claims.yaml.

Each claim compares two quantities (measured values or constants); a measure ``metric:<name>``
reads the system's metrics file (efficiency figures, in base units). The right side is
``factor × rhs + offset`` (defaults 1 and 0; offset -0.02 reads "within 2 points"). Columns of the output:
claim_id, paper, holds (true / false / not run), measured, detail.
"""
from __future__ import annotations

import argparse
import csv
import io
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config import REPO, add_config_argument, load_config, read_yaml, validate
from harness.io import atomic_write_text
from harness.measured import available, lookup, parse_key, source

CLAIMS = REPO / "configs" / "claims.yaml"
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def load_claims(path: Path = CLAIMS) -> list[dict[str, Any]]:
    doc = read_yaml(path)
    validate(doc, "claims", source=str(path))
    return doc["claims"]


def quantity_key(cfg: Mapping[str, Any], q: Mapping[str, Any]) -> str | None:
    if "value" in q:
        return None
    dataset = cfg["substitutions"].get(q["dataset"], q["dataset"])
    return f"{dataset}/{q['system']}/{q['measure']}"


def _source(cfg: Mapping[str, Any], key: str) -> Path:
    """Where a quantity lives: ``metric:<name>`` measures in the metrics file, others in the eval file."""
    from harness.tables.matrix import metrics_path

    dataset, system, measure = parse_key(key)
    return metrics_path(cfg, system, dataset) if measure.startswith("metric:") else source(cfg, key)


_BASE_UNIT = {"time": "s", "bytes": "B"}


def _lookup(cfg: Mapping[str, Any], key: str) -> tuple[float, str] | None:
    """A measured value and the unit it is given in; ``metric:<name>`` values are converted to
    their dimension's base unit (seconds, bytes), so that both sides of a claim compare in the
    same unit (the unit is then printed: ``metric:query_ms=0.00078 s``)."""
    measure = parse_key(key)[2]
    if not measure.startswith("metric:"):
        v = lookup(cfg, key)
        return None if v is None else (v, "")
    from harness.io import read_json
    from harness.units import UNITS

    path = _source(cfg, key)
    if not path.exists():
        return None
    entry = read_json(path).get("values", {}).get(measure.removeprefix("metric:"))
    if entry is None:
        return None
    dim, factor = UNITS[entry["unit"]]
    return float(entry["value"]) * factor, _BASE_UNIT.get(dim, "")


def evaluate(cfg: Mapping[str, Any], claim: Mapping[str, Any]) -> dict[str, Any]:
    values, names = [], []
    for side in ("lhs", "rhs"):
        q = claim[side]
        key = quantity_key(cfg, q)
        if key is None:
            values.append(float(q["value"]))
            names.append(f"{q['value']}")
            continue
        why = available(cfg, key)
        if why:
            return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "not run", "measured": "",
                    "detail": f"{key}: {why}"}
        found = _lookup(cfg, key)
        if found is None:
            return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "not run", "measured": "",
                    "detail": f"{key}: not measured ({_source(cfg, key)} missing)"}
        v, unit = found
        values.append(v)
        names.append(f"{key}={v:.6g}" + (f" {unit}" if unit else ""))
    factor = claim.get("factor", 1.0)
    offset = claim.get("offset", 0.0)
    holds = OPS[claim["op"]](values[0], factor * values[1] + offset)
    rhs = names[1] if factor == 1.0 else f"{factor} × {names[1]}"
    if offset:
        rhs += f" {'+' if offset > 0 else '-'} {abs(offset)}"
    return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "true" if holds else "false",
            "measured": f"{names[0]} {claim['op']} {rhs}", "detail": claim["statement"]}


def required_inputs(cfg: Mapping[str, Any]) -> list[str]:
    out = set()
    for claim in load_claims():
        for side in ("lhs", "rhs"):
            key = quantity_key(cfg, claim[side])
            if key and available(cfg, key) is None:
                out.add(str(_source(cfg, key)))
    return sorted(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness claims", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    rows = [evaluate(cfg, c) for c in load_claims()]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["claim_id", "paper", "holds", "measured", "detail"], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(args.out, buf.getvalue())
    for r in rows:
        print(f"{r['claim_id']}: {r['holds']} — {r['measured'] or r['detail']}")
    return 0
