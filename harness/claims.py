"""`python -m harness claims --out results/claims/<profile>.csv`: check configs/claims.yaml.

Each claim compares two quantities (measured values or constants). Columns of the output:
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
from harness.measured import available, lookup, source

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
        v = lookup(cfg, key)
        if v is None:
            return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "not run", "measured": "",
                    "detail": f"{key}: not measured ({source(cfg, key)} missing)"}
        values.append(v)
        names.append(f"{key}={v:.4f}")
    factor = claim.get("factor", 1.0)
    holds = OPS[claim["op"]](values[0], factor * values[1])
    rhs = names[1] if factor == 1.0 else f"{factor} × {names[1]}"
    return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "true" if holds else "false",
            "measured": f"{names[0]} {claim['op']} {rhs}", "detail": claim["statement"]}


def required_inputs(cfg: Mapping[str, Any]) -> list[str]:
    out = set()
    for claim in load_claims():
        for side in ("lhs", "rhs"):
            key = quantity_key(cfg, claim[side])
            if key and available(cfg, key) is None:
                out.add(str(source(cfg, key)))
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
