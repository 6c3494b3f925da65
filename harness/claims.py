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
from harness.measured import available, check_measure, find_key, outputs

CLAIMS = REPO / "configs" / "claims.yaml"
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def load_claims(path: Path = CLAIMS) -> list[dict[str, Any]]:
    """The claims of ``path``, validated; a misspelled measure fails here, not as a missing value."""
    doc = read_yaml(path)
    validate(doc, "claims", source=str(path))
    for claim in doc["claims"]:
        for side in ("lhs", "rhs"):
            if "measure" in claim[side]:
                check_measure(claim[side]["measure"], f"{path}: claim {claim['id']} ({side})")
    return doc["claims"]


def quantity_key(cfg: Mapping[str, Any], q: Mapping[str, Any]) -> str | None:
    if "value" in q:
        return None
    dataset = cfg["substitutions"].get(q["dataset"], q["dataset"])
    return f"{dataset}/{q['system']}/{q['measure']}"


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
        found = find_key(cfg, key)
        if found.value is None:
            return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "not run", "measured": "",
                    "detail": f"{key}: {found.reason}"}
        v, unit = found.value, found.unit
        if found.raw and found.raw.get("kind") == "projected":
            unit = (unit + " projected").strip()
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
                out.update(str(o) for o in outputs(cfg, key))
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
