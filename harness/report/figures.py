"""The papers' figures as plots of the measured data (matplotlib, PNG and SVG), beside the published
numbers where the paper printed them.

A figure is data (configs/figures.yaml, schema workflow/schemas/figures.schema.yaml): the table whose
cells it plots and how. Its input is the table as the table rule wrote it for each profile
(``<results_dir>/<profile>/tables/<paper>/<table>.json``, :func:`harness.tables.render.to_record`), so
every point on a plot is a cell of a rendered table, with the same measured / published values and
status. A figure none of whose cells was measured in any profile is drawn with a "not run" panel that
gives the cells' reason; it is never left out silently.
"""
from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harness.config import REPO, read_yaml, validate
from harness.errors import ConfigError

FIGURES = REPO / "configs" / "figures.yaml"
PUBLISHED_STYLE = {"color": "0.35", "label": "published"}
PROFILE_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
COLUMN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P")


@cache
def load_figures(path: Path = FIGURES) -> tuple[dict[str, Any], ...]:
    """The figure specs, validated; an id used twice in one paper fails naming both."""
    doc = read_yaml(path)
    validate(doc, "figures", source=str(path))
    seen: set[tuple[str, str]] = set()
    for i, spec in enumerate(doc["figures"]):
        key = (spec["paper"], spec["id"])
        if key in seen:
            raise ConfigError(f"{path}: figures[{i}]: id {spec['id']!r} is used twice for paper {spec['paper']}",
                              fix="give each figure of a paper its own id")
        seen.add(key)
        if spec["kind"] in ("bars", "lines") and not spec.get("columns"):
            raise ConfigError(f"{path}: figures[{i}] ({spec['id']}): kind {spec['kind']} needs 'columns'")
        if spec["kind"] == "lines" and not spec.get("x"):
            raise ConfigError(f"{path}: figures[{i}] ({spec['id']}): kind lines needs x.from_row")
        if spec["kind"] == "scatter" and not spec.get("panels"):
            raise ConfigError(f"{path}: figures[{i}] ({spec['id']}): kind scatter needs 'panels'")
    return tuple(doc["figures"])


def check_against_tables(specs: tuple[dict[str, Any], ...], tables: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Every figure names a published table and columns that table has (``tables``: (paper, id) ->
    the published table), so a typo fails before anything is drawn."""
    for spec in specs:
        t = tables.get((spec["paper"], spec["table"]))
        where = f"{FIGURES}: figure {spec['paper']}/{spec['id']}"
        if t is None:
            raise ConfigError(f"{where}: paper {spec['paper']!r} has no table {spec['table']!r}",
                              fix=f"name a table id of configs/published/{spec['paper']}.yaml")
        cols = list(spec.get("columns") or []) + [c for p in spec.get("panels") or [] for c in (p["x"], p["y"])]
        for c in cols:
            if c not in t["columns"]:
                raise ConfigError(f"{where}: table {spec['table']} has no column {c!r}; its columns: {t['columns']}")


@dataclass
class Drawn:
    """What one figure came to: files written, and whether any measured value is on it."""

    spec: dict[str, Any]
    png: Path | None = None
    svg: Path | None = None
    measured_points: int = 0
    published_points: int = 0
    not_run: list[str] = field(default_factory=list)   # panels that say "not run", with why

    @property
    def status(self) -> str:
        return "drawn" if self.measured_points else "not run"


def _cells(record: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(c["row"], c["column"]): c for c in record["cells"]}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _unit(records: Mapping[str, Mapping[str, Any]], column: str) -> str:
    for rec in records.values():
        for c in rec["cells"]:
            if c["column"] == column and c.get("unit"):
                return c["unit"]
    return ""


def _label(column: str, unit: str) -> str:
    return f"{column} ({unit})" if unit and unit not in column and unit != "ratio" else column


def _series(records: Mapping[str, Mapping[str, Any]], profiles: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, key, style): the published series, then one per profile."""
    out = [("published", "published", dict(PUBLISHED_STYLE))]
    for i, p in enumerate(profiles):
        if p in records:
            out.append((f"measured ({p})", p, {"color": PROFILE_COLOURS[i % len(PROFILE_COLOURS)], "label": f"measured ({p})"}))
    return out


def _value(cells: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]], key: str, row: str, col: str) -> float | None:
    """The published value (key "published") or a profile's measured value of a cell."""
    if key == "published":
        for by_cell in cells.values():
            c = by_cell.get((row, col))
            if c is not None and _num(c.get("published")) is not None:
                return float(c["published"])
        return None
    c = cells.get(key, {}).get((row, col))
    return None if c is None else _num(c.get("measured"))


def _reason(records: Mapping[str, Mapping[str, Any]], columns: list[str], primary: str) -> str:
    """The most common reason the figure's cells were not measured (the primary profile's first)."""
    order = [primary] + [p for p in records if p != primary]
    for p in order:
        rec = records.get(p)
        if rec is None:
            continue
        why = Counter(c["reason"] for c in rec["cells"] if c["column"] in columns and c.get("reason")
                      and c.get("kind") not in ("text", "published only"))
        if why:
            return f"{why.most_common(1)[0][0]} (profile {p})"
    return "no measured cell in any profile"


def _text_panel(ax: Any, text: str) -> None:
    ax.set_axis_off()
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 70)), ha="center", va="center", fontsize=9,
            transform=ax.transAxes, bbox={"boxstyle": "round", "facecolor": "#f3f3f3", "edgecolor": "#999999"})


def draw(spec: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]], profiles: list[str], out_dir: Path) -> Drawn:
    """Draw ``spec`` from ``records`` (profile -> the table's record) into ``out_dir``/<id>.png|svg.
    ``profiles``: the profiles in series order (the one being reported first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = Drawn(dict(spec))
    if not records:
        raise ConfigError(f"figure {spec['paper']}/{spec['id']}: no profile rendered table {spec['table']}")
    cells = {p: _cells(r) for p, r in records.items()}
    first = records[next(iter(p for p in profiles if p in records))]
    rows = list(first["rows"])
    series = _series(records, profiles)
    kind = spec["kind"]
    panels: list[dict[str, Any]] = (list(spec["panels"]) if kind == "scatter"
                                    else [{"column": c} for c in spec["columns"]] if kind == "bars"
                                    else [{"columns": list(spec["columns"])}])
    columns = [c for p in panels for c in (p.get("column"), p.get("x"), p.get("y"), *(p.get("columns") or [])) if c]
    missing = list(spec.get("missing") or [])
    n = len(panels) + len(missing)
    if kind == "bars":
        height = max(2.5, 0.22 * len(rows) * len(series) + 1.2)
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n + 1.5, height), squeeze=False)
    elif kind == "lines":
        fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 5.2), squeeze=False)
    else:
        fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4.2), squeeze=False)
    axes = list(axes[0])
    measured = sum(1 for p in records for r in rows for c in columns if _value(cells, p, r, c) is not None)
    why = "" if measured else f"measured: not run — {_reason(records, columns, profiles[0])}"
    for ax, panel in zip(axes, panels):
        if kind == "bars":
            _bars(ax, panel["column"], rows, series, cells, records, bool(spec.get("log")), result)
        elif kind == "lines":
            _lines(ax, spec, panel["columns"], rows, series, cells, records, result)
        else:
            _scatter(ax, panel, rows, series, cells, records, result)
        if why:
            if not ax.has_data():
                _text_panel(ax, why)
            else:
                ax.text(0.5, 0.02, why[:120], transform=ax.transAxes, ha="center", va="bottom", fontsize=7,
                        color="#b00000")
    if why:
        result.not_run.append(why)
    for ax, text in zip(axes[len(panels):], missing):
        _text_panel(ax, text)
        result.not_run.append(text)
    fig.suptitle(spec["title"], fontsize=11)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    result.png, result.svg = out_dir / f"{spec['id']}.png", out_dir / f"{spec['id']}.svg"
    fig.savefig(result.png, dpi=110)
    fig.savefig(result.svg)
    plt.close(fig)
    return result


def _bars(ax: Any, column: str, rows: list[str], series: list, cells: Mapping, records: Mapping, log: bool,
          result: Drawn) -> None:
    shown = [r for r in rows if any(_value(cells, key, r, column) is not None for _, key, _ in series)]
    width = 0.8 / len(series)
    for j, (_, key, style) in enumerate(series):
        ys, vals = [], []
        for i, r in enumerate(shown):
            v = _value(cells, key, r, column)
            if v is None or (log and v <= 0):
                continue
            ys.append(i + (j - (len(series) - 1) / 2) * width)
            vals.append(v)
        if vals:
            hatch = None if key != "published" else "//"
            ax.barh(ys, vals, height=width, color=style["color"], label=style["label"], hatch=hatch,
                    edgecolor="white" if hatch is None else "0.2", linewidth=0.3)
            if key == "published":
                result.published_points += len(vals)
            else:
                result.measured_points += len(vals)
    ax.set_yticks(range(len(shown)), [textwrap.shorten(r, 38) for r in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(_label(column, _unit(records, column)), fontsize=8)
    if log:
        ax.set_xscale("log")
    if ax.has_data():
        ax.legend(fontsize=7, loc="best")
        ax.grid(axis="x", alpha=0.3)


def _lines(ax: Any, spec: Mapping[str, Any], columns: list[str], rows: list[str], series: list, cells: Mapping,
           records: Mapping, result: Drawn) -> None:
    pattern = re.compile(spec["x"]["from_row"])
    xs = {}
    for r in rows:
        m = pattern.search(r)
        if m:
            xs[r] = float(m.group(1))
    for ci, col in enumerate(columns):
        colour = COLUMN_COLOURS[ci % len(COLUMN_COLOURS)]
        for j, (name, key, _) in enumerate(series):
            pts = sorted((xs[r], v) for r in xs if (v := _value(cells, key, r, col)) is not None)
            if not pts:
                continue
            px, py = zip(*pts)
            if key == "published":
                ax.plot(px, py, linestyle="--", marker="o", markerfacecolor="none", color=colour, alpha=0.8,
                        label=f"{col}, published")
                result.published_points += len(pts)
            else:
                ax.plot(px, py, linestyle="-", marker=MARKERS[j % len(MARKERS)], color=colour,
                        label=f"{col}, {name}")
                result.measured_points += len(pts)
    ax.set_xlabel(spec["x"].get("label", "x"), fontsize=8)
    unit = _unit(records, columns[0])
    ax.set_ylabel(unit or "value", fontsize=8)
    if spec["x"].get("log"):
        ax.set_xscale("log")
    if spec.get("log"):
        ax.set_yscale("log")
    if ax.has_data():
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
        ax.grid(alpha=0.3)


def _scatter(ax: Any, panel: Mapping[str, Any], rows: list[str], series: list, cells: Mapping, records: Mapping,
             result: Drawn) -> None:
    xc, yc = panel["x"], panel["y"]
    for j, (_, key, style) in enumerate(series):
        pts = []
        for r in rows:
            x, y = _value(cells, key, r, xc), _value(cells, key, r, yc)
            if x is None or y is None or (panel.get("log_x") and x <= 0) or (panel.get("log_y") and y <= 0):
                continue
            pts.append((x, y, r))
        if not pts:
            continue
        px, py, _ = zip(*pts)
        if key == "published":
            ax.scatter(px, py, facecolors="none", edgecolors=style["color"], marker="o", s=40, label=style["label"])
            result.published_points += len(pts)
        else:
            ax.scatter(px, py, color=style["color"], marker=MARKERS[j % len(MARKERS)], s=40, label=style["label"])
            result.measured_points += len(pts)
        for x, y, r in pts:
            ax.annotate(textwrap.shorten(r, 28), (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(_label(xc, _unit(records, xc)), fontsize=8)
    ax.set_ylabel(_label(yc, _unit(records, yc)), fontsize=8)
    if panel.get("log_x"):
        ax.set_xscale("log")
    if panel.get("log_y"):
        ax.set_yscale("log")
    if ax.has_data():
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)


def _float(x: Any) -> float | None:
    """A CSV cell as a number (None when empty or not a number)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def forest(paper: str, rows: Mapping[str, list[Mapping[str, Any]]], out_dir: Path) -> Path | None:
    """The paper's claims as a forest plot (PNG and SVG in ``out_dir``): one row per claim with a
    tested difference, each profile's mean difference with its 95% interval, a zero line, and the
    published difference as a mark where the paper prints both sides. None when no claim of the
    paper has an interval in any profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids = sorted({r["claim_id"] for rs in rows.values() for r in rs
                  if r["paper"] == paper and _float(r.get("ci_low")) is not None})
    if not ids:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(ids) + 1.4))
    profiles = list(rows)
    step = 0.6 / max(1, len(profiles))
    labelled: set[str] = set()
    for k, prof in enumerate(profiles):
        by_id = {r["claim_id"]: r for r in rows[prof]}
        for i, cid in enumerate(ids):
            r = by_id.get(cid)
            if r is None or _float(r.get("ci_low")) is None:
                continue
            y = i + (k - (len(profiles) - 1) / 2) * step
            d, lo, hi = _float(r["diff"]), _float(r["ci_low"]), _float(r["ci_high"])
            # the interval as computed; the point inside it (a difference of aggregates, e.g. a trimmed
            # mean, can sit just outside an interval of per-query means)
            c = min(max(d, lo), hi)
            ax.errorbar([c], [y], xerr=[[c - lo], [hi - c]], fmt="o", color=f"C{k}", capsize=3,
                        label=None if prof in labelled else prof)
            labelled.add(prof)
            pub = _float(r.get("published_diff"))
            if pub is not None:
                ax.plot([pub], [y], marker="x", color="black", linestyle="none")
    ax.axvline(0.0, color="grey", linewidth=1)
    ax.set_yticks(range(len(ids)), ids, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("mean difference lhs − (factor × rhs + offset), 95% interval  (x: published difference)")
    ax.set_title(f"{paper}: claims", fontsize=10)
    if labelled:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"claims-{paper}.png"
    fig.savefig(png, dpi=110)
    fig.savefig(out_dir / f"claims-{paper}.svg")
    plt.close(fig)
    return png