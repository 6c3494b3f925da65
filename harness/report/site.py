"""`python -m harness report`: the reproduction as one static web site (no server; open it from disk).

``<results_dir>/site/``:

* ``index.html`` — per paper its tables (cells by status: OK / OKish / FAIL / stand-in / projected /
  not run ...) and figures, the claims, which profiles the site shows, and what produced them;
* ``<paper>/table-<id>.html`` — one table in the paper's shape (row groups, columns as printed), each
  cell the measured value of every profile that rendered it beside the published value, the
  difference and the status as a word and a colour; the caption, deviations, notes and the not-run
  reasons; per measured cell its provenance (hover, and a detail row: system, dataset, evaluation
  rule, config hash, commit, hardware, measured or projected);
* ``<paper>/figure-<id>.html`` — the figures of configs/figures.yaml drawn from those cells
  (:mod:`harness.report.figures`, PNG and SVG), and the plots measure jobs wrote themselves;
* ``claims.html`` — every claim of configs/claims.yaml, holds / fails / not run per profile.

Its input is what the table and claims rules wrote: ``<results_dir>/<profile>/tables/<paper>/<table>.json``
(:func:`harness.tables.render.to_record`) and ``<results_dir>/claims/<profile>.csv``, for the profile
being reported and every other profile found under ``<results_dir>`` (smoke, small, paper, ...), so a
table page shows the profiles side by side; the records are read by :mod:`harness.results`, and the table
pages' cells are the rows of its frame (what :func:`harness.results.load` returns). ``results/index.html``
points to the site.
"""
from __future__ import annotations

import argparse
import csv
import html
import os
import re
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import results
from harness.config import add_config_argument, load_config
from harness.errors import ConfigError, DataError
from harness.io import atomic_path, atomic_write_text
from harness.tables.render import SHOW_UNIT, format_measured

#: status -> CSS class; every status is also printed as its word (the page reads without colour)
STATUS_CLASS = {"OK": "ok", "OKish": "okish", "FAIL": "fail", "stand-in": "standin", "projected": "projected",
                "no published value": "nopub", "not run": "notrun", "published only": "pubonly", "text": "text",
                "did not learn": "nolearn"}
COUNTED = ("OK", "OKish", "FAIL", "stand-in", "projected", "no published value", "did not learn", "not run")
PROFILE_ORDER = ("smoke", "ci", "small", "scale", "paper")
IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif"}

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:92em;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ccc}h3{font-size:1.05em}
a{color:#1a55a8}nav{margin-bottom:1em;font-size:.9em}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
th,td{border:1px solid #d4d4d4;padding:.25em .45em;vertical-align:top;text-align:left}
th{background:#f2f2f2}tr.group th{background:#e6ecf5;text-align:left}
td.cell div{white-space:nowrap}.m .measured{font-weight:600}.prof{color:#666;font-size:.85em}
.pub{color:#555}.diff{color:#555}.status{font-size:.8em;padding:0 .3em;border-radius:3px;margin-left:.2em}
.ok .status,.status.ok{background:#c9efc9}.okish .status,.status.okish{background:#f9e8a6}
.fail .status,.status.fail{background:#f6c1c1}.standin .status,.status.standin{background:#d6e4f5}
.projected .status,.status.projected{background:#e6d9f5}.nopub .status,.status.nopub{background:#eee}
.notrun .status,.status.notrun{background:#e4e4e4;color:#555}.pubonly .status,.status.pubonly{background:#f4f4f4}
td.ok{background:#f1fbf1}td.okish{background:#fdf8e6}td.fail{background:#fdf0f0}td.standin{background:#f3f7fc}
td.projected{background:#f8f4fc}td.notrun{background:#fafafa}
.nolearn .status,.status.nolearn{background:#3a3a3a;color:#fff}td.nolearn{background:#ececec}
.caption{background:#fafafa;border-left:3px solid #bbb;padding:.3em .8em;font-size:.9em}
.small{font-size:.8em;color:#555}details{margin:.5em 0}img.fig{max-width:100%;border:1px solid #ddd}
pre{background:#f6f6f6;padding:.6em;overflow:auto;font-size:.8em}
.counts span{margin-right:.6em;white-space:nowrap}
a.prov{font-size:.75em;font-style:italic;font-weight:600;text-decoration:none;border:1px solid #1a55a8;border-radius:50%;padding:0 .35em;margin-left:.2em}
"""


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------
def site_dir(cfg: Mapping[str, Any]) -> Path:
    return Path(cfg["results_dir"]) / "site"


def profile_order(found: list[str], primary: str) -> list[str]:
    """The profile being reported first, then the others in the order smoke, ci, small, scale, paper, rest."""
    rank = {p: i for i, p in enumerate(PROFILE_ORDER)}
    return [primary] + sorted((p for p in found if p != primary), key=lambda p: (rank.get(p, len(rank)), p))


def discover(results_dir: Path) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """profile -> (paper, table) -> the table's record, for every profile that rendered tables
    (:func:`harness.results.read_records`, which :func:`harness.results.load` reads too)."""
    return results.read_records(results_dir)


def read_claims(results_dir: Path, profiles: list[str], kind: str = "claims") -> dict[str, list[dict[str, str]]]:
    """``<results_dir>/<kind>/<profile>.csv`` of each profile that has one (claims, learning)."""
    out = {}
    for p in profiles:
        path = results_dir / kind / f"{p}.csv"
        if path.exists():
            with open(path, encoding="utf-8") as fh:
                out[p] = list(csv.DictReader(fh))
    return out


# --------------------------------------------------------------------------------------------
# html helpers
# --------------------------------------------------------------------------------------------
def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_") or "x"


def page(title: str, body: list[str], depth: int) -> str:
    up = "../" * depth
    return "\n".join([
        "<!doctype html>", "<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{esc(title)}</title><link rel='stylesheet' href='{up}style.css'></head><body>",
        f"<nav><a href='{up}index.html'>Reproduction results</a> · <a href='{up}claims.html'>Claims</a> · "
        f"<a href='{up}learning.html'>Learning checks</a> · <a href='{up}estimate.html'>Cost estimate</a></nav>",
        *body, "</body></html>", ""])


def fmt(x: float | None, unit: str) -> str:
    text = format_measured(x, unit)
    return f"{text} {unit}" if text and unit in SHOW_UNIT else text


def status_span(status: str) -> str:
    return f"<span class='status {STATUS_CLASS.get(status, 'text')}'>{esc(status)}</span>"


def counts(cells: list[Mapping[str, Any]]) -> Counter:
    """How many of ``cells`` (rows of the frame) have each counted status."""
    return Counter(c["status"] for c in cells if c["status"] in COUNTED)


def counts_html(cnt: Counter) -> str:
    if not cnt:
        return "<span class='small'>no numeric cell</span>"
    return "<span class='counts'>" + "".join(
        f"<span>{status_span(s)} {cnt[s]}</span>" for s in COUNTED if cnt.get(s)) + "</span>"


def provenance_text(c: Mapping[str, Any], profile: str) -> str:
    """A measured cell's provenance in one line (the cell's hover), from its row of the frame."""
    hw = c.get("hardware") or {}
    parts = [f"profile {profile}", f"system {c['system']}", f"dataset {c['dataset']} ({c.get('dataset_id') or ''})",
             c.get("evaluation") or "", "projected (scaled from a measured fraction)" if c["kind"] == "projected" else "measured",
             f"device {c['device']}" if c.get("device") else "", f"config hash {c.get('config_hash') or '?'}",
             f"commit {c.get('commit') or '?'}",
             f"hardware {hw.get('cpu', '?')}, {hw.get('cpus', '?')} cores" if hw else ""]
    return " · ".join(p for p in parts if p)


def short_commit(commit: str) -> str:
    """A commit as 12 hex digits, keeping the mark of uncommitted changes."""
    return commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")


def rel(path: Path, start: Path) -> str:
    return os.path.relpath(path, start).replace(os.sep, "/")


# --------------------------------------------------------------------------------------------
# pages
# --------------------------------------------------------------------------------------------
class Site:
    """Everything the pages need: the records of every profile and their cells as one frame
    (:func:`harness.results.cells_frame`, what :func:`harness.results.load` returns), the figures, the
    output folder."""

    def __init__(self, cfg: Mapping[str, Any], out: Path) -> None:
        from harness.tables.matrix import published
        from harness.published import PAPERS

        self.cfg = cfg
        self.results = Path(cfg["results_dir"])
        self.final = out          # where the site will live (links to results files are computed from here)
        self.records = discover(self.results)
        primary = cfg["profile"]
        if primary not in self.records:
            raise DataError(f"no table of profile {primary!r} under {self.results}/{primary}/tables",
                            fix="render the tables first: snakemake --cores all reproduce_all (or the report target)")
        self.profiles = profile_order(list(self.records), primary)
        self.frame = results.cells_frame(self.records)   # every table cell the pages show
        self.cells: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for c in results.rows(self.frame):
            self.cells.setdefault((c["profile"], c["paper"], c["table"]), []).append(c)
        self.papers = [(p, published(p)) for p in PAPERS]
        self.claims = read_claims(self.results, self.profiles)
        self.learning = read_claims(self.results, self.profiles, "learning")
        self.figures: dict[tuple[str, str], Any] = {}
        self.forests: dict[str, Path | None] = {}

    def table_records(self, paper: str, table: str) -> dict[str, dict[str, Any]]:
        return {p: self.records[p][(paper, table)] for p in self.profiles if (paper, table) in self.records[p]}

    def table_cells(self, profile: str, paper: str, table: str) -> list[dict[str, Any]]:
        """A table's cells for one profile: its rows of the frame, in the record's order."""
        return self.cells.get((profile, paper, table), [])

    # ---- build --------------------------------------------------------------------------
    def build(self, root: Path) -> list[Path]:
        from harness.report.figures import check_against_tables, draw, load_figures

        written = []
        (root / "style.css").write_text(CSS.lstrip(), encoding="utf-8")
        specs = load_figures()
        check_against_tables(specs, {(p, t["id"]): t for p, doc in self.papers for t in doc["tables"]})
        for spec in specs:
            recs = self.table_records(spec["paper"], spec["table"])
            if recs:
                self.figures[(spec["paper"], spec["id"])] = draw(spec, recs, self.profiles, root / spec["paper"] / "img")
        for paper, doc in self.papers:
            for t in doc["tables"]:
                recs = self.table_records(paper, t["id"])
                if recs:
                    written.append(self.write(root, f"{paper}/table-{slug(t['id'])}.html",
                                              self.table_page(root, paper, t, recs)))
            for (fp, fid), drawn in self.figures.items():
                if fp == paper:
                    written.append(self.write(root, f"{paper}/figure-{fid}.html", self.figure_page(root, paper, drawn)))
        from harness.report.figures import forest

        self.forests = {paper: forest(paper, self.claims, root / "img") for paper, _ in self.papers}
        written.append(self.write(root, "claims.html", self.claims_page()))
        written.append(self.write(root, "learning.html", self.learning_page()))
        written.append(self.write(root, "estimate.html", self.estimate_page()))
        written.append(self.write(root, "index.html", self.index_page()))
        return written

    @staticmethod
    def write(root: Path, name: str, text: str) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    # ---- index ----------------------------------------------------------------------------
    def index_page(self) -> str:
        from harness.meta import git_commit

        primary = self.profiles[0]
        any_rec = next(iter(self.records[primary].values()))
        hw = any_rec.get("hardware") or {}
        body = [f"<h1>Reproduction results — profile <code>{esc(primary)}</code></h1>",
                f"<p>{esc(any_rec.get('description', ''))}</p>",
                "<p class='small'>Profiles shown side by side: " + ", ".join(
                    f"<code>{esc(p)}</code> ({len(self.records[p])} tables rendered at commit "
                    + ", ".join(f"<code>{esc(short_commit(c))}</code>" for c in sorted(
                        {r.get('git_commit') or '?' for r in self.records[p].values()})) + ")"
                    for p in self.profiles)
                + f". Site built at commit <code>{esc(short_commit(git_commit()))}</code> on "
                  f"{esc(hw.get('cpu', '?'))} ({esc(hw.get('cpus', '?'))} cores, {esc(hw.get('mem_gb', '?'))} GB). "
                  "Each table page names, per cell, the commit, config hash and hardware of the job that measured it.</p>",
                "<p class='small'>Status: " + " ".join(status_span(s) for s in COUNTED) + " — OK / OKish / FAIL: within / "
                "near / outside the tolerance of the published value on the paper's own dataset; stand-in: measured on a "
                "substitute dataset; projected: scaled from a measured fraction; did not learn: a model behind the cell failed "
                "its learning check (its loss did not fall, or it did not beat its own initial checkpoint by a significant "
                "paired margin), or training made the cell's system significantly worse than its initial checkpoint "
                "(harness/learning.py), so the value is no result; not run: the reason is on the table page.</p>"]
        for paper, doc in self.papers:
            body.append(f"<h2 id='{esc(paper)}'>{esc(paper.upper())}: {esc(doc['title'])}</h2>")
            body.append("<table><tr><th>table</th><th>title</th>" + "".join(
                f"<th>cells ({esc(p)})</th>" for p in self.profiles) + "</tr>")
            for t in doc["tables"]:
                recs = self.table_records(paper, t["id"])
                if not recs:
                    continue
                link = f"<a href='{esc(paper)}/table-{esc(slug(t['id']))}.html'>Table {esc(t['id'])}</a>"
                body.append(f"<tr><td>{link}</td><td>{esc(t['title'])}</td>" + "".join(
                    f"<td>{counts_html(counts(self.table_cells(p, paper, t['id']))) if p in recs else '<span class=small>not rendered</span>'}</td>"
                    for p in self.profiles) + "</tr>")
            totals = {p: sum((counts(self.table_cells(p, pp, tt)) for (pp, tt) in self.records[p] if pp == paper),
                             Counter()) for p in self.profiles}
            body.append("<tr><th colspan='2'>all tables</th>" + "".join(
                f"<th>{counts_html(totals[p])}</th>" for p in self.profiles) + "</tr>")
            body.append("</table>")
            figs = [(fid, d) for (fp, fid), d in self.figures.items() if fp == paper]
            if figs:
                body.append("<p>Figures: " + " · ".join(
                    f"<a href='{esc(paper)}/figure-{esc(fid)}.html'>{esc(d.spec['title'])}</a> "
                    f"{status_span('not run') if d.status == 'not run' else ''}" for fid, d in figs) + "</p>")
        body.append("<h2>Claims</h2><table><tr><th>profile</th><th>holds</th><th>fails</th><th>not run</th></tr>")
        for p in self.profiles:
            rows = self.claims.get(p)
            if rows is None:
                body.append(f"<tr><td>{esc(p)}</td><td colspan='3' class='small'>claims not checked</td></tr>")
                continue
            c = Counter(r["holds"] for r in rows)
            body.append(f"<tr><td>{esc(p)}</td><td>{c.get('true', 0)}</td><td>{c.get('false', 0)}</td>"
                        f"<td>{c.get('not run', 0)}</td></tr>")
        body.append("</table>")
        verdicts = ["holds", "holds (not significant)", "fails (not significant)", "fails", "did not learn"]
        for p in self.profiles:
            rows = self.claims.get(p) or []
            if not rows or "verdict" not in rows[0]:
                continue
            body.append(f"<h3>Claims by verdict, {esc(p)}</h3><table class='verdicts'><tr><th>paper</th>"
                        + "".join(f"<th>{esc(v)}</th>" for v in verdicts) + "<th>other</th></tr>")
            for paper in sorted({r["paper"] for r in rows}):
                c = Counter(r["verdict"] for r in rows if r["paper"] == paper)
                other = sum(n for v, n in c.items() if v not in verdicts)
                body.append(f"<tr><td>{esc(paper)}</td>" + "".join(f"<td>{c.get(v, 0)}</td>" for v in verdicts)
                            + f"<td>{other}</td></tr>")
            body.append("</table>")
        body.append("<p><a href='claims.html'>Every claim, with measured values, statements and evidence</a></p>")
        return page("Reproduction results", body, 0)

    # ---- one table ------------------------------------------------------------------------
    def table_page(self, root: Path, paper: str, t: Mapping[str, Any], recs: Mapping[str, Mapping[str, Any]]) -> str:
        primary = next(iter(recs))
        base = recs[primary]
        cells = {p: self.table_cells(p, paper, t["id"]) for p in recs}
        grid = {p: {(c["row"], c["column"]): c for c in cs} for p, cs in cells.items()}
        reasons: dict[str, int] = {}
        for p, cs in cells.items():
            for c in cs:
                if (c["kind"] == "not run" or c["status"] == "did not learn") and c.get("reason"):
                    reasons.setdefault(f"{c['reason']}", len(reasons) + 1)
        prov_ids: dict[tuple[str, str, str], str] = {}
        body = [f"<h1>{esc(paper.upper())} Table {esc(t['id'])}: {esc(t['title'])}</h1>",
                f"<p class='caption'><b>Published caption.</b> {esc(base.get('published_caption', ''))}</p>"]
        for p, r in recs.items():
            body.append(f"<div class='caption'><b>Profile <code>{esc(p)}</code>.</b> "
                        + "<br>".join(esc(line.replace("**", "").replace("`", "")) for line in r["caption"] if line)
                        + "</div>")
        groups = {row: g for g, rows in (base.get("row_groups") or {}).items() for row in rows}
        body.append(f"<table class='paper' id='table' data-paper='{esc(paper)}' data-table='{esc(t['id'])}'>")
        body.append("<thead><tr><th>system</th>" + "".join(f"<th>{esc(c)}</th>" for c in base["columns"]) + "</tr></thead><tbody>")
        last_group = None
        for row in base["rows"]:
            g = groups.get(row)
            if g and g != last_group:
                body.append(f"<tr class='group'><th colspan='{len(base['columns']) + 1}'>{esc(g)}</th></tr>")
            last_group = g
            tds = []
            for col in base["columns"]:
                tds.append(self.cell_html(paper, row, col, grid, reasons, prov_ids))
            body.append(f"<tr><th>{esc(row)}</th>{''.join(tds)}</tr>")
        body.append("</tbody></table>")
        body.append("<p class='small'>Each cell: the measured value of each profile (bold; projected in italics) with "
                    "its difference from the published value and its status, then the published value. Hover a cell, "
                    "or follow its (i), for where the number comes from.</p>")
        if reasons:
            body.append("<h2>Not run, did not learn</h2><ol class='reasons'>" + "".join(
                f"<li id='r{n}'>{esc(r)}</li>" for r, n in reasons.items()) + "</ol>")
        body += self.job_figures(root, paper, t["id"], recs)
        figs = [(fid, d) for (fp, fid), d in self.figures.items() if fp == paper and d.spec["table"] == t["id"]]
        for fid, d in figs:
            body.append(f"<h2>Figure</h2><p><a href='figure-{esc(fid)}.html'>{esc(d.spec['title'])}</a></p>"
                        f"<a href='figure-{esc(fid)}.html'><img class='fig' src='img/{esc(fid)}.png' "
                        f"alt='{esc(d.spec['title'])}'></a>")
        body.append("<h2>Cell provenance</h2>")
        for p, r in recs.items():
            rows = [c for c in cells[p] if c["kind"] in results.MEASURED]
            body.append(f"<details open><summary>Profile <code>{esc(p)}</code>: {len(rows)} measured cells "
                        f"(<a href='{esc(rel(Path(r['csv']), self.final / paper))}'>csv</a>)</summary>")
            if rows:
                body.append("<table class='prov'><tr><th>cell</th><th>system</th><th>dataset</th><th>evaluation</th>"
                            "<th>kind</th><th>config hash</th><th>commit</th><th>hardware</th><th>source</th></tr>")
                for c in rows:
                    hw = c.get("hardware") or {}
                    src = c.get("source")
                    link = (f"<a href='{esc(rel(Path(src), self.final / paper))}'>{esc(Path(src).name)}</a>"
                            if src and Path(src).exists() else esc(src or ""))
                    kind = c["kind"]
                    body.append(
                        f"<tr id='{prov_ids[(p, c['row'], c['column'])]}'><td>{esc(c['row'])} / {esc(c['column'])}</td>"
                        f"<td>{esc(c['system'])}</td><td>{esc(c['dataset'])} <span class='small'>{esc(c.get('dataset_id'))}</span></td>"
                        f"<td>{esc(c.get('evaluation'))}</td><td>{kind}{' on ' + esc(c['device']) if c.get('device') else ''}</td>"
                        f"<td><code>{esc(c.get('config_hash'))}</code></td><td><code>{esc(short_commit(c.get('commit') or ''))}</code></td>"
                        f"<td>{esc(hw.get('cpu', ''))} {esc(hw.get('cpus', ''))}</td><td>{link}</td></tr>")
                body.append("</table>")
            body.append("</details>")
        return page(f"{paper.upper()} Table {t['id']}", body, 1)

    def cell_html(self, paper: str, row: str, col: str, grid: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]],
                  reasons: Mapping[str, int], prov_ids: dict[tuple[str, str, str], str]) -> str:
        cells = {p: g.get((row, col)) for p, g in grid.items()}
        first = next((c for c in cells.values() if c is not None), None)
        if first is None:
            return "<td></td>"
        primary = next(iter(cells.values())) or first
        attrs = f"data-row='{esc(row)}' data-column='{esc(col)}'"
        if first["kind"] == "text":
            return f"<td class='cell text' {attrs}>{esc((first.get('note') or '').removeprefix('text: '))}</td>"
        pub = esc(first.get("published_text") or "—")
        if first.get("unit") in SHOW_UNIT and first.get("published_text"):
            pub += f" {esc(first['unit'])}"
        lines, titles = [], []
        for p, c in cells.items():
            if c is None:
                continue
            if c["kind"] == "published only":
                lines.append(f"<div class='m' data-profile='{esc(p)}'>{status_span('published only')}</div>")
                break
            if c["kind"] in results.MEASURED:
                pid = f"prov-{slug(p)}-{len(prov_ids) + 1}"
                prov_ids[(p, row, col)] = pid
                value = fmt(c["measured"], c["unit"])
                value = f"<i>{value}</i>" if c["kind"] == "projected" else value
                diff = ("" if c.get("published") is None or c["kind"] == "projected"
                        else f" <span class='diff'>({c['measured'] - c['published']:+.1f})</span>")
                dev = f" <span class='small'>{esc(c['device'])}</span>" if c.get("device") else ""
                n = reasons.get(c.get("reason", ""), 0) if c["status"] == "did not learn" else 0
                why = f" <a href='#r{n}'>[{n}]</a>" if n else ""
                lines.append(f"<div class='m' data-profile='{esc(p)}'><span class='prof'>{esc(p)}</span> "
                             f"<span class='measured'>{value}</span>{dev}{diff} {status_span(c['status'])}{why} "
                             f"<a class='prov' href='#{pid}' title='provenance'>i</a></div>")
                titles.append(provenance_text(c, p))
            else:
                n = reasons.get(c.get("reason", ""), 0)
                ref = f" <a href='#r{n}'>[{n}]</a>" if n else ""
                lines.append(f"<div class='m' data-profile='{esc(p)}'><span class='prof'>{esc(p)}</span> "
                             f"<span class='measured'>—</span> {status_span(c['status'])}{ref}</div>")
                titles.append(f"{p}: not run — {c.get('reason', '')}")
        lines.append(f"<div class='pub'>published <span class='published'>{pub}</span></div>")
        cls = STATUS_CLASS.get(primary["status"], "text")
        return f"<td class='cell {cls}' {attrs} title='{esc(chr(10).join(titles))}'>{''.join(lines)}</td>"

    def job_figures(self, root: Path, paper: str, table: str, recs: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The files a table's measure jobs wrote (plots, text tables), per profile."""
        out = []
        for p, r in recs.items():
            for f in r.get("figures") or []:
                src = f.get("source")
                of = f" of {f['dataset']}" if f.get("dataset") else ""  # one of several sets the cells read (attach_figures)
                title = f"{f['name']}{of} (profile {p}, written by the measure job)"
                if not src or not Path(src).is_file():
                    out.append(f"<h2>{esc(f['name'] + of)}</h2><p>{status_span('not run')} {esc(f.get('note', ''))}</p>")
                    continue
                src = Path(src)
                if src.suffix.lower() in IMAGE_SUFFIXES:
                    name = f"{slug(table)}-{slug(p)}-{slug(f['dataset']) + '-' if f.get('dataset') else ''}{src.name}"
                    dest = root / paper / "img" / name
                    if not dest.exists():  # the table page and its figure pages show the same file
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src, dest)
                    out.append(f"<h2>{esc(title)}</h2><img class='fig' src='img/{esc(name)}' alt='{esc(title)}'>")
                else:
                    text = src.read_text(encoding="utf-8", errors="replace")
                    out.append(f"<h2>{esc(title)}</h2><pre>{esc(text)}</pre>")
        return out

    # ---- one figure -----------------------------------------------------------------------
    def figure_page(self, root: Path, paper: str, d: Any) -> str:
        spec = d.spec
        profiles = ", ".join(esc(p) for p in self.table_records(paper, spec["table"]))
        body = [f"<h1>{esc(paper.upper())}: {esc(spec['title'])}</h1>",
                (f"<p>From <a href='table-{esc(slug(spec['table']))}.html'>Table {esc(spec['table'])}</a>: "
                 f"{d.measured_points} measured points ({profiles}), {d.published_points} published points. "
                 f"{status_span(d.status) if d.status == 'not run' else ''}</p>"),
                f"<p><img class='fig' src='img/{esc(spec['id'])}.png' alt='{esc(spec['title'])}'></p>",
                (f"<p class='small'><a href='img/{esc(spec['id'])}.svg'>SVG</a> · "
                 f"<a href='img/{esc(spec['id'])}.png'>PNG</a></p>")]
        if d.not_run:
            body.append("<ul>" + "".join(f"<li>{status_span('not run')} {esc(x)}</li>" for x in d.not_run) + "</ul>")
        body += self.job_figures(root, paper, spec["table"], self.table_records(paper, spec["table"]))
        return page(spec["title"], body, 1)

    # ---- learning checks --------------------------------------------------------------------
    def learning_page(self) -> str:
        """Every trained model's learning check, per profile (results/learning/<profile>.csv)."""
        body = ["<h1>Learning checks</h1><p>Did each trained model learn? Its training loss must fall (mean of "
                "the last 10% of steps below that of the first 10%), and each checked model must beat its own "
                "initial checkpoint (the same architecture and code, learning rate 0, searched by the same job on "
                "the same queries) by a significant paired margin (one-sided sign-flip permutation test; the 95% "
                "bootstrap interval of the mean per-query difference) on its search or, where the profile runs "
                "one, on the measure of its training objective (DensePhrases: reading comprehension, each question "
                "against its gold passage; Bonferroni over the two). A model that fails is "
                + status_span("did not learn") + " in every table cell it feeds (harness/learning.py). The twin "
                "search's other systems are compared with their own start the same way: one that training made "
                "significantly worse is " + status_span("did not learn") + " in the cells it feeds, though its model "
                "learned. Models whose initial checkpoint, index and search are one computation (DensePhrases' "
                "variants that differ in training alone) share one twin, named beside their initial value.</p>"]
        cls = {"learned": "ok", "did not learn": "nolearn"}

        def check(r: Mapping[str, Any]) -> str:  # harness.learning.system_check: a system below its start did not learn
            return (status_span("did not learn") + " below its start" if r.get("below_initial") == "True"
                    else esc(r.get("system_check") or ""))
        for p in self.profiles:
            rows = self.learning.get(p)
            if not rows:
                continue
            body.append(f"<h2>Profile <code>{esc(p)}</code></h2><table class='learning'><tr><th>model</th>"
                        "<th>verdict</th><th>loss first → last (steps)</th><th>dataset</th><th>system</th><th>measure</th>"
                        "<th>trained</th><th>initial</th><th>difference [95% CI]</th><th>p (one-sided)</th><th>n</th>"
                        "<th>this system</th></tr>")
            for r in rows:
                loss = (f"{float(r['loss_first']):.3g} → {float(r['loss_last']):.3g} ({r['loss_steps']})"
                        if r.get("loss_first") not in (None, "") else "—")
                num = (lambda k: f"{float(r[k]):.3f}" if r.get(k) not in (None, "") else "")  # noqa: E731
                ci = (f"{float(r['difference']):+.3f} [{float(r['ci_low']):+.3f}, {float(r['ci_high']):+.3f}]"
                      if r.get("ci_low") not in (None, "") else "")
                pv = f"{float(r['p_one_sided']):.3g}" if r.get("p_one_sided") not in (None, "") else ""
                shared = f" <span class='small'>({esc(r['start'])})</span>" if r.get("start") else ""
                body.append(f"<tr><td>{esc(r['model'])}</td><td class='{cls.get(r['verdict'], 'text')}'>"
                            f"<span class='status {cls.get(r['verdict'], 'text')}'>{esc(r['verdict'])}</span></td>"
                            f"<td>{esc(loss)}</td><td>{esc(r.get('dataset'))}</td><td>{esc(r.get('system'))}</td>"
                            f"<td>{esc(r.get('measure'))}</td><td>{num('trained')}</td><td>{num('initial')}{shared}</td>"
                            f"<td>{esc(ci)}</td><td>{esc(pv)}</td><td>{esc(r.get('queries'))}</td>"
                            f"<td>{check(r)}</td></tr>")
            body.append("</table>")
        if len(body) == 1:
            body.append("<p>No learning check was run (results/learning/&lt;profile&gt;.csv is missing).</p>")
        return page("Learning checks", body, 0)

    # ---- cost estimate ------------------------------------------------------------------------
    def estimate_page(self) -> str:
        """The paper profile's cost projected from the rehearsal's measured jobs (results/rehearsal;
        harness.estimate), or how to run the rehearsal where there is none."""
        from harness import estimate, ledger
        from harness.config import load_config

        root = self.results / "rehearsal"
        cmd = ("snakemake --cores all reproduce_all --configfile configs/profiles/paper.yaml "
               "configs/profiles/rehearsal.yaml")
        body = ["<h1>What the paper profile costs</h1><p>Projected from the rehearsal (configs/profiles/rehearsal.yaml: "
                "every job of the paper profile at the papers' model shapes with random weights, one or two steps, "
                "data slices): each measured job's seconds per unit (optimizer step at the paper's batch, 1,000 "
                "documents, query) times the paper profile's count (the dataset cards, the job's epochs and batch "
                "size). Every figure here is <em>projected</em>, on the hardware named; a train or index job pays its "
                "start-up once (pricing steady), other jobs spread it over their units, so small slices over-project "
                "(harness/estimate.py).</p>"]
        paper = load_config([estimate.PAPER_CONFIG])
        records = ledger.read(ledger.LEDGER_DIR)  # the costs measured elsewhere, committed (harness/ledger.py)
        rows = estimate.estimate(paper, root, records)
        failed = ledger.every_failure(root, records)
        if not rows and not failed:
            body.append(f"<p>No rehearsal has run here ({esc(root)} has no finished job) and no ledger is committed "
                        f"({esc(ledger.LEDGER_DIR)}). Run it, then rebuild the report:</p><pre>{esc(cmd)}</pre>")
            return page("Cost estimate", body, 0)
        body.append("<table class='estimate'><tr><th>stage</th><th>job</th><th>dataset</th><th>measured s</th>"
                    "<th>counted as</th><th>projected hours</th><th>peak host GiB (measured on the slice)</th><th>peak GPU GiB</th>"
                    "<th>projected disk GiB</th><th>measured on</th><th>fallbacks</th><th>the paper's own figure</th>"
                    "<th>source</th></tr>")
        for r in rows:
            hours = f"{r['seconds'] / 3600:,.2f}" if r.get("seconds") is not None else "no count"
            gpu = f"{r['gpu_peak_gib']:.1f}" if r.get("gpu_peak_gib") is not None else "—"
            size = f"{r['disk_gib']:,.2f}" if r.get("disk_gib") is not None else "—"
            # a row scaled from another backbone's job has no memory of its own (harness.estimate.sibling_of)
            host = f"{r['host_peak_gib']:.1f}" if r.get("host_peak_gib") is not None else "—"
            ran = f"{r['measured_seconds']:.1f}" if r.get("measured_seconds") is not None else "—"
            body.append(f"<tr><td>{esc(r['stage'])}</td><td>{esc(r['job'])}</td><td>{esc(r['dataset'])}</td>"
                        f"<td>{ran}</td><td>{esc(r['how'])}</td><td class='projected'>{hours}</td>"
                        f"<td>{host}</td><td>{gpu}</td><td class='projected'>{size}</td><td>{esc(r['hardware'])}</td>"
                        f"<td>{esc(r.get('fallbacks', ''))}</td><td>{esc(r['papers_own'])}</td>"
                        f"<td>{esc(r['source'])}" + "".join(f"<br>{esc(r[k])}" for k in ("stale", "older_code") if r.get(k))
                        + "</td></tr>")
        body.append("</table>")
        body.append("<ul class='projected'>" + "".join(f"<li>{esc(line)}</li>"
                                                       for line in estimate.summary(estimate.totals(rows, 8))
                                                       + estimate.schedule_lines(estimate.schedule(paper, rows, 8))
                                                       + [estimate.unpriced_line(paper, root)]
                                                       + estimate.machine_lines(
                                                           estimate.every_measurement(root, records, paper)))
                    + "</ul>")
        if failed:
            body.append(f"<h2>{len(failed)} rehearsal job(s) failed or did not finish</h2><ul>"
                        + "".join(f"<li><code>{esc(log)}</code>: {esc(line)}</li>" for log, line in failed) + "</ul>")
        return page("Cost estimate", body, 0)

    # ---- claims ---------------------------------------------------------------------------
    def claims_page(self) -> str:
        from harness.claims import load_claims

        claims = load_claims()
        body = [("<h1>Claims</h1><p>The papers' directional claims (configs/claims.yaml), checked on each profile's "
                 "measurements. The verdict weighs the evidence: a paired test over the queries both sides share "
                 "(p after Holm's correction per paper), the mean difference with its 95% bootstrap interval and n; "
                 "\"not significant\" means the profile's queries cannot tell the difference from noise.</p>"),
                "<table id='claims'><tr><th>claim</th><th>paper</th><th>statement</th>" + "".join(
                    f"<th>{esc(p)}</th>" for p in self.profiles) + "</tr>"]
        by_profile = {p: {r["claim_id"]: r for r in rows} for p, rows in self.claims.items()}
        word = {"true": ("holds", "ok"), "false": ("fails", "fail"), "not run": ("not run", "notrun")}
        for c in claims:
            tds = []
            for p in self.profiles:
                r = by_profile.get(p, {}).get(c["id"])
                if r is None:
                    tds.append("<td class='small'>not checked</td>")
                    continue
                w, cls = word.get(r["holds"], (r["holds"], "text"))
                w = r.get("verdict") or w
                if w == "did not learn":  # a side is no result (harness.learning): not a verdict on the paper
                    cls = "nolearn"
                    r = {**r, "p_holm": "", "test": r.get("unlearned", "")}
                ev = (f"diff {r['diff']} [{r['ci_low']}, {r['ci_high']}], p (Holm) {r['p_holm']}, n {r['n']}; "
                      f"a difference under {r['mdd']} is below what {r['n']} queries detect (power 0.8)"
                      if r.get("p_holm") else (r.get("test") or ""))
                tds.append(f"<td class='{cls}' title='{esc(r.get('detail'))}'><span class='status {cls}'>{esc(w)}</span>"
                           f"<div class='small'>{esc(r.get('measured'))}</div><div class='small'>{esc(ev)}</div></td>")
            body.append(f"<tr id='{esc(c['id'])}'><td><code>{esc(c['id'])}</code></td><td>{esc(c['paper'])}</td>"
                        f"<td>{esc(c['statement'])}<div class='small'>{esc(c.get('source', ''))}</div></td>{''.join(tds)}</tr>")
        body.append("</table>")
        for paper, png in self.forests.items():
            if png is not None:
                body.append(f"<h2 id='forest-{esc(paper)}'>{esc(paper)}: the claims' differences</h2>"
                            f"<img class='forest' src='img/{esc(png.name)}' alt='forest plot of the {esc(paper)} claims: "
                            f"each profile's mean difference with its 95% interval, the published difference as x'>")
        return page("Claims", body, 0)


def build(cfg: Mapping[str, Any], out: Path | None = None) -> Path:
    """Build the site into ``out`` (default <results_dir>/site) atomically; returns its index.html."""
    out = Path(out) if out is not None else site_dir(cfg)
    site = Site(cfg, out)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        site.build(tmp)
    return out / "index.html"


def redirect(index: Path, target: Path) -> None:
    """A page at ``index`` that sends the browser to ``target`` (results/index.html -> site/index.html)."""
    href = esc(rel(target, index.parent))
    atomic_write_text(index, "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
                             f"<meta http-equiv='refresh' content='0; url={href}'><title>Reproduction results</title>"
                             f"</head><body><p><a href='{href}'>Reproduction results</a></p></body></html>\n")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness report", description=__doc__.split("\n\n")[0])
    add_config_argument(ap)
    ap.add_argument("--out", type=Path, help="site folder (default <results_dir>/site)")
    ap.add_argument("--index", type=Path, help="also write a page here that redirects to the site (results/index.html)")
    ap.add_argument("--open", action="store_true", help="print the path of the built site's index page (builds nothing)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    out = args.out or site_dir(cfg)
    if args.open:
        index = out / "index.html"
        if not index.exists():
            raise ConfigError(f"{index} does not exist: the report has not been built for results_dir "
                              f"{cfg['results_dir']}", fix="snakemake --cores all report (or reproduce_all)")
        print(index.resolve().as_uri())
        print(index.resolve())
        return 0
    index = build(cfg, out)
    if args.index:
        redirect(args.index, index)
    print(f"wrote {index}")
    return 0
