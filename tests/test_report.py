"""The report site (harness/report): table pages against their CSV, profiles side by side, figures,
provenance, links; the table rule's record; which tables a job serves."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from harness.config import load_config, results_root
from harness.errors import ConfigError, DataError
from harness.io import write_json
from harness.report import figures as hfig
from harness.report import site as hsite
from harness.tables.matrix import resolve_table
from harness.tables.render import render
from harness.units import UNITS


def fake_results(cfg: dict, paper: str, table: str, seed: int) -> int:
    """Write a measured value for every cell this profile measures (eval or metrics file, and the
    producing job's meta.json), as the stages would; returns how many cells."""
    rng = np.random.default_rng(seed)
    _, cells = resolve_table(cfg, paper, table)
    n = 0
    R = results_root(cfg)
    for c in cells:
        if c.kind != "measured":
            continue
        path = Path(c.sources[0])
        doc = json.loads(path.read_text()) if path.exists() else {}
        if c.measure.startswith("metric:"):
            dim = UNITS.get(c.unit, ("none", 1.0))[0]
            base = {"time": "s", "bytes": "B", "fraction": "ratio"}.get(dim, c.unit if c.unit in UNITS else "count")
            doc.setdefault("values", {})[c.measure.removeprefix("metric:")] = {
                "value": float(rng.uniform(0.1, 1.0)), "unit": base, "kind": "measured", "device": "cpu"}
            meta_dir = path.parent
        else:
            doc.setdefault("measures", {})[c.measure] = float(rng.uniform(0.05, 0.95))
            meta_dir = R / "runs" / path.parent.relative_to(R / "eval")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, doc)
        meta_dir.mkdir(parents=True, exist_ok=True)
        write_json(meta_dir / "meta.json", {"job": meta_dir.name, "config_hash": f"hash-{seed}", "git_commit": "abc123",
                                            "hardware": {"cpu": "Test CPU", "cpus": 2}, "created": "now", "seconds": 1.0})
        n += 1
    return n


class Cells(HTMLParser):
    """(row, column) -> {profile: measured text, 'published': text, 'status:<profile>': status} of a table page."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str], dict[str, str]] = {}
        self.links: list[str] = []
        self._cell = None
        self._profile = None
        self._span = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("a", "link") and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.links.append(a["src"])
        if tag == "td" and "data-row" in a:
            self._cell = self.cells.setdefault((a["data-row"], a["data-column"]), {})
        elif tag == "div" and self._cell is not None and "data-profile" in a:
            self._profile = a["data-profile"]
        elif tag == "span" and self._cell is not None:
            cls = (a.get("class") or "").split()
            self._span = "measured" if "measured" in cls else "published" if "published" in cls else (
                "status" if "status" in cls else None)

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = self._profile = None
        if tag == "span":
            self._span = None

    def handle_data(self, data):
        if self._cell is None or self._span is None:
            return
        if self._span == "published":
            self._cell["published"] = self._cell.get("published", "") + data
        elif self._profile and self._span == "measured":
            self._cell[self._profile] = self._cell.get(self._profile, "") + data
        elif self._profile and self._span == "status":
            self._cell[f"status:{self._profile}"] = data


def parse(path: Path) -> Cells:
    p = Cells()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture
def profile(tmp_path):
    """The smoke config writing into tmp_path, with measured values for SVDR Table 1 and BPR Table 1."""
    cfg = load_config(overrides={"results_dir": str(tmp_path)})
    assert fake_results(cfg, "svdr", "1", 1) > 10
    assert fake_results(cfg, "bpr", "1", 2) > 3
    for table in ("1", "3", "fig3-ablation"):
        render(cfg, "svdr", table)
    render(cfg, "bpr", "1")
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "smoke.csv").write_text(
        "claim_id,paper,holds,measured,detail\ndpr-beats-bm25-top20,svdr,true,0.5 > 0.4,ok\n", encoding="utf-8")
    return cfg


def test_table_page_matches_its_csv(profile, tmp_path):
    """Every cell of the CSV is on the page, in its (row, column), with its value and status; nothing else."""
    index = hsite.build(profile)
    page = tmp_path / "site" / "svdr" / "table-1.html"
    cells = parse(page).cells
    with open(tmp_path / "tables" / "svdr" / "1.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(cells) == len(rows)
    measured = 0
    for r in rows:
        cell = cells[(r["row"], r["column"])]
        if r["status"] == "text":
            continue
        assert cell["published"].strip() == (r["published"] or "—") + (f" {r['unit']}" if r["unit"] in hsite.SHOW_UNIT and r["published"] else "")
        assert cell["status:smoke"] == r["status"]
        if r["measured"]:
            measured += 1
            assert float(cell["smoke"].split()[0]) == pytest.approx(float(r["measured"]), abs=0.051)
        else:
            assert cell["smoke"] == "—"
    assert measured > 10
    assert index.name == "index.html" and index.exists()


def test_profiles_side_by_side(profile, tmp_path):
    """A second profile's record of the same table shows in the same cells, after the reported one."""
    rec_path = tmp_path / "smoke" / "tables" / "svdr" / "1.json"
    rec = json.loads(rec_path.read_text())
    rec["profile"] = "small"
    for c in rec["cells"]:
        if c["measured"] is not None:
            c["measured"] = 77.7
    other = tmp_path / "small" / "tables" / "svdr" / "1.json"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps(rec))
    hsite.build(profile)
    cells = parse(tmp_path / "site" / "svdr" / "table-1.html").cells
    both = [c for c in cells.values() if "small" in c and c["small"] != "—"]
    assert both and all(c["small"].startswith("77.7") and c["smoke"] != c["small"] for c in both)
    text = (tmp_path / "site" / "svdr" / "table-1.html").read_text()
    assert text.index("data-profile='smoke'") < text.index("data-profile='small'")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "<th>cells (small)</th>" in index


def test_provenance_and_links(profile, tmp_path):
    hsite.build(profile)
    root = tmp_path / "site"
    text = (root / "svdr" / "table-1.html").read_text()
    assert "hash-1" in text and "abc123" in text and "Test CPU" in text   # from the producing job's meta.json
    assert "title='profile smoke · system " in text                     # hover
    pages = sorted(root.rglob("*.html"))
    assert len(pages) >= 5
    for page in pages:
        for link in parse(page).links:
            if link.startswith(("http:", "https:", "#")):
                continue
            target = (page.parent / link.split("#")[0]).resolve()
            assert target.exists(), f"{page}: broken link {link}"
            anchor = link.partition("#")[2]
            if anchor:
                assert f"id='{anchor}'" in target.read_text(), f"{page}: no anchor {anchor} in {target}"


def test_not_run_reasons_listed(profile, tmp_path):
    hsite.build(profile)
    text = (tmp_path / "site" / "svdr" / "table-3.html").read_text()
    rec = json.loads((tmp_path / "smoke" / "tables" / "svdr" / "3.json").read_text())
    reasons = {c["reason"] for c in rec["cells"] if c["kind"] == "not run"}
    assert reasons
    for r in reasons:
        assert hsite.esc(r) in text


def test_figures_drawn_from_cells(profile, tmp_path):
    """A figure's measured points are the table's measured cells in its columns; none -> a not-run panel."""
    rec = json.loads((tmp_path / "smoke" / "tables" / "bpr" / "1.json").read_text())
    cols = sorted({c["column"] for c in rec["cells"] if c["measured"] is not None})
    spec = {"id": "t", "paper": "bpr", "table": "1", "title": "test", "kind": "bars", "columns": cols}
    d = hfig.draw(spec, {"smoke": rec}, ["smoke"], tmp_path / "img")
    want = sum(1 for c in rec["cells"] if c["measured"] is not None and c["column"] in cols)
    assert d.measured_points == want > 0 and d.status == "drawn"
    assert d.png.stat().st_size > 1000 and d.svg.read_text().lstrip().startswith("<?xml")
    blank = json.loads(json.dumps(rec))
    for c in blank["cells"]:
        c["measured"] = None
        c["reason"] = "because of a test"
    d = hfig.draw(dict(spec, id="u"), {"smoke": blank}, ["smoke"], tmp_path / "img")
    assert d.status == "not run" and d.measured_points == 0 and "because of a test" in d.not_run[0]
    assert d.published_points > 0


def test_every_configured_figure_names_real_columns():
    from harness.tables.matrix import published
    from harness.published import PAPERS

    tables = {(p, t["id"]): t for p in PAPERS for t in published(p)["tables"]}
    specs = hfig.load_figures()
    hfig.check_against_tables(specs, tables)
    assert {s["paper"] for s in specs} == set(PAPERS)
    bad = (dict(specs[0], columns=["no such column"]),)
    with pytest.raises(ConfigError, match="no column 'no such column'"):
        hfig.check_against_tables(bad, tables)


def test_report_cli_open(profile, tmp_path):
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(f"results_dir: {tmp_path}\n")
    cmd = [sys.executable, "-m", "harness", "report", "--config", str(cfg_path)]
    r = subprocess.run([*cmd, "--open"], check=False, capture_output=True, text=True)
    assert r.returncode != 0 and "report has not been built" in r.stderr
    r = subprocess.run([*cmd, "--index", str(tmp_path / "index.html")], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*cmd, "--open"], check=False, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().endswith(str((tmp_path / "site" / "index.html").resolve()))
    assert "site/index.html" in (tmp_path / "index.html").read_text()


def test_report_without_tables_fails_clearly(tmp_path):
    cfg = load_config(overrides={"results_dir": str(tmp_path)})
    with pytest.raises(DataError, match="no table of profile 'smoke'"):
        hsite.build(cfg)
    assert not (tmp_path / "site").exists()


def test_jobs_say_which_tables_they_serve(tmp_path):
    from harness import workflow as hwf

    cfg = load_config(overrides={"results_dir": str(tmp_path)})
    served = json.loads(hwf.write_serves(cfg).read_text())
    assert "svdr Table 1" in served["index/svdr.token/smoke"]
    assert "bpr Table" in served["train/bpr/"]
    assert served["measure/svdr.synthetic/smoke"] == "svdr Table 5"
    # every job of the plan has its line, and a job started by the workflow prints it
    from harness import plan as hplan

    p = hplan.get(cfg)
    assert {f"search/{j.id}/{j.dataset}" for j in p.concrete("search")} <= set(served)
    code = ("import harness.workflow as w, harness.plan as p, harness.config as c;"
            f"cfg = c.load_config(overrides={{'results_dir': {str(tmp_path)!r}}});"
            "w.announce(cfg, p.get(cfg).job('measure', 'svdr.synthetic', 'smoke'))")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert r.stdout.strip() == "measure svdr.synthetic on smoke: serves svdr Table 5", r.stderr


def test_progress_batches_count_every_item(capsys):
    from harness.progress import batches

    starts = list(batches(10, 4, "encode", "doc"))
    assert starts == [0, 4, 8]
    err = capsys.readouterr().err
    assert "encode" in err and "100%" in err and "10.0/10.0" in err


def test_claims_page_shows_the_evidence_and_a_forest_plot_per_paper(profile, tmp_path):
    """A claims CSV with evidence (verdict, interval, p after Holm, n): the claims page shows them and
    the paper's forest plot (drawn from the same rows), the index counts the verdicts per paper."""
    import csv as _csv

    from harness.claims import COLUMNS

    rows = [{"claim_id": "dpr-beats-bm25-top20", "paper": "svdr", "holds": "true", "measured": "0.7 > 0.6",
             "detail": "ok", "verdict": "holds", "test": "paired", "n": "63", "diff": "0.1", "ci_low": "0.04",
             "ci_high": "0.16", "p": "0.002", "p_holm": "0.004", "mdd": "0.05", "er": "0.58", "dri": "0.11",
             "published_diff": "0.173", "published": "Table 1"},
            {"claim_id": "svdr-beta-beats-bm25-top20", "paper": "svdr", "holds": "false", "measured": "0.5 > 0.6",
             "detail": "ok", "verdict": "fails (not significant)", "test": "paired", "n": "63", "diff": "-0.1",
             "ci_low": "-0.2", "ci_high": "0.01", "p": "0.06", "p_holm": "0.06", "mdd": "0.05"},
            # a difference of aggregates (a trimmed mean) just outside its per-query interval: still drawn
            {"claim_id": "svdr-timing", "paper": "svdr", "holds": "true", "measured": "1 < 2", "detail": "ok",
             "verdict": "holds", "test": "paired", "n": "63", "diff": "-0.05", "ci_low": "-0.042",
             "ci_high": "-0.035", "p": "0.0002", "p_holm": "0.0004", "mdd": "0.005"}]
    with open(tmp_path / "claims" / "smoke.csv", "w", encoding="utf-8", newline="") as fh:
        w = _csv.DictWriter(fh, fieldnames=COLUMNS, restval="")
        w.writeheader()
        w.writerows(rows)
    hsite.build(profile)
    page = (tmp_path / "site" / "claims.html").read_text(encoding="utf-8")
    assert "fails (not significant)" in page and "[0.04, 0.16], p (Holm) 0.004, n 63" in page
    assert "img/claims-svdr.png" in page and (tmp_path / "site" / "img" / "claims-svdr.png").stat().st_size > 1000
    assert not (tmp_path / "site" / "img" / "claims-bpr.png").exists()  # no bpr claim with an interval
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Claims by verdict, smoke" in index and "<td>svdr</td><td>2</td><td>0</td><td>1</td><td>0</td><td>0</td>" in index


def test_learning_page_lists_each_models_check(profile, tmp_path):
    from harness.learning import CSV_FIELDS

    rows = [{"model": "dpr", "verdict": "learned", "loss_steps": "96", "loss_first": "5.7", "loss_last": "0.6",
             "loss_fell": "True", "dataset": "smoke", "system": "dpr", "measure": "nDCG@10", "queries": "63",
             "trained": "0.953", "initial": "0.404", "difference": "0.549", "ci_low": "0.439", "ci_high": "0.654",
             "p_one_sided": "0.0001", "beats_initial": "True"},
            {"model": "densephrases", "verdict": "did not learn", "loss_steps": "20", "loss_first": "66.6",
             "loss_last": "24.3", "loss_fell": "True", "dataset": "smoke", "system": "densephrases",
             "measure": "nDCG@10", "queries": "63", "trained": "0.426", "initial": "0.514", "difference": "-0.088",
             "ci_low": "-0.184", "ci_high": "0.001", "p_one_sided": "0.962", "beats_initial": "False"},
            {"model": "vdr", "verdict": "learned", "loss_steps": "96", "loss_first": "3.1", "loss_last": "1.2",
             "loss_fell": "True", "dataset": "smoke", "system": "vdr.beta", "primary": "False", "measure": "Success@5",
             "queries": "63", "trained": "0.330", "initial": "0.796", "difference": "-0.466", "ci_low": "-0.488",
             "ci_high": "-0.444", "p_one_sided": "0.9999", "beats_initial": "False", "below_initial": "True",
             "system_check": "below its start: did not learn"},
            {"model": "densephrases.ref", "verdict": "learned", "loss_steps": "62", "loss_first": "9.1",
             "loss_last": "5.2", "loss_fell": "True", "dataset": "squad-open", "system": "densephrases.ref",
             "primary": "True", "measure": "Success@5", "queries": "2351", "trained": "0.730", "initial": "0.576",
             "difference": "0.154", "ci_low": "0.13", "ci_high": "0.17", "p_one_sided": "0.0001",
             "beats_initial": "True", "start": "densephrases.ib-b48@init/densephrases.ib-b48"}]
    (tmp_path / "learning").mkdir()
    with open(tmp_path / "learning" / "smoke.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    hsite.build(profile)
    page = (tmp_path / "site" / "learning.html").read_text(encoding="utf-8")
    assert "<span class='status nolearn'>did not learn</span>" in page and "-0.088 [-0.184, +0.001]" in page
    assert "5.7 → 0.6 (96)" in page and "+0.549 [+0.439, +0.654]" in page
    # a system below its start, under a model that learned: its own row says so
    assert "<td>vdr.beta</td>" in page and "<span class='status nolearn'>did not learn</span> below its start</td>" in page
    # a twin shared by models that start from one checkpoint is named beside the initial value
    assert "<td>0.576 <span class='small'>(densephrases.ib-b48@init/densephrases.ib-b48)</span></td>" in page
    assert "learning.html" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")  # the nav links it


def test_estimate_page_projects_the_rehearsals_jobs_or_says_how_to_run_it(profile, tmp_path, monkeypatch):
    import json

    from harness import cost, ledger

    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "no-ledger")  # this machine's rehearsal alone
    hsite.build(profile)
    page = (tmp_path / "site" / "estimate.html").read_text(encoding="utf-8")
    assert "No rehearsal has run here" in page and "configs/profiles/rehearsal.yaml" in page
    run = tmp_path / "rehearsal" / "runs" / "nq" / "dpr"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"kind": "run", "job": "dpr", "dataset": "nq",
                                               "cost": cost.record("search", {"queries": 32}, 3.2)}))
    (tmp_path / "rehearsal" / "logs" / "train").mkdir(parents=True)
    (tmp_path / "rehearsal" / "logs" / "train" / "bpr.log").write_text("error: train bpr: out of memory at this shape\n")
    hsite.build(profile)
    page = (tmp_path / "site" / "estimate.html").read_text(encoding="utf-8")
    assert "3,610 test queries" in page and "<td class='projected'>0.10</td>" in page  # 0.1 s x 3,610 = 0.10 h
    # the paper profile's DPR books a GPU; measured on a CPU, its hours are that CPU's, not GPU-hours
    # (and DPR's search on the profile's 7 other datasets, projected from NQ's)
    assert ("jobs measured: 1 (and 7 index, search and measure jobs projected from the same job measured on another dataset; 1 "
            "variant and @init jobs from the per-unit cost") in page  # search dpr@init
    assert "0.0 GPU-hours" in page and "GPU jobs measured on a CPU (device_fallback): 9 job(s), 0.4 hours" in page
    assert "CPU jobs: 0.0 hours" in page
    assert "critical path (the longest chain of dependent jobs, GPUs unlimited): 0.1 hours: search dpr" in page  # or its twin
    assert "train bpr: out of memory at this shape" in page
    assert re.search(r"not priced: the DAG(&#x27;|')s \d+ evaluate jobs", page)   # what the estimate leaves out
    assert "estimate.html" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
