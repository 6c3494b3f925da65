"""`python -m harness regress`: compare measured values with configs/expected/<profile>.yaml.

Each expected entry is ``{key: <dataset>/<system>/<measure>, value: v, tol: t}``; a measured
value outside [v - t, v + t], or missing, is a breach. All breaches are printed; the exit status
is 1 when there is any, and the report file is written only when there is none.
``--record`` writes the expected file from the current measurements (review before committing).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from harness.config import REPO, add_config_argument, load_config, read_yaml, validate
from harness.errors import ConfigError
from harness.io import atomic_write_text, write_json
from harness.measured import available, check_measure, lookup, outputs, parse_key

EXPECTED_DIR = REPO / "configs" / "expected"


def expected_path(profile: str) -> Path:
    return EXPECTED_DIR / f"{profile}.yaml"


def load_expected(profile: str, path: Path | None = None) -> dict[str, Any]:
    """configs/expected/<profile>.yaml (or ``path``), validated; a misspelled measure fails here."""
    path = expected_path(profile) if path is None else Path(path)
    if not path.exists():
        raise ConfigError(f"no expected values for profile {profile!r}: {path} is missing",
                          fix=f"run the profile, then `python -m harness regress --record` and review {path}")
    doc = read_yaml(path)
    validate(doc, "expected", source=str(path))
    for i, e in enumerate(doc["values"]):
        check_measure(parse_key(e["key"])[2], f"{path}: values[{i}] (key {e['key']})")
    return doc


def check(cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    doc = load_expected(cfg["profile"])
    rows, breaches = [], []
    for e in doc["values"]:
        got = lookup(cfg, e["key"])
        ok = got is not None and abs(got - e["value"]) <= e["tol"]
        rows.append({"key": e["key"], "expected": e["value"], "tol": e["tol"], "measured": got, "ok": ok})
        if not ok:
            breaches.append(f"{e['key']}: measured {'missing' if got is None else f'{got:.4f}'}, "
                            f"expected {e['value']:.4f} ± {e['tol']} ({available(cfg, e['key']) or ', '.join(map(str, outputs(cfg, e['key'])))})")
    return rows, breaches


def required_inputs(cfg: dict[str, Any]) -> list[str]:
    """Eval files the expected values name ([] when the profile has no expected file yet: the
    regression rule then reports the missing configs/expected/<profile>.yaml itself)."""
    if not expected_path(cfg["profile"]).exists():
        return []
    doc = load_expected(cfg["profile"])
    return sorted({str(o) for e in doc["values"] for o in outputs(cfg, e["key"])})


def record(cfg: dict[str, Any], keys: list[str], tol: float) -> Path:
    """Write the measured values of ``keys``; an entry already in the file keeps its tolerance and
    note (they are judgements, not measurements), a new one gets ``tol``; entries of other keys stay
    as they are (recording a new method's values never drops another's)."""
    old = {e["key"]: e for e in load_expected(cfg["profile"])["values"]} if expected_path(cfg["profile"]).exists() else {}
    values = [e for k, e in old.items() if k not in keys]
    for key in keys:
        got = lookup(cfg, key)
        if got is None:
            raise ConfigError(f"cannot record {key}: not measured yet ({available(cfg, key) or 'run the profile first'})")
        entry = {"key": key, "value": round(got, 4), "tol": old.get(key, {}).get("tol", tol)}
        if old.get(key, {}).get("note"):
            entry["note"] = old[key]["note"]
        values.append(entry)
    path = expected_path(cfg["profile"])
    header = (f"# Expected measured values of profile {cfg['profile']}, recorded from a real run with\n"
              f"# `python -m harness regress --record`; tol is absolute (measures are fractions in [0, 1]).\n")
    atomic_write_text(path, header + yaml.safe_dump({"profile": cfg["profile"], "values": values}, sort_keys=False))
    return path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness regress", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--out", type=Path, help="report JSON, written only when every value is within tolerance")
    ap.add_argument("--record", nargs="*", metavar="KEY", help="write configs/expected/<profile>.yaml for these keys")
    ap.add_argument("--tol", type=float, default=0.02, help="tolerance used by --record")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.record is not None:
        keys = args.record or [e["key"] for e in load_expected(cfg["profile"])["values"]]
        print(f"wrote {record(cfg, keys, args.tol)}")
        return 0
    rows, breaches = check(cfg)
    for r in rows:
        mark = "ok  " if r["ok"] else "FAIL"
        got = "missing" if r["measured"] is None else f"{r['measured']:.4f}"
        print(f"{mark} {r['key']}: {got} (expected {r['expected']:.4f} ± {r['tol']})")
    if breaches:
        print(f"regression: {len(breaches)} of {len(rows)} values outside tolerance:")
        for b in breaches:
            print(f"  BREACH {b}")
        return 1
    print(f"regression: all {len(rows)} values within tolerance (profile {cfg['profile']})")
    if args.out:
        write_json(args.out, {"profile": cfg["profile"], "values": rows})
    return 0
