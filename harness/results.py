"""Results as pandas DataFrames: every table cell of every rendered profile, the claims, per-query scores.

```python
from harness import results
df = results.load(profile="smoke", paper="bpr")     # one row per table cell
print(df[["table", "row", "column", "measured", "published", "status"]])
```

* :func:`load` — every cell of every table rendered under ``<results_dir>/<profile>/tables/<paper>/<table>.json``
  (the table rule's record, :func:`harness.tables.render.to_record`), one row each, columns :data:`COLUMNS`:
  profile, paper, table, row, column, system, dataset, measure, measured, published (both in the
  table's unit), status (OK / OKish / FAIL / stand-in / projected / no published value / did not learn /
  not run / published only / text), kind (measured / projected / not run / published only / text), device,
  config_hash and commit (of the job that measured the cell), source (the file the value comes from);
* :func:`claims` — every claim of ``<results_dir>/claims/<profile>.csv`` with its verdict and figures;
* :func:`perquery` — the per-query values of one system on one dataset (query_id, value), from the
  ``<system>.perquery.tsv.gz`` the evaluate rule writes beside the evaluation file.

The markdown and CSV tables (``harness.tables.render``) and the report's table cells
(``harness.report.site``) are rendered from the same frame (:func:`record_frame`, :func:`cells_frame`),
so what a page shows is what :func:`load` returns.

``python -m harness results --format csv|parquet|md [--profile P] [--paper P] [--claims] [--output FILE]``
exports them.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import REPO
from harness.errors import ConfigError, DataError
from harness.io import read_json

#: the columns of :func:`load`, in order
COLUMNS = ("profile", "paper", "table", "row", "column", "system", "dataset", "measure", "measured", "published",
           "status", "kind", "device", "config_hash", "commit", "source")
#: what the renderers need beyond :data:`COLUMNS` (:func:`cells_frame` has both)
DETAIL = ("unit", "published_text", "reason", "note", "dataset_id", "evaluation", "hardware", "record")
#: kinds of a cell with a value of ours
MEASURED = ("measured", "projected")
FORMATS = ("csv", "parquet", "md")
CLAIM_NUMBERS = ("n", "diff", "ci_low", "ci_high", "p", "p_holm", "mdd", "er", "dri", "published_diff")
CLAIMS_YAML = REPO / "configs" / "claims.yaml"
RENDER_FIX = "render the tables first: snakemake --cores all reproduce_all (or one table: <paper>_table<id>)"


def default_results_dir() -> Path:
    """The project's results folder (``results_dir`` of configs/default.yaml)."""
    return REPO / "results"


# --------------------------------------------------------------------------------------------
# reading the rendered records
# --------------------------------------------------------------------------------------------
def read_records(results_dir: Path | str) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """profile -> (paper, table) -> the table's record, for every profile that rendered tables under
    ``results_dir`` (``<profile>/tables/<paper>/<table>.json``); each record knows its file (``_path``)."""
    results_dir = Path(results_dir)
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    if not results_dir.is_dir():
        return out
    for prof in sorted(results_dir.iterdir()):
        tables = prof / "tables"
        if not tables.is_dir():
            continue
        for path in sorted(tables.glob("*/*.json")):
            rec = read_json(path)
            if not isinstance(rec, dict) or "cells" not in rec or "paper" not in rec:
                raise DataError(f"{path}: not a table record (no 'paper'/'cells')",
                                fix=f"render the table again: snakemake --cores all {path.parent.name}_table...")
            rec["_path"] = str(path)
            out.setdefault(rec.get("profile", prof.name), {})[(rec["paper"], rec["table"])] = rec
    return out


def _cell_row(profile: str | None, rec: Mapping[str, Any], c: Mapping[str, Any]) -> dict[str, Any]:
    prov = c.get("provenance") or {}
    return {
        "profile": profile, "paper": rec["paper"], "table": rec["table"], "row": c["row"], "column": c["column"],
        "system": c.get("system") or None, "dataset": c.get("dataset") or None, "measure": c.get("measure") or None,
        "measured": c.get("measured"), "published": c.get("published"), "status": c.get("status") or c.get("kind"),
        "kind": "projected" if c.get("projected") else c.get("kind"), "device": c.get("device") or None,
        "config_hash": prov.get("config_hash"), "commit": prov.get("git_commit"), "source": prov.get("source"),
        "unit": c.get("unit", ""), "published_text": c.get("published_text", ""), "reason": c.get("reason", ""),
        "note": c.get("note", ""), "dataset_id": c.get("dataset_id", ""), "evaluation": c.get("evaluation"),
        "hardware": prov.get("hardware"), "record": rec.get("_path"),
    }


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows, columns=[*COLUMNS, *DETAIL])
    for col in ("measured", "published"):
        df[col] = df[col].astype("float64")
    return df


def record_frame(rec: Mapping[str, Any], profile: str | None = None) -> pd.DataFrame:
    """One table record's cells as a frame (:data:`COLUMNS` and :data:`DETAIL`), in the record's order:
    what the markdown and CSV tables are written from."""
    return _frame([_cell_row(profile if profile is not None else rec.get("profile"), rec, c) for c in rec["cells"]])


def cells_frame(records: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]]) -> pd.DataFrame:
    """Every cell of :func:`read_records`' records, profile by profile (:data:`COLUMNS` and :data:`DETAIL`):
    what the report's table pages are written from."""
    return _frame([_cell_row(p, rec, c) for p, recs in records.items() for rec in recs.values() for c in rec["cells"]])


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as dicts, a missing value as None (what the renderers read)."""
    return [{k: None if _missing(v) else v for k, v in r.items()} for r in frame.to_dict("records")]


# --------------------------------------------------------------------------------------------
# the API
# --------------------------------------------------------------------------------------------
def _check_paper(paper: str | None) -> None:
    from harness.published import PAPERS

    if paper is not None and paper not in PAPERS:
        raise ConfigError(f"unknown paper {paper!r}; papers: {', '.join(PAPERS)}", fix="name one of them (paper=... or --paper)")


def _records(results_dir: Path | str | None, profile: str | None,
             paper: str | None) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """read_records, filtered, refusing a folder with nothing rendered or an unknown profile or paper."""
    _check_paper(paper)
    root = Path(results_dir) if results_dir is not None else default_results_dir()
    records = read_records(root)
    if not records:
        raise DataError(f"no rendered table under {root} (no {root}/<profile>/tables/<paper>/<table>.json)",
                        fix=RENDER_FIX + (", or pass results_dir= / --results-dir" if results_dir is None else ""))
    if profile is not None:
        if profile not in records:
            raise DataError(f"profile {profile!r} has no rendered table under {root}/{profile}/tables; "
                            f"rendered profiles: {', '.join(records)}",
                            fix=f"{RENDER_FIX} with --configfile configs/profiles/{profile}.yaml, or name a rendered profile")
        records = {profile: records[profile]}
    if paper is not None:
        records = {p: {k: r for k, r in recs.items() if k[0] == paper} for p, recs in records.items()}
        records = {p: recs for p, recs in records.items() if recs}
        if not records:
            raise DataError(f"no table of paper {paper!r} rendered under {root}" + (f" for profile {profile!r}" if profile else ""),
                            fix=f"render them: snakemake --cores all {paper}_table<id> (or reproduce_all)")
    return records


def load(profile: str | None = None, paper: str | None = None, results_dir: Path | str | None = None,
         table: str | None = None) -> pd.DataFrame:
    """Every table cell of every rendered profile (or of ``profile``; of ``paper``; of ``table``), one row
    each, columns :data:`COLUMNS`; ``results_dir`` defaults to the project's results/."""
    frame = cells_frame(_records(results_dir, profile, paper))
    if table is not None:
        if table not in set(frame["table"]):
            raise DataError(f"no table {table!r} rendered" + (f" for paper {paper!r}" if paper else "")
                            + f"; tables: {', '.join(sorted(set(frame['table'])))}",
                            fix="name a rendered table (the id printed in the paper, e.g. 1 or fig3-ablation)")
        frame = frame[frame["table"] == table]
    return frame.loc[:, list(COLUMNS)].reset_index(drop=True)


def claims(profile: str | None = None, paper: str | None = None,
           results_dir: Path | str | None = None) -> pd.DataFrame:
    """Every claim checked in ``<results_dir>/claims/<profile>.csv`` (every profile, or ``profile``; of
    ``paper``): profile, claim_id, paper, statement, then the verdict and figures the claims rule
    wrote (holds, measured, detail, verdict, test, n, diff, ci_low, ci_high, p, p_holm, mdd, ...; the
    figures as numbers)."""
    from harness.config import read_yaml

    _check_paper(paper)
    root = Path(results_dir) if results_dir is not None else default_results_dir()
    folder = root / "claims"
    paths = sorted(folder.glob("*.csv")) if profile is None else [folder / f"{profile}.csv"]
    paths = [p for p in paths if p.is_file()]
    if not paths:
        found = ", ".join(p.stem for p in sorted(folder.glob("*.csv")))
        raise DataError(f"no claims checked under {folder}" + (f" for profile {profile!r} ({folder / f'{profile}.csv'})"
                                                               if profile else "") + (f"; checked: {found}" if found else ""),
                        fix="check them: snakemake --cores all claims (or python -m harness claims --config ... --out FILE)")
    frames = []
    for path in paths:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        df.insert(0, "profile", path.stem)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    # configs/claims.yaml read plainly (harness.claims validates it; this module sits below it)
    statements = {c["id"]: c.get("statement") for c in (read_yaml(CLAIMS_YAML) or {}).get("claims", [])}
    df.insert(df.columns.get_loc("paper") + 1, "statement", df["claim_id"].map(statements))
    for col in CLAIM_NUMBERS:
        if col in df:
            df[col] = pd.to_numeric(df[col].replace("", None), errors="coerce")
    if "n" in df:
        df["n"] = df["n"].astype("Int64")   # a count; missing where no test applies
    if paper is not None:
        df = df[df["paper"] == paper].reset_index(drop=True)
    return df


def _profile_roots(root: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(root.iterdir()) if (p / "eval").is_dir() or (p / "tables").is_dir()} \
        if root.is_dir() else {}


def perquery(system: str, dataset: str, measure: str, profile: str | None = None,
             results_dir: Path | str | None = None) -> pd.DataFrame:
    """The per-query values of ``measure`` (an ir_measures string, e.g. nDCG@10, or Success@20 for QA) of
    ``system`` on the profile's dataset key ``dataset``: a frame (query_id, value), the values whose mean
    the evaluation file reports. Read from ``<profile>/eval/<dataset>/<job>/<system>.perquery.tsv.gz``
    (the evaluate rule writes it beside ``<system>.json``); the job is the one behind the profile's
    table cells, else the one search job (not a learning-check twin, ``<model>@init``) that evaluated it."""
    from harness.evaluate.run import PER_QUERY_SUFFIX, read_per_query

    root = Path(results_dir) if results_dir is not None else default_results_dir()
    if measure.startswith("metric:"):
        raise ConfigError(f"perquery: {measure!r} is an efficiency figure; per-query values exist for evaluation "
                          f"measures (ir_measures strings such as nDCG@10 or Success@20)",
                          fix=f"read the metrics file's 'predictions' ({root}/<profile>/metrics/{dataset}/<job>/{system}.json)")
    roots = _profile_roots(root)
    if profile is None:
        if len(roots) != 1:
            raise ConfigError(f"perquery: {len(roots)} profiles under {root} ({', '.join(roots) or 'none'})",
                              fix="name one: perquery(..., profile='smoke')" if roots else RENDER_FIX)
        profile = next(iter(roots))
    if profile not in roots:
        raise DataError(f"profile {profile!r} has no results under {root / profile} (no eval/ or tables/)",
                        fix=f"run it: snakemake --cores all reproduce_all --configfile configs/profiles/{profile}.yaml"
                            + (f"; profiles here: {', '.join(roots)}" if roots else ""))
    proot = roots[profile]
    evals: list[Path] = []
    records = read_records(root).get(profile, {})
    if records:
        # a record names its source as the table rule saw it (results/<profile>/eval/<dataset>/<job>/<system>.json,
        # relative to where the DAG ran): the same file under this results folder
        srcs = [Path(c["source"]) for c in rows(cells_frame({profile: records}))
                if c["system"] == system and c["dataset"] == dataset and c["source"]]
        evals = sorted({proot / "eval" / f.parent.parent.name / f.parent.name / f.name for f in srcs
                        if f.suffix == ".json" and f.parent.parent.parent.name == "eval"})
    if not evals:
        evals = sorted(f for f in (proot / "eval" / dataset).glob(f"*/{system}.json") if "@" not in f.parent.name)
    if not evals:
        raise DataError(f"no evaluation of system {system!r} on {dataset!r} in profile {profile!r} "
                        f"(no {proot}/eval/{dataset}/<job>/{system}.json)",
                        fix=f"check the names (python -m harness plan --config ... lists the search jobs and their "
                            f"systems), then: snakemake --cores all {proot}/eval/{dataset}/<job>")
    if len(evals) > 1:
        raise DataError(f"system {system!r} on {dataset!r} is evaluated by {len(evals)} jobs in profile {profile!r}: "
                        + ", ".join(str(e) for e in evals), fix="read the one you mean with harness.evaluate.run.read_per_query")
    path = evals[0].with_name(evals[0].stem + PER_QUERY_SUFFIX)
    if not path.is_file():
        raise DataError(f"{path} is missing: the per-query values of {system} on {dataset} (profile {profile})",
                        fix=f"re-run the evaluate rule that writes {path.parent}: snakemake --cores all {path.parent} "
                            f"--forcerun evaluate (evaluations older than the per-query files lack it)")
    values = read_per_query(path)
    pairs = [(q, v[measure]) for q, v in values.items() if measure in v]
    if not pairs:
        known = sorted({m for v in values.values() for m in v})
        raise DataError(f"{path} has no measure {measure!r}; it has: {', '.join(known) or 'nothing'}",
                        fix="name one of those (ir_measures' spelling, e.g. nDCG@10, RR@10, Success@20)")
    return pd.DataFrame({"query_id": pd.Series([q for q, _ in pairs], dtype="str"),
                         "value": pd.Series([v for _, v in pairs], dtype="float64")})


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------
def _md_value(v: Any) -> str:
    if _missing(v):
        return ""
    if isinstance(v, float):
        return f"{v:.4f}".rstrip("0").rstrip(".") if v == v else ""
    return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(frame: pd.DataFrame) -> str:
    """A frame as one markdown (pipe) table, floats to four decimals."""
    cols = list(frame.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_md_value(r[c]) for c in cols) + " |" for r in frame.to_dict("records")]
    return "\n".join(out) + "\n"


def export(frame: pd.DataFrame, fmt: str, output: Path | None) -> None:
    """Write ``frame`` as csv, parquet or markdown to ``output`` (csv and md: stdout when None)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}", fix=f"--format {'|'.join(FORMATS)}")
    if fmt == "parquet":
        if output is None:
            raise ConfigError("--format parquet writes a binary file", fix="add --output FILE.parquet")
        output.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(output, index=False)
        return
    text = frame.to_csv(index=False, lineterminator="\n") if fmt == "csv" else to_markdown(frame)
    if output is None:
        sys.stdout.write(text)
    else:
        from harness.io import atomic_write_text

        atomic_write_text(output, text)


def main(argv: Iterable[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness results", description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", choices=FORMATS, default="csv")
    ap.add_argument("--profile", help="one profile (default every rendered profile)")
    ap.add_argument("--paper", help="one paper (svdr, bpr, densephrases, qcr, lightretriever)")
    ap.add_argument("--table", help="one table of the paper (e.g. 1)")
    ap.add_argument("--claims", action="store_true", help="the claims and their verdicts instead of the table cells")
    ap.add_argument("--output", type=Path, help="file to write (default stdout; required for parquet)")
    ap.add_argument("--results-dir", type=Path, default=None, help="results folder (default the project's results/)")
    args = ap.parse_args(list(argv))
    if args.claims:
        if args.table:
            raise ConfigError("--table selects table cells, not claims", fix="drop --table or --claims")
        frame = claims(args.profile, args.paper, args.results_dir)
    else:
        frame = load(args.profile, args.paper, args.results_dir, table=args.table)
    export(frame, args.format, args.output)
    if args.output is not None:
        print(f"wrote {args.output} ({len(frame)} rows)", file=sys.stderr)
    return 0
