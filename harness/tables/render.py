"""Render one paper table: our measured numbers beside the published ones.

`python -m harness table --paper svdr --table 1` writes
``<results_dir>/tables/<paper>/<table>.md`` and ``.csv`` (or ``--out X.md`` and ``X.csv``). Per cell: measured, published, difference,
status — OK / OKish / FAIL by the matrix's tolerance when we measured the paper's own dataset;
"stand-in" when a substitute dataset was measured (the difference is shown but says little);
"not run" with the reason; "published only" for systems outside the five papers.

The CSV and markdown are written from the table's cells as a DataFrame (:func:`harness.results.record_frame`
of the record :func:`to_record` makes), the frame :func:`harness.results.load` reads back and the report shows.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from harness import learning, results
from harness.config import add_config_argument, load_config
from harness.io import atomic_write_text, read_json
from harness.measured import find, find_mean, mean_of
from harness.tables.matrix import SCALE, Cell, column_spec, load_matrix, resolve_table
from harness.published import format_value, load_published
from harness.units import convert

# paper dataset label -> canonical id of the dataset the paper evaluated on
PAPER_DATASETS = {
    "NQ": "dpr-w100/natural-questions/test",
    "TQA": "dpr-w100/trivia-qa/test",
    "WQ": "dpr-w100/web-questions/test",
    "TREC": "dpr-w100/curated-trec/test",
    "SQuAD": "dpr-w100/squad/test",
    "SciFact": "beir/scifact/test",
    "MSMARCO-dev": "msmarco-passage/dev/small",
    "NFCorpus": "beir/nfcorpus/test",
    "ArguAna": "beir/arguana/test",
    "FiQA": "beir/fiqa/test",
    "SCIDOCS": "beir/scidocs/test",
}
CSV_FIELDS = ("paper", "table", "row", "column", "measure", "unit", "published", "measured", "difference",
              "status", "system", "dataset", "reason", "note")


def fill(cfg: Mapping[str, Any], paper: str, table: str) -> tuple[dict[str, Any], list[Cell]]:
    tinfo, cells = resolve_table(cfg, paper, table)
    tmatrix = load_matrix(paper)["tables"].get(table, {})
    tol = tmatrix.get("tolerance") or load_matrix(paper).get("defaults", {}).get("tolerance") or {"ok": 1.0, "okish": 3.0}
    for c in cells:
        if c.kind != "measured":
            c.status = c.kind
            continue
        found = (find_mean(cfg, str(c.system), c.datasets, str(c.measure)) if c.datasets
                 else find(cfg, str(c.system), str(c.dataset), str(c.measure)))
        c.source = found.path or c.source
        if found.value is None:
            c.kind, c.status = "not run", "not run"
            c.reason = found.reason or f"{c.source} has no measure {c.measure}"
            continue
        if c.measure.startswith("metric:"):
            entry = found.raw or {}
            value = convert(entry["value"], entry["unit"], c.unit)
            c.device = entry.get("device")
            c.projected = entry.get("kind") == "projected"
        else:
            value = found.value * SCALE.get(c.unit, 1.0)
        c.measured = value
        spec = column_spec(c.column, tmatrix)
        label = spec["dataset"]
        if c.projected:
            c.status = "projected"
        elif c.datasets or cfg["datasets"][c.dataset]["id"] != PAPER_DATASETS.get(label):   # a mean: over a subset
            c.status = "stand-in"
        elif c.published is None:  # a numeric cell whose value the paper's text lost (note says so)
            c.status = "no published value"
        else:
            diff = abs(c.measured - c.published)
            c.status = "OK" if diff <= tol["ok"] else "OKish" if diff <= tol["okish"] else "FAIL"
        failed = None if spec.get("training_free") else next(
            (f for d in c.sets if (f := learning.cell_status(cfg, str(c.system), d, c.unit))), None)
        if failed is not None:  # never a verdict against the paper for a model that did not learn
            c.status, c.reason = failed
    return tinfo, cells


SHOW_UNIT = {"ms", "s", "m", "h", "GB", "MB", "Q/s", "x"}


def _pub(c: Mapping[str, Any]) -> str:
    """A frame row's published value as the markdown prints it."""
    if c["published"] is None:
        return "—"
    text = c["published_text"]
    return f"{text} {c['unit']}" if c["unit"] in SHOW_UNIT else text


def format_measured(x: float | None, unit: str) -> str:
    """A measured value as the tables print it (two decimals for ratios and sizes, else one)."""
    return _num(x, 2 if unit in {"ratio", "GB", "MB"} else 1)


def _num(x: float | None, digits: int = 1) -> str:
    if x is not None and x != 0 and abs(x) < 1.0 and digits < 4:
        return f"{x:.3g}"  # three significant digits below 1 (e.g. ms per query, seconds in a column printed in hours)
    return "" if x is None else f"{x:.{digits}f}"


def caption(cfg: Mapping[str, Any], paper: str, table: str, tinfo: Mapping[str, Any], cells: list[Cell]) -> list[str]:
    tmatrix = load_matrix(paper)["tables"].get(table, {})
    used = {c.dataset for c in cells if c.kind == "measured" and c.dataset and not c.datasets}
    means = {tuple(c.datasets) for c in cells if c.kind == "measured" and c.datasets}
    lines = [f"**{paper.upper()} Table {table}: {tinfo['title']}**", "",
             f"Profile `{cfg['profile']}` ({cfg.get('description', '')}). Cells: measured / published."]
    subs = []
    for label, sub in cfg["substitutions"].items():
        keys = mean_of(cfg, label)
        if keys and tuple(keys) in means:
            subs.append(f"{label} → the mean over {len(keys)} sets, each weighted equally: "
                        + ", ".join(f"{k} (`{cfg['datasets'][k]['id']}`)" for k in keys))
        elif not keys and sub in used:
            subs.append(f"{label} → {sub} (`{cfg['datasets'][sub]['id']}`)")
    if subs:
        lines.append("Datasets measured: " + "; ".join(subs) + ".")
    if tmatrix.get("answer_rule"):
        lines.append(f"Answer rule: `{tmatrix['answer_rule']}` (harness.datasets.answers), passage text only.")
    for dev in cfg["tables"].get("deviations", []):
        lines.append(f"Deviation: {dev}.")
    for note in tmatrix.get("notes", []):
        lines.append(f"Note: {note}.")
    return lines


def to_markdown(cfg: Mapping[str, Any], paper: str, table: str, tinfo: Mapping[str, Any], cells: list[Cell]) -> str:
    """The table as markdown, from the filled cells (through their frame, as :func:`render` writes it)."""
    return markdown_text(_lite_record(cfg, paper, table, tinfo, cells), _lite_frame(cfg, paper, table, cells))


def to_csv(paper: str, table: str, cells: list[Cell]) -> str:
    """The table as CSV, from the filled cells (through their frame, as :func:`render` writes it)."""
    return csv_text(_lite_frame(None, paper, table, cells))


def _lite_record(cfg: Mapping[str, Any], paper: str, table: str, tinfo: Mapping[str, Any], cells: list[Cell]) -> dict[str, Any]:
    """What :func:`markdown_text` reads of a record (:func:`to_record` without provenance)."""
    return {"paper": paper, "table": table, "title": tinfo["title"], "caption": caption(cfg, paper, table, tinfo, cells)[2:],
            "rows": list(tinfo["rows"]), "columns": list(tinfo["columns"])}


def _lite_frame(cfg: Mapping[str, Any] | None, paper: str, table: str, cells: list[Cell]) -> Any:
    recs = [{**cell_record(cfg, c), **({"provenance": {"source": str(c.source)}} if c.kind == "measured" else {})}
            for c in cells]
    return results.record_frame({"paper": paper, "table": table, "cells": recs},
                                profile=None if cfg is None else cfg["profile"])


def markdown_text(rec: Mapping[str, Any], frame: Any) -> str:
    """A table record's markdown (title, caption, the grid, the reasons), its cells read from ``frame``
    (:func:`harness.results.record_frame`)."""
    paper, table = rec["paper"], rec["table"]
    cells = results.rows(frame)
    grid = {(c["row"], c["column"]): c for c in cells}
    reasons: dict[str, int] = {}
    for c in cells:
        if c["kind"] == "not run":
            reasons.setdefault(c["reason"], len(reasons) + 1)
    unlearned: dict[str, int] = {}
    for c in cells:
        if c["status"] == learning.STATUS:
            unlearned.setdefault(c["reason"], len(reasons) + len(unlearned) + 1)
    out = [f"**{paper.upper()} Table {table}: {rec['title']}**", "", *rec["caption"], ""]
    out.append("| " + " | ".join(["system"] + list(rec["columns"])) + " |")
    out.append("|" + "---|" * (len(rec["columns"]) + 1))
    for row in rec["rows"]:
        vals = []
        for col in rec["columns"]:
            c = grid.get((row, col))
            if c is None:
                vals.append("")
            elif c["kind"] == "text":
                vals.append((c["note"] or "").removeprefix("text: "))
            elif c["kind"] == "published only":
                vals.append(f"{_pub(c)} (published only)")
            elif c["kind"] == "not run":
                vals.append(f"— / {_pub(c)} ⁽{reasons[c['reason']]}⁾")
            else:
                diff = "" if c["published"] is None else f" ({c['measured'] - c['published']:+.1f})"
                dev = f" ({c['device']})" if c["device"] else ""
                if c["kind"] == "projected":  # scaled from a measured fraction: never shown as a measurement
                    vals.append(f"*{format_measured(c['measured'], c['unit'])} projected*{dev} / {_pub(c)} projected")
                    continue
                if c["status"] == learning.STATUS:  # no result: shown plainly, with why
                    vals.append(f"{format_measured(c['measured'], c['unit'])}{dev} / {_pub(c)} {c['status']} "
                                f"⁽{unlearned[c['reason']]}⁾")
                    continue
                vals.append(f"**{format_measured(c['measured'], c['unit'])}**{dev} / {_pub(c)}{diff} {c['status']}")
        out.append("| " + " | ".join([row] + vals) + " |")
    out.append("")
    out.append("Status: OK / OKish / FAIL = within / near / outside the tolerance of the published value on the "
               "paper's own dataset; stand-in = measured on a substitute dataset (difference not comparable); "
               "projected = scaled from a measured fraction (e.g. timed batches times the test set), not measured whole; "
               "did not learn = a model behind the cell failed its learning check, or training made the cell's system "
               "significantly worse than its initial checkpoint (harness/learning.py): no result.")
    if reasons:
        out.append("")
        out.append("Not run:")
        out += [f"{n}. {r}" for r, n in reasons.items()]
    if unlearned:
        out.append("")
        out.append("Did not learn (the value is no result):")
        out += [f"{n}. {r}" for r, n in unlearned.items()]
    return "\n".join(out) + "\n"


def csv_text(frame: Any) -> str:
    """A table's CSV (:data:`CSV_FIELDS`), its cells read from ``frame`` (:func:`harness.results.record_frame`)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for c in results.rows(frame):
        w.writerow({
            "paper": c["paper"], "table": c["table"], "row": c["row"], "column": c["column"], "measure": c["measure"] or "",
            "unit": c["unit"], "published": c["published_text"] or "", "measured": _num(c["measured"], 4),
            "difference": "" if c["measured"] is None or c["published"] is None
            else f"{c['measured'] - c['published']:.4f}", "status": c["status"], "system": c["system"] or "",
            "dataset": c["dataset"] or "", "reason": c["reason"] or "", "note": c["note"] or "",
        })
    return buf.getvalue()


def _provenance(cfg: Mapping[str, Any], c: Cell, read: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Where a measured cell comes from: the file, and the meta.json of the job that made it (the search
    job's run folder for an evaluation file, the measure job's folder for a metrics file)."""
    from harness.config import results_root
    from harness.meta import META

    if c.kind != "measured" or c.source is None:
        return {}
    src = Path(c.source)
    folder = src.parent
    root = results_root(cfg)
    try:
        rel = folder.relative_to(root / "eval")
        folder = root / "runs" / rel
    except ValueError:
        pass
    out: dict[str, Any] = {"source": str(src)}
    meta_path = folder / META
    if meta_path.exists():
        meta = read(meta_path)
        out.update({k: meta.get(k) for k in ("job", "config_hash", "git_commit", "created", "hardware", "seconds")})
        out["meta"] = str(meta_path)
    return out


def _evaluation(c: Cell, table_rule: str | None, read: Callable[[Path], dict[str, Any]]) -> str:
    """How a measured cell's number was obtained, as its source file says: the answer rule (or gold
    relevance) and the questions of an evaluation file, the protocol of a metrics entry."""
    m = c.measure or ""
    if c.datasets:   # a mean over sets: each set's file (<kind>/<dataset>/<job>/<system>.json) says its own
        each = [f"{Path(src).parent.parent.name}: " + _evaluation(replace(c, datasets=[], source=src), table_rule, read)
                for src in c.sources if Path(src).exists()]
        return (f"the mean over {len(c.datasets)} sets, each weighted equally, of: " + "; ".join(each))
    doc = read(Path(c.source)) if c.source and Path(c.source).exists() else {}
    if m.startswith("metric:"):
        entry = (doc.get("values") or {}).get(m.removeprefix("metric:")) or {}
        proto = entry.get("protocol") or doc.get("protocol")
        return f"{m.removeprefix('metric:')}" + (f", timing protocol {proto}" if proto else "")
    split = f" on {doc['queries']} {doc.get('split', 'test')} queries" if "queries" in doc else ""
    if doc.get("answer_rule") and m.startswith("Success@"):
        return f"{m}: answer rule {doc['answer_rule']} (harness.datasets.answers){split}"
    if doc.get("relevance") == "gold":
        return f"{m} (ir_measures): the gold passage of each question is its qrel{split}"
    if table_rule and not doc:
        return f"{m}: answer rule {table_rule}"
    return f"{m} (ir_measures){split}"


def cell_record(cfg: Mapping[str, Any] | None, c: Cell) -> dict[str, Any]:
    """One filled cell as data (a record's cell without its evaluation and provenance)."""
    datasets = {} if cfg is None else cfg["datasets"]
    return {
        "row": c.row, "column": c.column, "measure": c.measure or "", "unit": c.unit,
        "published": None if c.published is None else float(c.published),
        "published_text": "" if c.published is None else format_value(c.published),
        "measured": c.measured, "status": c.status or c.kind, "kind": c.kind,
        "system": c.system or "", "dataset": "+".join(c.datasets) or c.dataset or "",
        "dataset_id": "" if c.datasets else datasets[c.dataset]["id"] if c.dataset in datasets else "",
        "reason": c.reason if c.kind != "measured" or c.status == learning.STATUS else "", "note": c.note or "",
        "device": c.device or "", "projected": c.projected,
    }


def to_record(cfg: Mapping[str, Any], paper: str, table: str, tinfo: Mapping[str, Any], cells: list[Cell]) -> dict[str, Any]:
    """The table as data for the report (harness/report): the paper's shape (rows, columns, groups),
    captions, and per cell the values, status and provenance (system, dataset, evaluation rule,
    config hash, commit, hardware, measured or projected)."""
    from harness.meta import git_commit, hardware

    tmatrix = load_matrix(paper)["tables"].get(table, {})
    rule = tmatrix.get("answer_rule")
    read = cache(read_json)  # a system's eval file and its job's meta.json serve every column of its row
    out_cells = []
    for c in cells:
        rec = cell_record(cfg, c)
        if c.kind == "measured":
            rec["evaluation"] = _evaluation(c, rule, read)
            rec["provenance"] = _provenance(cfg, c, read)
        out_cells.append(rec)
    return {
        "paper": paper, "table": table, "title": tinfo["title"], "published_caption": tinfo.get("caption", ""),
        "profile": cfg["profile"], "description": cfg.get("description", ""),
        "caption": caption(cfg, paper, table, tinfo, cells)[2:],
        "rows": list(tinfo["rows"]), "columns": list(tinfo["columns"]), "row_groups": dict(tinfo.get("row_groups") or {}),
        "git_commit": git_commit(), "hardware": hardware(), "cells": out_cells,
    }


def table_path(cfg: Mapping[str, Any], paper: str, table: str) -> Path:
    """Where a table lands: <results_dir>/tables/<paper>/<table>.md (csv beside it)."""
    return Path(cfg["results_dir"]) / "tables" / paper / f"{table}.md"


def record_path(cfg: Mapping[str, Any], paper: str, table: str) -> Path:
    """The profile's own copy of a table as data, for the report: <results_dir>/<profile>/tables/<paper>/<table>.json
    (the .md/.csv under <results_dir>/tables hold the profile rendered last; these stay per profile)."""
    from harness.config import results_root

    return results_root(cfg) / "tables" / paper / f"{table}.json"


def render(cfg: Mapping[str, Any], paper: str, table: str, md: Path | None = None,
           record: Path | None = None) -> tuple[Path, Path]:
    load_published(paper)
    tinfo, cells = fill(cfg, paper, table)
    md = Path(md) if md is not None else table_path(cfg, paper, table)
    csv_path = md.with_suffix(".csv")
    rec = to_record(cfg, paper, table, tinfo, cells)
    frame = results.record_frame(rec, cfg["profile"])  # the table's cells, as harness.results.load reads them back
    atomic_write_text(csv_path, csv_text(frame))
    text = markdown_text(rec, frame)
    attached = attach_figures(cfg, paper, table, cells, md)
    links = [f["note"] for f in attached]
    atomic_write_text(md, text + ("\n" + "\n".join(links) + "\n" if links else ""))
    # the measure job's own file (per profile), not the copy beside the table (the profile rendered last)
    rec["figures"] = attached
    rec["csv"] = str(csv_path)
    path = Path(record) if record is not None else record_path(cfg, paper, table)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    return md, csv_path


def attach_figures(cfg: Mapping[str, Any], paper: str, table: str, cells: list[Cell],
                   md: Path) -> list[dict[str, Any]]:
    """Copy the files the matrix's ``figures`` names (plots, text tables written by a measure job
    beside its metrics: the folder of a measured cell's source, else a measure job's folder of a
    measured cell's dataset) next to the table as ``<table>-<name>``; per file a dict: ``name``,
    ``source`` (the measure job's file or None), ``note`` (the markdown line linking it or saying it was
    not run) and ``dataset``: None where the measured cells read one set; where they read several (a
    mean over sets, or columns on different sets) each set's file, as ``<table>-<set>-<name>``, named
    as one of them, since a measure job draws its file per set and none is the table's whole."""
    import shutil

    from harness.config import results_root

    measured = [c for c in cells if c.kind == "measured"]
    sets = list(dict.fromkeys(s for c in measured for s in c.sets))
    out = []
    for name in load_matrix(paper)["tables"].get(table, {}).get("figures", []):
        for d in sets if len(sets) > 1 else [None]:
            found = [] if d else [Path(s).parent / name for c in measured for s in c.sources]
            for s in [d] if d else sets:
                found += sorted((results_root(cfg) / "metrics" / s).glob(f"*/{name}"))
            src = next((f for f in found if f.is_file()), None)
            what = f"Figure {name}" + (f" of {d}" if d else "")
            if src is None:
                line = (f"{what}: not run (no measure job on {d} wrote it)." if d else
                        f"{what}: not run (no measured cell of this table comes with it).")
            else:
                dest = Path(md).parent / f"{table}-{d + '-' if d else ''}{name}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                one_of = f", one of the {len(sets)} sets the table's cells read: each drawn alone" if d else ""
                line = f"{what}: [{dest.name}]({dest.name}) (written by the measure job beside `{src}`{one_of})."
            out.append({"name": name, "source": None if src is None else str(src), "note": line, "dataset": d})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness table", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--paper", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--out", type=Path, default=None, help="markdown path (default <results_dir>/tables/<paper>/<table>.md)")
    ap.add_argument("--record", type=Path, default=None,
                    help="the table as JSON for the report (default <results_dir>/<profile>/tables/<paper>/<table>.json)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    md, _ = render(cfg, args.paper, args.table, args.out, args.record)
    print(f"wrote {md}")
    return 0
