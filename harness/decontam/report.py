"""Decontamination in the DAG: which query sets the profile checks, and the report tables.

Config key ``decontam`` (workflow/schemas/config.schema.yaml)::

    decontam:
      k: 2                              # Hamming distance threshold (tDRO / LightRetriever)
      train: [squad-open:train, wq-drqa] # training query sets: dataset key or key:split (default train)
      test: [squad-open:test, beir-fiqa] # test query sets: dataset key or key:split (default test)

`plan` resolves these to the prepared files ``<results>/<profile>/data/<key>/queries-<split>.jsonl``;
:func:`decontam_job` is the plan's job (its inputs the datasets' folders), which rule ``decontam``
(workflow/rules/decontam.smk) runs as ``python -m harness decontam --config ...`` (harness.stages.decontam), and rule ``decontam_report`` runs ``python -m harness decontam-report``, which
writes LightRetriever's Table 6 (original size, deduplicated size, duplicates) and Table 7
(sample pairs) for this profile's training sets, beside the published Table 6:
``<results_dir>/tables/lightretriever/6-measured.md|csv`` and ``7-measured.md|csv``.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.datasets import store
from harness.errors import ConfigError, DataError
from harness.io import atomic_write_text, read_json
from harness.job import Job, Ref
from harness.settings import results_root

DEFAULT_K = 2
DEFAULT_TABLE7 = 5
PAPER, TABLE = "lightretriever", "6"


@dataclass(frozen=True)
class QuerySet:
    """One query set of the decontamination: a split of a prepared dataset."""

    key: str
    split: str

    @property
    def name(self) -> str:
        return f"{self.key}.{self.split}"

    def path(self, cfg: Mapping[str, Any]) -> Path:
        return results_root(cfg) / "data" / self.key / store.queries_file(self.split)


def parse(spec: str, default_split: str, where: str, datasets: Mapping[str, Any]) -> QuerySet:
    key, _, split = spec.partition(":")
    if key not in datasets:
        raise ConfigError(f"config key {where}: unknown dataset {key!r}; defined datasets: {', '.join(datasets)}")
    return QuerySet(key, split or default_split)


def plan(cfg: Mapping[str, Any]) -> tuple[list[QuerySet], list[QuerySet]]:
    """(training sets, test sets) of config key ``decontam``; empty lists when it is absent."""
    dc = cfg.get("decontam")
    if not dc:
        return [], []
    train = [parse(s, "train", f"decontam.train[{i}]", cfg["datasets"]) for i, s in enumerate(dc["train"])]
    test = [parse(s, "test", f"decontam.test[{i}]", cfg["datasets"]) for i, s in enumerate(dc["test"])]
    for label, sets in (("train", train), ("test", test)):
        names = [s.name for s in sets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"config key decontam.{label} lists {', '.join(dup)} twice")
    both = sorted({s.name for s in train} & {s.name for s in test})
    if both:
        raise ConfigError(f"config key decontam: {', '.join(both)} is both a training and a test set")
    return train, test


def decontam_job(cfg: Mapping[str, Any]) -> Job:
    """The plan's decontamination job: it reads config key ``decontam`` and the prepared folders of
    its query sets' datasets (their hashes cover ``datasets.<key>``)."""
    train, test = plan(cfg)
    return Job("decontam", "decontam", "decontam", "run", None,
               inputs={f"data_{k}": Ref("data", dataset=k) for k in sorted({s.key for s in train + test})},
               keys=("decontam",), module="harness.decontam.stage")


# ------------------------------------------------------------------------------------------ report


def canonical_id(cfg: Mapping[str, Any], key: str, split: str) -> str:
    """The canonical id of a split of a dataset of the profile (registry id where the config maps it)."""
    dcfg = cfg["datasets"].get(key, {})
    if dcfg.get("splits") and split in dcfg["splits"]:
        from harness.datasets import catalog

        try:
            return catalog.split_entry(catalog.dataset_config_card(key, dcfg), dcfg["splits"][split])["id"]
        except ConfigError:
            pass
    base = dcfg.get("id", key)
    return base if split == "test" else f"{base} ({split})"


def report_files(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The report's files (Table 6 and 7, markdown and CSV) under ``<results_dir>/tables/<paper>/``,
    by output name, so that the workflow's rule names no paper."""
    folder = Path(cfg["results_dir"]) / "tables" / PAPER
    return {f"{fmt}{t}": str(folder / f"{t}-measured.{ext}") for t in ("6", "7")
            for fmt, ext in (("md", "md"), ("csv", "csv"))}


def published_file() -> str:
    """The published-numbers file the report reads (an input of its rule)."""
    return f"configs/published/{PAPER}.yaml"


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; run rule decontam first") from None


def _published_rows() -> list[tuple[str, dict[str, Any]]]:
    from harness.published import load_published

    doc = load_published(PAPER)
    table = next(t for t in doc["tables"] if t["id"] == TABLE)
    cells = {(r["row"], r["column"]): r["value"] for r in doc["records"] if r["table"] == TABLE}
    return [(row, {c: cells.get((row, c)) for c in table["columns"]}) for row in table["rows"]]


def duplicates_by_test_set(path: Path) -> dict[tuple[str, str], int]:
    """(training set, test set) -> number of dropped training queries with a match in that test set."""
    import json

    counts: dict[tuple[str, str], int] = {}
    if not path.exists():
        return counts
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            for test_set in sorted({m["test_set"] for m in rec["duplicates"]}):
                counts[(rec["train_set"], test_set)] = counts.get((rec["train_set"], test_set), 0) + 1
    return dict(sorted(counts.items()))


def _pct(dup: int, orig: int) -> str:
    return f"{100.0 * dup / orig:.2f}%" if orig else "—"


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(cfg: Mapping[str, Any], decontam_dir: Path, out_md: Path) -> list[Path]:
    """Write Table 6 (measured beside published) and Table 7 (sample pairs) for this profile (over
    80 lines: the two tables' markdown and CSV, written in the order they appear)."""
    decontam_dir = Path(decontam_dir)
    meta = read_json(decontam_dir / "meta.json")
    t6 = _read_csv(decontam_dir / "table6.csv")
    t7 = _read_csv(decontam_dir / "table7.csv")
    published = _published_rows()
    k = meta["k"]
    tests = meta["test"]
    n_test = sum(v["indexed"] for v in tests.values())

    caption = [
        "**LIGHTRETRIEVER Table 6, measured on this profile's training sets: training set decontamination**",
        "",
        f"Profile `{cfg['profile']}` ({cfg.get('description', '')}).",
        ("Method as LightRetriever / tDRO: 64-bit SimHash of each query (PyPI `simhash` defaults, tDRO's query "
        f"formatting), a training query is a duplicate when some test query lies within Hamming distance k = {k}; "
        "duplicates are dropped from the training set."),
        (f"Our training sets are not LightRetriever's 23 sets, and our test side is this profile's {len(tests)} test "
        f"query sets ({n_test:,} indexed queries), not BEIR + CMTEB-R: the measured table is our own, shown next to "
        "the published one; its rows cannot be compared one to one."),
    ]
    lines = caption + ["", "Measured:", "",
                       "| training set | canonical id | Original Size | Deduped Size | Duplicates | share |",
                       "|---|---|---|---|---|---|"]
    csv_rows = []
    tot_o = tot_d = 0
    for r in t6:
        key, _, split = r["dataset"].partition(".")
        orig, dedup, dup = int(r["original"]), int(r["deduped"]), int(r["duplicates"])
        tot_o += orig
        tot_d += dup
        cid = canonical_id(cfg, key, split)
        lines.append(f"| {r['dataset']} | `{cid}` | {orig:,} | {dedup:,} | {dup:,} | {_pct(dup, orig)} |")
        csv_rows.append({"source": "measured", "dataset": r["dataset"], "id": cid, "original": orig, "deduped": dedup,
                         "duplicates": dup})
    lines.append(f"| **total** | | {tot_o:,} | {tot_o - tot_d:,} | {tot_d:,} | {_pct(tot_d, tot_o)} |")
    by_test = duplicates_by_test_set(decontam_dir / "duplicates.jsonl")
    if by_test:
        lines += ["", "Dropped training queries by the test set they match (a query can match several sets):", "",
                  "| training set | test set | training queries |", "|---|---|---|"]
        lines += [f"| {tr} | {te} | {n:,} |" for (tr, te), n in by_test.items()]
    lines += ["", "Test query sets (indexed / records):", ""]
    lines += [f"- {name}: {v['indexed']:,} / {v['records']:,}" for name, v in tests.items()]
    lines += ["", "Published (LightRetriever Table 6: its 23 training sets against BEIR and CMTEB-R test queries):", "",
              "| Dataset | Original Size | Deduped Size | Duplicates | share |", "|---|---|---|---|---|"]
    for row, vals in published:
        o, d, x = vals.get("Original Size"), vals.get("Deduped Size"), vals.get("Duplicates")
        fmt = [f"{int(v):,}" if v is not None else "—" for v in (o, d, x)]
        lines.append(f"| {row} | {' | '.join(fmt)} | {_pct(int(x), int(o)) if o and x is not None else '—'} |")
        csv_rows.append({"source": "published", "dataset": row, "id": "", "original": o, "deduped": d, "duplicates": x})
    lines += ["", (f"Artifacts: `{decontam_dir}` (deduplicated training sets in train/, every dropped query with its "
              "matches in duplicates.jsonl, meta.json).")]

    out_md = Path(out_md)
    out6_csv = out_md.with_suffix(".csv")
    out7_md = out_md.parent / "7-measured.md"
    out7_csv = out7_md.with_suffix(".csv")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["source", "dataset", "id", "original", "deduped", "duplicates"], lineterminator="\n")
    w.writeheader()
    w.writerows(csv_rows)
    atomic_write_text(out6_csv, buf.getvalue())
    atomic_write_text(out_md, "\n".join(lines) + "\n")

    per_set = meta.get("table7", {}).get("selection", "")
    l7 = ["**LIGHTRETRIEVER Table 7, measured: samples of duplicate queries found in both the train and test sets**", "",
          (f"Profile `{cfg['profile']}`; {per_set}; k = {k}. The paper's Table 7 lists four such pairs from its own "
          "sets (e.g. Quora / Yahoo Answers / MS MARCO / ELI5 queries matching BEIR test queries)."), "",
          "| Train Set | Train qid | Train Query | Test Set | Test qid | Test Query |", "|---|---|---|---|---|---|"]
    for r in t7:
        l7.append("| " + " | ".join(_md_escape(r[c]) for c in ("train_set", "train_id", "train_query", "test_set",
                                                                  "test_id", "test_query")) + " |")
    if not t7:
        l7.append("| (no duplicates found) | | | | | |")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["train_set", "train_id", "train_query", "test_set", "test_id", "test_query"])
    w.writerows([[r[c] for c in ("train_set", "train_id", "train_query", "test_set", "test_id", "test_query")] for r in t7])
    atomic_write_text(out7_csv, buf.getvalue())
    atomic_write_text(out7_md, "\n".join(l7) + "\n")
    return [out_md, out6_csv, out7_md, out7_csv]
