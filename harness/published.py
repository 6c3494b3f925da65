"""The published numbers of the five papers: load, check and print configs/published/<paper>.yaml.

Each file holds one record per printed table cell (see workflow/schemas/published.schema.yaml).
`load_published` validates a file against the schema and checks what a schema cannot: every
record's (table, row, column) is declared in its table and appears once. The CLI
(`python -m harness published --paper P [--table T] --format csv|md|json`) prints them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

import yaml

from harness.errors import ConfigError
from harness.registry import Registry

PAPERS = ("svdr", "bpr", "densephrases", "qcr", "lightretriever")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO_ROOT / "configs" / "published"
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "published.schema.yaml"

CSV_FIELDS = ("paper", "table", "row", "column", "value", "unit", "measure", "note")

_PAPER_REGISTRY: Registry[str] = Registry("paper")
for _p in PAPERS:
    _PAPER_REGISTRY.add(_p, _p)


class PrintedFloat(float):
    """A float that remembers its literal in the YAML file, i.e. as the paper printed it (0.220, not 0.22)."""

    printed: str

    def __new__(cls, value: float, printed: str) -> Self:
        obj = super().__new__(cls, value)
        obj.printed = printed
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (PrintedFloat, (float(self), self.printed))


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml when built: ~10x faster
    """SafeLoader whose floats keep their printed literal."""


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    return PrintedFloat(loader.construct_yaml_float(node), str(node.value).lstrip("+"))


_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _schema() -> dict[str, Any]:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _record_where(path: Path, index: int, rec: Any) -> str:
    return f"{path}: records[{index}] {json.dumps(rec, ensure_ascii=False, default=str)}"


def load_published(paper: str, root: Path | None = None) -> dict[str, Any]:
    """Read and check configs/published/<paper>.yaml; return the parsed document.

    Raises ConfigError (naming the file and the offending record) when the file is missing, is not
    valid YAML, breaks the schema, or has a record whose table/row/column is undeclared or repeated.
    (Over 80 lines: one check after another, each with its own message.)
    """
    import jsonschema

    paper = _PAPER_REGISTRY.get(paper)
    base = Path(root) if root is not None else DEFAULT_ROOT
    path = base / f"{paper}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"published numbers for {paper!r} not found at {path}",
            fix=f"create {path} following {SCHEMA_PATH}",
        )
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.load(fh, Loader=_Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None

    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        loc = "/".join(str(p) for p in err.absolute_path) or "<top>"
        extra = ""
        if len(err.absolute_path) >= 2 and err.absolute_path[0] == "records":
            idx = err.absolute_path[1]
            extra = f" in record {json.dumps(doc['records'][idx], ensure_ascii=False, default=str)}"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(
            f"{path}: schema error at {loc}: {err.message}{extra}{more}", fix=f"see {SCHEMA_PATH}"
        )
    if doc["paper"] != paper:
        raise ConfigError(f"{path}: 'paper' is {doc['paper']!r}, expected {paper!r}")

    tables: dict[str, tuple[set[str], set[str]]] = {}
    for t in doc["tables"]:
        tid = t["id"]
        if tid in tables:
            raise ConfigError(f"{path}: table {tid!r} is declared twice")
        for kind in ("rows", "columns"):
            seen: set[str] = set()
            for label in t[kind]:
                if label in seen:
                    raise ConfigError(f"{path}: table {tid!r} declares {kind[:-1]} {label!r} twice")
                seen.add(label)
        for group, members in (t.get("row_groups") or {}).items():
            for label in members:
                if label not in t["rows"]:
                    raise ConfigError(
                        f"{path}: table {tid!r} row group {group!r} names undeclared row {label!r}"
                    )
        tables[tid] = (set(t["rows"]), set(t["columns"]))

    seen_cells: dict[tuple[str, str, str], int] = {}
    for i, rec in enumerate(doc["records"]):
        tid, row, col = rec["table"], rec["row"], rec["column"]
        if tid not in tables:
            raise ConfigError(
                f"{_record_where(path, i, rec)}: table {tid!r} is not declared under tables "
                f"(declared: {', '.join(tables)})"
            )
        rows, cols = tables[tid]
        if row not in rows:
            raise ConfigError(f"{_record_where(path, i, rec)}: row {row!r} is not declared in table {tid!r}")
        if col not in cols:
            raise ConfigError(
                f"{_record_where(path, i, rec)}: column {col!r} is not declared in table {tid!r}"
            )
        key = (tid, row, col)
        if key in seen_cells:
            raise ConfigError(
                f"{_record_where(path, i, rec)}: duplicate cell, same (table, row, column) as "
                f"records[{seen_cells[key]}]"
            )
        seen_cells[key] = i
        if rec["value"] is None and not rec.get("note"):
            raise ConfigError(
                f"{_record_where(path, i, rec)}: value is null but note does not say which mark"
            )
    return doc


def table_ids(doc: dict[str, Any]) -> list[str]:
    """Table ids of a loaded document, in the paper's order."""
    return [t["id"] for t in doc["tables"]]


def get_table(doc: dict[str, Any], table: str) -> dict[str, Any]:
    """One table declaration; an unknown id fails with the valid ids and close matches."""
    reg: Registry[dict[str, Any]] = Registry(f"{doc['paper']} table")
    for t in doc["tables"]:
        reg.add(t["id"], t)
    return reg.get(table)


def records_of(doc: dict[str, Any], table: str | None = None) -> list[dict[str, Any]]:
    """Records of one table (or all), in file order."""
    if table is None:
        return list(doc["records"])
    tid = get_table(doc, table)["id"]
    return [r for r in doc["records"] if r["table"] == tid]


def format_value(value: Any) -> str:
    """A number as printed in the paper (the YAML literal); '' for null."""
    if value is None:
        return ""
    if isinstance(value, PrintedFloat):
        return value.printed
    if isinstance(value, float) and ("e" in repr(value) or abs(value) >= 1e7):
        return f"{value:g}"
    return repr(value) if isinstance(value, float) else str(value)


def to_csv(paper: str, records: Iterable[dict[str, Any]]) -> str:
    """CSV with the columns paper,table,row,column,value,unit,measure,note."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in records:
        writer.writerow(
            [
                paper,
                r["table"],
                r["row"],
                r["column"],
                format_value(r["value"]),
                r["unit"],
                r.get("measure") or "",
                r.get("note") or "",
            ]
        )
    return buf.getvalue()


_MD_UNIT_SUFFIX = ("ms", "s", "m", "h", "GB", "MB")
_MARKS = ("-", "OOM", "/")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: dict[str, Any], table: str | None = None) -> str:
    """One pipe table per paper table, rows and columns in the paper's order.

    A cell shows the published value; a note is a numbered footnote [n] under the table. A null
    cell shows its mark (the text of a text cell, '-', 'OOM', '/') or '?' when unreadable.
    """
    tables = [get_table(doc, table)] if table is not None else doc["tables"]
    out: list[str] = []
    for t in tables:
        cells = {(r["row"], r["column"]): r for r in doc["records"] if r["table"] == t["id"]}
        notes: dict[str, int] = {}
        out.append(f"### {doc['paper']} table {t['id']}: {_md_escape(t['title'])}")
        out.append("")
        if t.get("caption"):
            out.append(_md_escape(t["caption"]))
            out.append("")
        group_of = {row: g for g, rows in (t.get("row_groups") or {}).items() for row in rows}
        out.append("| | " + " | ".join(_md_escape(c) for c in t["columns"]) + " |")
        out.append("|---|" + "---|" * len(t["columns"]))
        current_group = None
        for row in t["rows"]:
            group = group_of.get(row)
            if group is not None and group != current_group:
                out.append(f"| *{_md_escape(group)}* |" + " |" * len(t["columns"]))
            current_group = group
            line = [_md_escape(row)]
            for col in t["columns"]:
                rec = cells.get((row, col))
                if rec is None:
                    line.append("")
                    continue
                note = rec.get("note") or ""
                if rec["value"] is not None:
                    text = format_value(rec["value"])
                    if rec["unit"] in _MD_UNIT_SUFFIX:
                        text += rec["unit"]
                else:
                    # the mark (or a text cell's text) shows in the cell, the rest of the note as footnote
                    first, _, rest = note.partition("; ")
                    if first.startswith("text: "):
                        text, note = first[len("text: ") :], rest
                    elif first in _MARKS:
                        text, note = first, rest
                    else:
                        text = "?"
                if note:
                    n = notes.setdefault(note, len(notes) + 1)
                    text += f" [{n}]"
                line.append(_md_escape(text))
            out.append("| " + " | ".join(line) + " |")
        if notes:
            out.append("")
            out += [f"[{n}] {_md_escape(note)}  " for note, n in notes.items()]
        out.append("")
    return "\n".join(out)


def to_json(doc: dict[str, Any], table: str | None = None) -> str:
    """The document (or one table with its records) as JSON."""
    if table is None:
        payload = doc
    else:
        t = get_table(doc, table)
        payload = {k: doc[k] for k in ("paper", "title", "source")}
        payload["tables"] = [t]
        payload["records"] = records_of(doc, t["id"])
    return json.dumps(payload, ensure_ascii=False, indent=1)


def main(argv: list[str]) -> int:
    """`python -m harness published --paper P [--table T] --format csv|md|json [--root DIR]`."""
    parser = argparse.ArgumentParser(
        prog="python -m harness published", description="Print the published numbers of one paper."
    )
    parser.add_argument("--paper", required=True, help=f"one of: {', '.join(PAPERS)}")
    parser.add_argument("--table", default=None, help="a table id as the paper numbers it (default: all)")
    parser.add_argument("--format", default="md", choices=("csv", "md", "json"))
    parser.add_argument(
        "--root", type=Path, default=None, help="folder of <paper>.yaml (default: configs/published)"
    )
    args = parser.parse_args(argv)
    doc = load_published(args.paper, args.root)
    if args.table is not None:
        get_table(doc, args.table)  # fail early with the valid ids
    if args.format == "csv":
        text = to_csv(doc["paper"], records_of(doc, args.table))
    elif args.format == "json":
        text = to_json(doc, args.table) + "\n"
    else:
        text = to_markdown(doc, args.table)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
