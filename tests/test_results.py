"""harness.results: the rendered tables, claims and per-query values as pandas DataFrames, the
`results` command, and the cross-check that the site's table cells and the CSV tables are the frame's."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import results
from harness.config import load_config, results_root
from harness.errors import ConfigError, DataError
from harness.evaluate.run import write_per_query
from harness.io import write_json
from harness.measured import locate
from harness.report import site as hsite
from harness.tables import render
from test_report import fake_results, parse  # the report tests' measured values and page parser

DPR = {"Success@1": 0.5, "Success@5": 0.625, "Success@20": 0.875, "Success@100": 0.9375}
BM25 = {"Success@1": 0.25, "Success@5": 0.5, "Success@20": 0.75, "Success@100": 0.8125}


def _eval(cfg, system, measures, seed="x"):
    """The eval file where the plan says the system's search job writes it, and its job's meta.json."""
    path = locate(cfg, system, "smoke", "Success@1")[0][0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measures": measures}))
    R = results_root(cfg)
    meta = R / "runs" / path.parent.relative_to(R / "eval") / "meta.json"
    write_json(meta, {"job": path.parent.name, "config_hash": f"hash-{system}", "git_commit": f"commit-{seed}",
                      "hardware": {"cpu": "Test CPU", "cpus": 2}, "created": "now", "seconds": 1.0})
    return path


@pytest.fixture
def tree(tmp_path):
    """A smoke results tree in tmp_path: SVDR Table 1 with hand-set DPR and BM25 values, BPR Table 1
    with generated ones, both rendered by the table rule's renderer; a claims CSV."""
    cfg = load_config(overrides={"results_dir": str(tmp_path)})
    assert fake_results(cfg, "bpr", "1", 2) > 3
    _eval(cfg, "dpr", DPR)
    _eval(cfg, "bm25", BM25)
    render.render(cfg, "svdr", "1")
    render.render(cfg, "bpr", "1")
    (tmp_path / "claims").mkdir()
    from harness.claims import COLUMNS

    with open(tmp_path / "claims" / "smoke.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, restval="")
        w.writeheader()
        w.writerow({"claim_id": "dpr-beats-bm25-top20", "paper": "svdr", "holds": "true",
                    "measured": "smoke/dpr/Success@20=0.875 > smoke/bm25/Success@20=0.75", "detail": "ok",
                    "verdict": "holds", "test": "paired", "n": "63", "diff": "0.125", "ci_low": "0.03",
                    "ci_high": "0.22", "p": "0.004", "p_holm": "0.008", "mdd": "0.05"})
        w.writerow({"claim_id": "bpr-top20-within-2-points-of-dpr", "paper": "bpr", "holds": "not run", "measured": "",
                    "detail": "no value", "verdict": "not run"})
    return cfg


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_load_has_every_cell_of_the_rendered_csv(tree, tmp_path):
    df = results.load(results_dir=tmp_path)
    assert tuple(df.columns) == results.COLUMNS
    for paper in ("svdr", "bpr"):
        rows = _csv_rows(tmp_path / "tables" / paper / "1.csv")
        part = df[(df["paper"] == paper) & (df["table"] == "1")]
        assert len(part) == len(rows) > 10
        by_cell = {(r["row"], r["column"]): r for r in part.to_dict("records")}
        for r in rows:
            cell = by_cell[(r["row"], r["column"])]
            assert cell["profile"] == "smoke" and cell["status"] == r["status"]
            assert (cell["system"] if isinstance(cell["system"], str) else "") == r["system"]
            if r["measured"]:
                assert cell["measured"] == pytest.approx(float(r["measured"]), abs=5e-5)
            else:
                assert pd.isna(cell["measured"])
            if r["published"]:
                assert cell["published"] == pytest.approx(float(r["published"]))
    assert set(df["paper"]) == {"svdr", "bpr"} and len(df) == sum(
        len(_csv_rows(tmp_path / "tables" / p / "1.csv")) for p in ("svdr", "bpr"))


def test_a_cell_checked_by_hand(tree, tmp_path):
    df = results.load(profile="smoke", paper="svdr", results_dir=tmp_path)
    one = df[(df["row"] == "DPR") & (df["column"] == "NQ top20")]
    assert len(one) == 1
    c = one.iloc[0]
    assert (c["system"], c["dataset"], c["measure"]) == ("dpr", "smoke", "Success@20")
    assert c["measured"] == pytest.approx(87.5) and c["published"] == pytest.approx(80.2)
    assert c["status"] == "stand-in" and c["kind"] == "measured"          # smoke is not NQ
    assert c["config_hash"] == "hash-dpr" and c["commit"] == "commit-x"   # the producing job's meta.json
    assert c["source"].endswith("/eval/smoke/dpr/dpr.json") and pd.isna(c["device"])
    bm25 = df[(df["row"] == "BM25") & (df["column"] == "NQ top1")].iloc[0]
    assert bm25["measured"] == pytest.approx(25.0) and bm25["published"] == pytest.approx(22.7)
    not_run = df[(df["row"] == "DPR") & (df["column"] == "TQA top1")].iloc[0]
    assert not_run["status"] == "not run" and not_run["kind"] == "not run" and pd.isna(not_run["measured"])
    assert pd.isna(not_run["source"]) and pd.isna(not_run["config_hash"])
    assert df["measured"].dtype == "float64" and df["published"].dtype == "float64"


def test_filters_and_a_second_profile(tree, tmp_path):
    rec = json.loads((tmp_path / "smoke" / "tables" / "svdr" / "1.json").read_text())
    rec["profile"] = "small"
    for c in rec["cells"]:
        if c["measured"] is not None:
            c["measured"] = 77.7
    other = tmp_path / "small" / "tables" / "svdr" / "1.json"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps(rec))
    everything = results.load(results_dir=tmp_path)
    assert set(everything["profile"]) == {"smoke", "small"}
    small = results.load(profile="small", results_dir=tmp_path)
    assert set(small["paper"]) == {"svdr"} and len(small) == len(rec["cells"])
    assert set(small["measured"].dropna()) == {77.7}
    bpr = results.load(paper="bpr", results_dir=tmp_path)
    assert set(bpr["profile"]) == {"smoke"} and set(bpr["paper"]) == {"bpr"}
    assert len(results.load(paper="svdr", table="1", results_dir=tmp_path)) == 2 * len(rec["cells"])
    with pytest.raises(ConfigError, match="unknown paper 'nope'"):
        results.load(paper="nope", results_dir=tmp_path)
    with pytest.raises(DataError, match=r"profile 'paper' has no rendered table under .*/paper/tables; rendered profiles: small, smoke"):
        results.load(profile="paper", results_dir=tmp_path)
    with pytest.raises(DataError, match="no table of paper 'qcr' rendered"):
        results.load(paper="qcr", results_dir=tmp_path)
    with pytest.raises(DataError, match="no table '9' rendered"):
        results.load(paper="svdr", table="9", results_dir=tmp_path)


def test_nothing_rendered_says_where_and_how(tmp_path):
    with pytest.raises(DataError, match=rf"no rendered table under {tmp_path}.*fix: render the tables first"):
        results.load(results_dir=tmp_path)


def test_the_csv_and_markdown_tables_are_written_from_the_frame(tree, tmp_path):
    """One reading: the record read back through harness.results gives the CSV and markdown the rule wrote."""
    rec = json.loads((tmp_path / "smoke" / "tables" / "svdr" / "1.json").read_text())
    frame = results.record_frame(rec)
    assert render.csv_text(frame) == (tmp_path / "tables" / "svdr" / "1.csv").read_text(encoding="utf-8")
    md = (tmp_path / "tables" / "svdr" / "1.md").read_text(encoding="utf-8")
    assert md.startswith(render.markdown_text(rec, frame))
    assert "| DPR | ✓ | **50.0** / 46.0 (+4.0) stand-in | **62.5** / 68.9 (-6.4) stand-in | **87.5** / 80.2" in md


def test_site_cells_equal_the_frame(tree, tmp_path):
    """Every cell of the site's table pages is the frame's: status, measured value, published value."""
    rec = json.loads((tmp_path / "smoke" / "tables" / "svdr" / "1.json").read_text())
    rec["profile"] = "small"
    for c in rec["cells"]:
        if c["measured"] is not None:
            c["measured"] = c["measured"] / 2
    (tmp_path / "small" / "tables" / "svdr").mkdir(parents=True)
    (tmp_path / "small" / "tables" / "svdr" / "1.json").write_text(json.dumps(rec))
    hsite.build(tree)
    df = results.load(results_dir=tmp_path)
    units = {(p, paper, table, c["row"], c["column"]): c["unit"]
             for p, recs in results.read_records(tmp_path).items() for (paper, table), r in recs.items() for c in r["cells"]}
    checked = 0
    for (paper, table), part in df.groupby(["paper", "table"]):
        cells = parse(tmp_path / "site" / paper / f"table-{hsite.slug(table)}.html").cells
        assert set(cells) == set(zip(part["row"], part["column"]))
        for r in part.to_dict("records"):
            if r["status"] in ("text", "published only"):
                continue
            cell, p = cells[(r["row"], r["column"])], r["profile"]
            assert cell[f"status:{p}"] == r["status"]
            unit = units[(p, paper, table, r["row"], r["column"])]
            want = "—" if pd.isna(r["measured"]) else hsite.fmt(r["measured"], unit)
            assert cell[p] == want, (paper, table, r["row"], r["column"], p)
            pub = cell["published"].split()[0]
            assert pub == "—" if pd.isna(r["published"]) else float(pub) == pytest.approx(r["published"])
            checked += 1
    assert checked > 40
    # by hand: DPR's NQ top-20 on both profiles
    cells = parse(tmp_path / "site" / "svdr" / "table-1.html").cells
    assert cells[("DPR", "NQ top20")]["smoke"] == "87.5" and cells[("DPR", "NQ top20")]["small"] == "43.8"
    assert cells[("DPR", "NQ top20")]["published"] == "80.2"


def test_claims_frame(tree, tmp_path):
    df = results.claims(results_dir=tmp_path)
    assert list(df.columns[:4]) == ["profile", "claim_id", "paper", "statement"]
    assert {"holds", "verdict", "diff", "ci_low", "ci_high", "p_holm", "n"} <= set(df.columns)
    row = df[df["claim_id"] == "dpr-beats-bm25-top20"].iloc[0]
    assert row["profile"] == "smoke" and row["verdict"] == "holds" and row["n"] == 63
    assert row["diff"] == pytest.approx(0.125) and row["p_holm"] == pytest.approx(0.008)
    assert row["statement"].startswith("DPR retrieves an answer-bearing passage in the top 20")
    assert pd.isna(df[df["claim_id"] == "bpr-top20-within-2-points-of-dpr"].iloc[0]["diff"])
    assert list(results.claims(paper="bpr", results_dir=tmp_path)["claim_id"]) == ["bpr-top20-within-2-points-of-dpr"]
    with pytest.raises(DataError, match=r"no claims checked under .*claims for profile 'small'.*checked: smoke"):
        results.claims(profile="small", results_dir=tmp_path)


def test_perquery_reads_the_evaluate_rules_file(tree, tmp_path, monkeypatch):
    ev = locate(tree, "dpr", "smoke", "Success@1")[0][0]
    write_per_query(ev.with_name("dpr.perquery.tsv.gz"), {"q2": {"Success@20": 0.0, "nDCG@10": 0.25},
                                                           "q1": {"Success@20": 1.0, "nDCG@10": 0.5}})
    # a learning-check twin evaluates a system of the same name: not the one the tables read
    twin = ev.parent.parent / "dpr@init"
    twin.mkdir()
    (twin / "dpr.json").write_text(json.dumps({"measures": {"Success@20": 0.1}}))
    write_per_query(twin / "dpr.perquery.tsv.gz", {"q1": {"Success@20": 0.0}})
    df = results.perquery("dpr", "smoke", "Success@20", results_dir=tmp_path)
    assert list(df.columns) == ["query_id", "value"]
    assert list(df["query_id"]) == ["q1", "q2"] and list(df["value"]) == [1.0, 0.0]
    # a tree rendered elsewhere: its records name sources relative to where the DAG ran (results/...)
    copy = tmp_path / "elsewhere" / "results"
    shutil.copytree(tmp_path / "smoke", copy / "smoke")
    rec_path = copy / "smoke" / "tables" / "svdr" / "1.json"
    rec = json.loads(rec_path.read_text())
    for c in rec["cells"]:
        if "provenance" in c:
            c["provenance"]["source"] = "results/" + str(Path(c["provenance"]["source"]).relative_to(tmp_path))
    rec_path.write_text(json.dumps(rec))
    monkeypatch.chdir(tmp_path)   # where results/smoke/... does not exist
    assert list(results.perquery("dpr", "smoke", "Success@20", results_dir=copy)["value"]) == [1.0, 0.0]
    assert results.perquery("dpr", "smoke", "nDCG@10", profile="smoke", results_dir=tmp_path)["value"].mean() \
        == pytest.approx(0.375)
    with pytest.raises(DataError, match=r"bm25\.perquery\.tsv\.gz is missing.*--forcerun evaluate"):
        results.perquery("bm25", "smoke", "Success@20", results_dir=tmp_path)
    with pytest.raises(DataError, match="has no measure 'RR@10'; it has: Success@20, nDCG@10"):
        results.perquery("dpr", "smoke", "RR@10", results_dir=tmp_path)
    with pytest.raises(DataError, match="no evaluation of system 'nosuch'"):
        results.perquery("nosuch", "smoke", "Success@20", results_dir=tmp_path)
    # a system no table shows: the one search job that evaluated it, never its twin
    own = ev.parent.parent / "solo"
    own.mkdir()
    (own / "solo.json").write_text("{}")
    write_per_query(own / "solo.perquery.tsv.gz", {"a": {"RR@10": 0.5}})
    (ev.parent.parent / "solo@init").mkdir()
    (ev.parent.parent / "solo@init" / "solo.json").write_text("{}")
    assert results.perquery("solo", "smoke", "RR@10", results_dir=tmp_path).to_dict("list") == {
        "query_id": ["a"], "value": [0.5]}


def test_results_command_three_formats(tree, tmp_path, capsys):
    from harness.cli import main

    want = results.load(paper="svdr", results_dir=tmp_path)
    assert main(["results", "--results-dir", str(tmp_path), "--paper", "svdr", "--format", "csv"]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(got.columns) == list(results.COLUMNS) and len(got) == len(want)
    assert got["measured"].fillna(-1).tolist() == pytest.approx(want["measured"].fillna(-1).tolist())
    assert got["status"].tolist() == want["status"].tolist()

    out = tmp_path / "out" / "cells.parquet"
    assert main(["results", "--results-dir", str(tmp_path), "--format", "parquet", "--output", str(out)]) == 0
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(back, results.load(results_dir=tmp_path), check_dtype=False)

    assert main(["results", "--results-dir", str(tmp_path), "--paper", "svdr", "--table", "1", "--format", "md"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| " + " | ".join(results.COLUMNS) + " |" and len(lines) == len(want) + 2
    dpr = next(x for x in lines if "| DPR | NQ top20 |" in x)
    assert "| dpr | smoke | Success@20 | 87.5 | 80.2 | stand-in | measured |" in dpr

    assert main(["results", "--results-dir", str(tmp_path), "--claims", "--format", "csv"]) == 0
    claims = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert claims["claim_id"].tolist() == ["dpr-beats-bm25-top20", "bpr-top20-within-2-points-of-dpr"]

    assert main(["results", "--results-dir", str(tmp_path), "--format", "parquet"]) == 2
    assert "--format parquet writes a binary file" in capsys.readouterr().err
    assert main(["results", "--results-dir", str(tmp_path / "empty")]) == 2
    assert f"no rendered table under {tmp_path / 'empty'}" in capsys.readouterr().err
