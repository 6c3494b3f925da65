"""Table rendering, regression and claims on synthetic measurements in a tmp results tree."""
from __future__ import annotations

import csv
import json

import pytest
import yaml

from harness import claims, regress
from harness.config import load_config
from harness.errors import ConfigError
from harness.tables import render


def _cfg(tmp_path, **over):
    return load_config([], overrides={"results_dir": str(tmp_path / "results"), **over})


def _eval(cfg, dataset, system, measures):
    """An eval file where the plan says the system's search job writes it."""
    from harness.measured import locate

    path = locate(cfg, system, dataset, "Success@1")[0][0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measures": measures}))


def cfg_root(cfg):
    from harness.config import results_root

    return results_root(cfg)


def _rows(csv_path):
    with open(csv_path, encoding="utf-8") as fh:
        return {(r["row"], r["column"]): r for r in csv.DictReader(fh)}


def test_svdr_table1_measured_standin_and_not_run(tmp_path):
    cfg = _cfg(tmp_path)
    _eval(cfg, "smoke", "bm25", {"Success@1": 0.25, "Success@5": 0.5, "Success@20": 0.75})
    _eval(cfg, "smoke", "dpr", {"Success@1": 0.5, "Success@5": 0.625, "Success@20": 0.875})
    md, csv_path = render.render(cfg, "svdr", "1", tmp_path / "tables" / "svdr" / "1.md")
    rows = _rows(csv_path)
    assert rows[("DPR", "NQ top20")]["measured"] == "87.5000"
    assert rows[("DPR", "NQ top20")]["published"] == "80.2"
    assert rows[("DPR", "NQ top20")]["status"] == "stand-in"          # smoke is not NQ
    assert float(rows[("BM25", "NQ top1")]["difference"]) == pytest.approx(25.0 - 22.7)
    assert rows[("DPR", "TQA top1")]["status"] == "not run"
    assert "TQA" in rows[("DPR", "TQA top1")]["reason"]
    assert rows[("SVDR_β", "NQ top1")]["status"] == "not run"
    text = md.read_text()
    assert "Profile `smoke`" in text and "NQ → smoke" in text
    # every published cell of the table is present
    from harness.published import load_published, records_of

    assert len(rows) == len(records_of(load_published("svdr"), "1"))


def test_status_ok_okish_fail_on_the_papers_dataset(tmp_path):
    # Pretend the profile measured the paper's own NQ test set: statuses follow the tolerance.
    cfg = _cfg(tmp_path)
    cfg["datasets"]["smoke"]["id"] = "dpr-w100/natural-questions/test"
    _eval(cfg, "smoke", "dpr", {"Success@1": 0.465, "Success@5": 0.66, "Success@20": 0.70})
    _eval(cfg, "smoke", "bm25", {"Success@1": 0.227, "Success@5": 0.436, "Success@20": 0.629})
    _, csv_path = render.render(cfg, "svdr", "1", tmp_path / "tables" / "svdr" / "1.md")
    rows = _rows(csv_path)
    assert rows[("DPR", "NQ top1")]["status"] == "OK"       # 46.5 vs 46.0
    assert rows[("DPR", "NQ top5")]["status"] == "OKish"    # 66.0 vs 68.9
    assert rows[("DPR", "NQ top20")]["status"] == "FAIL"    # 70.0 vs 80.2


def test_table_inputs_follow_the_profile(tmp_path):
    from harness.tables.matrix import required_inputs

    cfg = _cfg(tmp_path)
    # the eval folders of the search jobs that write Table 1's systems (one per job, not per system),
    # and those of the learning check's twins of the models behind them (harness.learning)
    names = {p.split("/")[-1] for p in required_inputs(cfg, "svdr", "1")}
    assert names == {"bm25", "dpr", "svdr", "vdr", "dpr@init", "svdr@init", "vdr@init"}
    cfg["learning"]["check"] = "none"
    assert {p.split("/")[-1] for p in required_inputs(cfg, "svdr", "1")} == {"bm25", "dpr", "svdr", "vdr"}
    cfg["methods"]["dpr"]["enabled"] = False
    cfg["methods"]["svdr"]["enabled"] = False
    cfg["methods"]["vdr"]["enabled"] = False
    cfg["methods"]["bpr"]["enabled"] = False
    cfg["methods"]["densephrases"]["enabled"] = False   # distils from the reader
    cfg["reader"]["enabled"] = False
    assert [p.split("/")[-1] for p in required_inputs(cfg, "svdr", "1")] == ["bm25"]


def test_regression_detects_breach(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    _eval(cfg, "smoke", "bm25", {"Success@1": 0.30})
    exp = tmp_path / "expected"
    exp.mkdir()
    monkeypatch.setattr(regress, "EXPECTED_DIR", exp)
    (exp / "smoke.yaml").write_text(yaml.safe_dump({"profile": "smoke", "values": [
        {"key": "smoke/bm25/Success@1", "value": 0.31, "tol": 0.02}]}))
    rows, breaches = regress.check(cfg)
    assert breaches == [] and rows[0]["ok"]
    (exp / "smoke.yaml").write_text(yaml.safe_dump({"profile": "smoke", "values": [
        {"key": "smoke/bm25/Success@1", "value": 0.40, "tol": 0.02},
        {"key": "smoke/dpr/Success@1", "value": 0.40, "tol": 0.02}]}))
    rows, breaches = regress.check(cfg)
    assert len(breaches) == 2
    assert "missing" in breaches[1]


def test_claims_hold_false_and_not_run(tmp_path):
    cfg = _cfg(tmp_path)
    claim = {"id": "x", "paper": "svdr", "statement": "s", "op": ">",
             "lhs": {"system": "dpr", "dataset": "NQ", "measure": "Success@20"},
             "rhs": {"system": "bm25", "dataset": "NQ", "measure": "Success@20"}}
    assert claims.evaluate(cfg, claim)["holds"] == "not run"          # nothing measured yet
    _eval(cfg, "smoke", "bm25", {"Success@20": 0.6})
    _eval(cfg, "smoke", "dpr", {"Success@20": 0.7})
    assert claims.evaluate(cfg, claim)["holds"] == "true"
    assert claims.evaluate(cfg, {**claim, "factor": 1.2})["holds"] == "false"
    cfg["methods"]["dpr"]["enabled"] = False   # bpr's baselines, svdr's timing rows and the reader read DPR
    with pytest.raises(ConfigError, match="no train job 'dpr'"):
        claims.evaluate(cfg, claim)
    for m in ("bpr", "svdr", "vdr", "densephrases"):   # densephrases distils from the reader
        cfg["methods"][m]["enabled"] = False
    cfg["reader"]["enabled"] = False
    out = claims.evaluate(cfg, claim)
    assert out["holds"] == "not run" and "enabled is false" in out["detail"]


def test_a_paper_label_the_profile_has_no_stand_in_for_reads_its_reason_in_cells_and_claims(tmp_path):
    """The paper profile withdraws the smoke fixture's stand-ins for SQuAD and BEIR (substitutions: null):
    DensePhrases Table 2's SQuAD cells and LightRetriever's BEIR claims say why, not 'not run on smoke'."""
    from harness.config import REPO
    from harness.tables import matrix

    cfg = load_config([REPO / "configs" / "profiles" / "paper.yaml"],
                      overrides={"results_dir": str(tmp_path / "results")})
    _, cells = matrix.resolve_table(cfg, "densephrases", "2")
    squad = [c for c in cells if c.column.startswith("SQuAD") and c.system]
    assert squad and all(c.kind == "not run" for c in squad)
    assert {c.reason for c in squad} == {"no dataset of profile paper stands in for SQuAD: "
                                         + cfg["tables"]["unavailable"]["SQuAD"]}
    for table in ("1", "A.1"):  # the storage and speed figures: of the index over the 2018 Wikipedia, the paper's nq
        timed = [c for c in matrix.resolve_table(cfg, "densephrases", table)[1] if (c.measure or "").startswith(
            ("metric:storage", "metric:qps", "metric:indexing", "metric:ram", "metric:gpu_memory"))]
        assert timed and {c.dataset for c in timed} == {cfg["methods"]["densephrases"]["timing"]["dataset"]} == {"nq"}
        assert {p.parent.name for c in timed for p in c.sources} == {"densephrases.speed"}
    side = {"system": "densephrases", "dataset": "SQuAD", "measure": "Success@1"}
    out = claims.evaluate(cfg, {"id": "x", "paper": "densephrases", "op": ">", "lhs": side, "rhs": {"value": 0.0}})
    assert out["holds"] == "not run"
    assert out["detail"].endswith("no dataset of profile paper stands in for SQuAD: "
                                  + cfg["tables"]["unavailable"]["SQuAD"])


def test_a_mean_over_the_wired_sets_stands_in_for_a_papers_beir_average(tmp_path):
    """The paper profile's BEIR label is the mean over 5 wired sets (substitutions.BEIR.mean_of): each
    set weighted equally, a stand-in; a set not measured leaves the cell not run, naming it; a metrics
    figure (Figure 5's) averages in its unit; a claim on the label is not run (its paired test needs
    one set's queries)."""
    from harness.config import REPO
    from harness.measured import locate

    cfg = load_config([REPO / "configs" / "profiles" / "paper.yaml"],
                      overrides={"results_dir": str(tmp_path / "results")})
    sets = cfg["substitutions"]["BEIR"]["mean_of"]
    assert sets == ["scifact", "arguana", "fiqa", "nfcorpus", "scidocs"]
    values = [0.1, 0.2, 0.3, 0.4, 0.6]        # mean 0.32
    for d, v in zip(sets[:-1], values, strict=False):
        _eval(cfg, d, "lightretriever", {"nDCG@10": v})
    _, cells = render.fill(cfg, "lightretriever", "2")
    c = next(c for c in cells if c.row == "Llama3.2-1b Light Dense" and c.column.startswith("BEIR nDCG@10"))
    assert c.kind == "not run" and c.reason.startswith("scidocs: not measured")
    _eval(cfg, sets[-1], "lightretriever", {"nDCG@10": values[-1]})
    _, cells = render.fill(cfg, "lightretriever", "2")
    c = next(c for c in cells if c.row == "Llama3.2-1b Light Dense" and c.column.startswith("BEIR nDCG@10"))
    assert c.kind == "measured" and c.datasets == sets and c.status == "stand-in"
    assert c.measured == pytest.approx(32.0)                  # (10 + 20 + 30 + 40 + 60) / 5, in %
    md, csv_path = render.render(cfg, "lightretriever", "2", tmp_path / "t2.md", tmp_path / "t2.json")
    assert "BEIR → the mean over 5 sets, each weighted equally: scifact (`beir/scifact/test`)" in md.read_text()
    row = _rows(csv_path)[(c.row, c.column)]
    assert row["measured"] == "32.0000" and row["dataset"] == "+".join(sets)
    rec = json.loads((tmp_path / "t2.json").read_text())
    cell = next(x for x in rec["cells"] if x["row"] == c.row and x["column"] == c.column)
    assert cell["evaluation"].startswith("the mean over 5 sets, each weighted equally, of: scifact: nDCG@10")
    # Figure 5's points: metrics figures, averaged in their unit
    for d, v in zip(sets, values, strict=True):
        f = locate(cfg, "lightretriever.fig5-dense-0", d, "metric:ndcg10")[0][0]
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"values": {"ndcg10": {"value": v, "unit": "ratio"}}}))
    _, cells = render.fill(cfg, "lightretriever", "fig5")
    c = next(c for c in cells if c.row.startswith("Light dense, dims #1") and c.column.startswith("BeIR"))
    assert c.kind == "measured" and c.measured == pytest.approx(32.0) and c.status == "stand-in"
    # the measure job's plot is drawn per set: each set's is attached, named as one of the 5, none as the mean
    for d in sets[:-1]:
        (locate(cfg, "lightretriever.fig5-dense-0", d, "metric:ndcg10")[0][0].parent / "fig5.png").write_bytes(d.encode())
    md, _ = render.render(cfg, "lightretriever", "fig5", tmp_path / "f5.md", tmp_path / "f5.json")
    figs = json.loads((tmp_path / "f5.json").read_text())["figures"]
    assert [f["dataset"] for f in figs] == sets and figs[-1]["source"] is None
    assert [(tmp_path / f"fig5-{d}-fig5.png").read_bytes() for d in sets[:-1]] == [d.encode() for d in sets[:-1]]
    text = md.read_text()
    assert "Figure fig5.png of scifact: [fig5-scifact-fig5.png](fig5-scifact-fig5.png)" in text
    assert "one of the 5 sets the table's cells read: each drawn alone" in text
    assert "Figure fig5.png of scidocs: not run (no measure job on scidocs wrote it)" in text
    from harness.report.site import Site    # the report shows each set's plot under its own name

    render.render(cfg, "lightretriever", "fig5")
    site = Site(cfg, tmp_path / "site")
    html = "".join(site.job_figures(tmp_path / "site", "lightretriever", "fig5",
                                    site.table_records("lightretriever", "fig5")))
    assert all((tmp_path / "site" / "lightretriever" / "img" / f"fig5-paper-{d}-fig5.png").read_bytes() == d.encode()
               for d in sets[:-1])
    assert "fig5.png of arguana (profile paper" in html and "fig5.png of scidocs</h2>" in html
    # a claim on the label reads each set (lightretriever.hybrid is not measured here: not run, naming the set)
    claim = next(c for c in claims.load_claims() if c["id"] == "lightretriever-hybrid-beats-light-dense-beir")
    out = claims.evaluate(cfg, claim)
    assert out["holds"] == "not run" and out["detail"].startswith("BEIR (the mean over 5 sets: scifact, arguana")
    assert "scifact: not measured" in out["detail"]
    needed = claims.required_inputs(cfg)
    assert {d for d in sets if any(f"/eval/{d}/lightretriever" in p for p in needed)} == set(sets)
    from harness.evaluate.run import PER_QUERY_SUFFIX, write_per_query

    for i, d in enumerate(sets):   # hybrid 0.1 above light dense on each set's 3 queries, whatever its level
        for system, up in (("lightretriever", 0.0), ("lightretriever.hybrid", 0.1)):
            vals = {f"q{j}": 0.1 * i + 0.05 * j + up for j in range(3)}
            _eval(cfg, d, system, {"nDCG@10": sum(vals.values()) / 3})
            f = locate(cfg, system, d, "nDCG@10")[0][0]
            write_per_query(f.with_name(f.stem + PER_QUERY_SUFFIX), {q: {"nDCG@10": v} for q, v in vals.items()})
    out = claims.evaluate(cfg, claim)
    assert out["holds"] == "true" and out["n"] == 15 and "stratified by set" in out["test"]
    assert out["diff"] == pytest.approx(0.1) and out["ci_low"] == pytest.approx(0.1)


def test_a_table_whose_columns_read_different_sets_attaches_each_sets_plot(tmp_path):
    """The small profile's Figure 5 reads SciFact (BEIR) and CMRC 2018 (CMTEB-R): the measure job draws
    fig5.png on each, and the table attaches both, each under its set's name (it attached the first)."""
    from harness.config import REPO
    from harness.measured import locate

    cfg = load_config([REPO / "configs" / "profiles" / "small.yaml"],
                      overrides={"results_dir": str(tmp_path / "results")})
    sets = [cfg["substitutions"]["BEIR"], cfg["substitutions"]["CMTEB-R"]]
    for d in sets:
        f = locate(cfg, "lightretriever.fig5-dense-0", d, "metric:ndcg10")[0][0]
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"values": {"ndcg10": {"value": 0.5, "unit": "ratio"}}}))
        (f.parent / "fig5.png").write_bytes(d.encode())
    md, _ = render.render(cfg, "lightretriever", "fig5", tmp_path / "f5.md", tmp_path / "f5.json")
    figs = json.loads((tmp_path / "f5.json").read_text())["figures"]
    assert sorted(f["dataset"] for f in figs) == sorted(sets)
    assert all((tmp_path / f"fig5-{d}-fig5.png").read_bytes() == d.encode() for d in sets)
    assert "one of the 2 sets the table's cells read" in md.read_text()


def test_claims_compare_metrics_in_base_units_and_print_the_unit(tmp_path):
    cfg = _cfg(tmp_path)
    from harness.measured import locate

    dpr_file, bm25_file = (locate(cfg, s, "smoke", "metric:t")[0][0] for s in ("svdr.lat-dpr", "svdr.lat-bm25"))
    dpr_file.parent.mkdir(parents=True)
    dpr_file.write_text(json.dumps({"values": {"t": {"value": 1.0, "unit": "ms"}}}))
    bm25_file.write_text(json.dumps({"values": {"t": {"value": 0.5, "unit": "s"}}}))
    root = bm25_file.parent
    claim = {"id": "x", "paper": "svdr", "statement": "s", "op": "<",
             "lhs": {"system": "svdr.lat-dpr", "dataset": "NQ", "measure": "metric:t"},
             "rhs": {"system": "svdr.lat-bm25", "dataset": "NQ", "measure": "metric:t"}}
    out = claims.evaluate(cfg, claim)          # 1 ms < 0.5 s; the raw numbers (1.0 < 0.5) would not hold
    assert out["holds"] == "true"
    assert "metric:t=0.001 s" in out["measured"] and "metric:t=0.5 s" in out["measured"]
    assert claims.evaluate(cfg, {**claim, "op": ">"})["holds"] == "false"
    (root / "svdr.lat-bm25.json").write_text(json.dumps({"values": {"t": {"value": 500, "unit": "us"}}}))
    assert claims.evaluate(cfg, claim)["holds"] == "false"   # 1 ms vs 0.5 ms


def test_claims_file_is_valid():
    assert {c["id"] for c in claims.load_claims()} >= {"dpr-beats-bm25-top20"}


def test_cell_whose_published_value_was_lost_is_still_measured(tmp_path):
    # BPR Table 2 "w/o reranking" NQ top-20: numeric column, value lost in the paper's text
    # conversion (published null, measure Success@20); ours is shown beside "—".
    cfg = _cfg(tmp_path)
    _eval(cfg, "smoke", "bpr.no-rerank", {"Success@1": 0.25, "Success@20": 0.625, "Success@100": 0.875})
    _, cells = render.fill(cfg, "bpr", "2")
    c = next(c for c in cells if c.row == "BPR w/o reranking" and c.column == "NQ top20")
    assert c.published is None and c.kind == "measured" and c.measured == pytest.approx(62.5)
    md, _ = render.render(cfg, "bpr", "2", tmp_path / "t2.md")
    line = next(x for x in md.read_text().splitlines() if x.startswith("| BPR w/o reranking"))
    assert "**62.5** / —" in line and "**25.0** / 38.0" in line


def test_a_column_whose_figure_training_does_not_change_is_never_withheld_by_the_learning_check(tmp_path, monkeypatch):
    """BPR Table 3's #params (the reader's parameter count, matrix column training_free) stays a result
    when the models behind its row did not learn; the EM beside it is withheld."""
    from harness import learning
    from harness.measured import locate

    cfg = _cfg(tmp_path)
    f = locate(cfg, "bpr.bflat", "smoke", "metric:em")[0][0]
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"values": {"em": {"value": 0.25, "unit": "ratio"},
                                        "reader_params_millions": {"value": 109.5, "unit": "count"}}}))
    monkeypatch.setattr(learning, "cell_status", lambda *a, **k: (learning.STATUS, "model bpr did not learn: x"))
    _, cells = render.fill(cfg, "bpr", "3")
    row = {c.column: c for c in cells if c.row.startswith("BPR (l=1000) [BERT-base]")}
    assert row["NQ EM"].status == learning.STATUS and row["NQ EM"].measured == pytest.approx(25.0)
    assert row["#params (M)"].status == "stand-in" and row["#params (M)"].measured == pytest.approx(109.5)
