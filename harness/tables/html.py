"""`python -m harness index-html --tables T.md ... --out results/index.html`: one page linking
every rendered table (markdown and CSV), with per-table counts of measured / not-run cells and
the claims report."""
from __future__ import annotations

import argparse
import csv
import html
import os
from collections import Counter
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.io import atomic_write_text


def _counts(csv_path: Path) -> Counter:
    with open(csv_path, encoding="utf-8") as fh:
        return Counter(r["status"] for r in csv.DictReader(fh))


def build(cfg: dict, tables: list[Path], claims: Path | None, out: Path) -> str:
    rel = lambda p: html.escape(os.path.relpath(p, out.parent))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Reproduction results</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.2em .6em;"
        "border-bottom:1px solid #ddd;text-align:left}</style></head><body>",
        f"<h1>Reproduction results — profile <code>{html.escape(cfg['profile'])}</code></h1>",
        f"<p>{html.escape(cfg.get('description', ''))}</p>",
        "<table><tr><th>paper</th><th>table</th><th>cells by status</th><th>files</th></tr>",
    ]
    for md in sorted(tables, key=lambda p: (p.parent.name, p.stem)):
        csv_path = md.with_suffix(".csv")
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(_counts(csv_path).items()))
        parts.append(f"<tr><td>{html.escape(md.parent.name)}</td><td>{html.escape(md.stem)}</td>"
                     f"<td>{html.escape(counts)}</td><td><a href='{rel(md)}'>md</a> · <a href='{rel(csv_path)}'>csv</a></td></tr>")
    parts.append("</table>")
    if claims and claims.exists():
        with open(claims, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        parts.append(f"<h2>Claims (<a href='{rel(claims)}'>csv</a>)</h2><table><tr><th>claim</th><th>paper</th>"
                     "<th>holds</th><th>measured</th></tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(r[k])}</td>" for k in ("claim_id", "paper", "holds", "measured")) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness index-html", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--tables", nargs="*", type=Path, default=[])
    ap.add_argument("--claims", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    atomic_write_text(args.out, build(cfg, args.tables, args.claims, args.out))
    print(f"wrote {args.out} ({len(args.tables)} tables)")
    return 0
