"""The learning check (harness.learning, harness.plan.learning_twins, harness.train): the twins the
plan adds, the initial checkpoint the twin trains (exactly the weights before training), the loss
check, and the verdict on hand-made evaluation files, down to the table status it sets."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness import learning
from harness import plan as hp
from harness.config import load_config
from harness.evaluate.run import PER_QUERY_SUFFIX, write_per_query
from harness.io import write_json
from harness.train import LOSS_LOG, loss_check


def _plan(cfg):
    return hp._cached.__wrapped__(json.dumps(cfg, sort_keys=True, default=str))


def _of(job):
    """The checked models a twin job stands for (params learning_twin_of: system -> {model: its system})."""
    return {m for ms in job.params["learning_twin_of"].values() for m in ms}


def test_twins_of_each_methods_own_model():
    p = _plan(load_config())
    twins = {(j.stage, j.id, j.dataset) for j in p.jobs.values() if hp.INIT in j.id}
    assert ("train", "dpr@init", None) in twins and ("search", "dpr@init", "smoke") in twins
    assert ("search", "dpr@init", "smoke-ir") not in twins  # one dataset per model: its training dataset
    assert ("train", "reader@init", None) not in twins  # no search job of its own to compare
    assert not any(t[1].startswith(("svdr.abl", "bpr.a", "lightretriever.nokl")) for t in twins)  # main only
    s = p.job("search", "dpr@init", "smoke")
    assert s.systems == p.job("search", "dpr", "smoke").systems
    assert s.params["learning_twin_of"] == {sys: {"dpr": sys} for sys in s.systems}  # its own, system by system
    assert s.inputs["model"] == hp.Ref("model", "dpr@init") and s.inputs["index"].id == "dpr@init"
    assert s.inputs["bm25_run"] == p.job("search", "dpr", "smoke").inputs["bm25_run"]  # what is not trained stays
    assert p.job("train", "dpr@init").params == {"init": True}
    assert p.systems()[("dpr", "smoke")].id == "dpr"  # a twin produces no system
    svdr = p.job("search", "svdr@init", "smoke")
    assert {r.id for r in svdr.inputs.values() if r.kind == "index"} >= {"svdr.emb@init"}


def test_twins_leave_every_other_job_as_it_was():
    on, off = _plan(load_config()), _plan(load_config(overrides={"learning": {"check": "none"}}))
    assert not any(hp.INIT in j.id for j in off.jobs.values())
    assert {k for k in on.jobs if hp.INIT not in k[1]} == set(off.jobs)
    for key, job in off.jobs.items():
        if job.dataset is not None or job.stage == "train":
            assert on.hash(on.jobs[key]) == off.hash(job), key


def test_all_checks_the_variants_too():
    p = _plan(load_config(overrides={"learning": {"check": "all"}}))
    assert ("train", "svdr.abl-m1@init", None) in p.jobs and ("search", "svdr.abl-m1@init", "smoke") in p.jobs
    assert ("train", "qcr.kmeans@init", None) not in p.jobs  # not trained through the loop


def test_small_checks_every_searched_model_and_ci_its_main_ones(monkeypatch):
    """small (learning.check: all) gives every model trained through the loop and searched its twin;
    the ci overlay keeps main (it trains no variant; its budget stays as it was)."""
    monkeypatch.setenv("HARNESS_DATA_MIRROR", "/nonexistent")  # the plan reads no data
    small = _plan(load_config(["configs/profiles/small.yaml"]))
    trained = {j.id for j in small.jobs.values() if j.stage == "train" and j.step == "train_step" and hp.INIT not in j.id}
    searched = {j.id for j in small.jobs.values() if j.stage == "search"}
    twins = {m for j in small.jobs.values() if "learning_twin_of" in j.params and j.stage == "search" for m in _of(j)}
    assert len(trained & searched) >= 40 and twins == trained & searched
    assert {"bpr.a0", "svdr.abl-m1", "densephrases.ib-b84", "lightretriever.nokl", "qcr.grid-b0k0"} <= twins
    ci = _plan(load_config(["configs/profiles/small.yaml", "configs/profiles/ci.yaml"]))
    ci_twins = {m for j in ci.jobs.values() if "learning_twin_of" in j.params and j.stage == "search" for m in _of(j)}
    assert ci_twins and all(t == ci.jobs[("train", t, None)].method for t in ci_twins)
    # each twin searches the test split of the model's training collection where it is searched there:
    # QCR trains on squad-open and its checks read squad-open-ir (the same collection, 2,351 questions),
    # not SciFact (300 out-of-domain queries, first by name); LightRetriever's on a training set of its own
    on = {(m, j.dataset) for j in small.jobs.values() if "learning_twin_of" in j.params and j.stage == "search"
          for m in _of(j)}
    assert {("qcr", "squad-open-ir"), ("qcr.grid-b0k0", "squad-open-ir"), ("dpr", "squad-open"),
            ("lightretriever", "cmrc2018")} <= on
    assert not any(d == "scifact" for _, d in on)
    # DensePhrases' objective: one twin of the reading-comprehension job, reading each initial checkpoint
    # once (on small the main model's, shared's, denspi's and the one the 7 other variant models start
    # from); ci checks its main model alone, on the same measure
    rc, rc_twin = small.job("measure", "densephrases.rc", "squad-open"), small.job("measure", "densephrases.rc@init", "squad-open")
    assert len(rc.systems) >= 10 and rc_twin.step == rc.step and set(rc_twin.systems) < set(rc.systems)
    assert _of(rc_twin) == {r.id for k, r in rc.inputs.items() if k.startswith("model_")}  # every model it reads
    start = next(s for s, ms in rc_twin.params["learning_twin_of"].items() if "densephrases.none-b48" in ms)
    assert rc_twin.params["learning_twin_of"][start]["densephrases.none-b48"] == "densephrases.none-b48-rc"
    assert {r.id for k, r in rc_twin.inputs.items() if k.startswith("model_")} == {
        small.job("search", s.removesuffix("-rc").removesuffix(".rc"), "squad-open").inputs["model"].id + hp.INIT
        for s in rc_twin.systems}
    assert ci.job("measure", "densephrases.rc@init", "squad-open").params["learning_twin_of"] == {
        "densephrases.rc": {"densephrases": "densephrases.rc"}}


def _toy(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return model, [(x[i], y[i]) for i in range(64)]


def _fit(out: Path | None):
    import torch

    from harness.train import TrainSettings, train_loop

    model, data = _toy()
    before = [p.detach().clone() for p in model.parameters()]

    def step(batch, step, rng):
        xb, yb = torch.stack([b[0] for b in batch]), torch.stack([b[1] for b in batch])
        return torch.nn.functional.mse_loss(model(xb), yb), {}

    ts = TrainSettings(batch_size=8, epochs=10, lr=0.2, warmup_ratio=0.0, log_every=1000)
    info = train_loop(data, step, list(model.parameters()), settings=ts, seed=0, out=out, modules=[model])
    return info, before, [p.detach() for p in model.parameters()]


def test_init_checkpoint_keeps_the_weights_exactly(tmp_path):
    import torch

    from harness.train import init_checkpoint

    with init_checkpoint():
        info, before, after = _fit(tmp_path / "init")
    assert info["steps"] == 1 and all(torch.equal(a, b) for a, b in zip(before, after))
    info, before, after = _fit(tmp_path / "trained")  # outside the block: trains as configured
    assert info["steps"] == 80 and not all(torch.equal(a, b) for a, b in zip(before, after))
    check = loss_check(tmp_path / "trained")
    assert check["steps"] == 80 and check["window"] == 8 and check["fell"] and check["p_mannwhitney"] < 0.05
    assert check["last"] < 0.2 * check["first"]


def _loss_log(folder: Path, losses: list[float]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOSS_LOG).write_text("step\tloss\tlr\tseconds\n" + "".join(
        f"{i + 1}\t{v!r}\t0.1\t{i}.000\n" for i, v in enumerate(losses)))
    return folder


def test_loss_check_reads_the_first_and_last_tenth(tmp_path):
    flat = loss_check(_loss_log(tmp_path / "a", [2.0, 1.0] + [1.5] * 16 + [1.9, 2.1]))
    assert flat["window"] == 2 and math.isclose(flat["first"], 1.5) and math.isclose(flat["last"], 2.0)
    assert not flat["fell"] and "p_mannwhitney" not in flat  # two steps a window: no p-value
    short = loss_check(_loss_log(tmp_path / "b", [3.0, 2.0, 1.0]))
    assert short["window"] == 1 and short["first"] == 3.0 and short["last"] == 1.0 and short["fell"]
    assert loss_check(tmp_path / "none") is None


def _eval(cfg, job_id: str, system: str, per_query: dict[str, float], measure: str = "Success@5") -> None:
    _eval_at(cfg, job_id, "smoke", system, per_query, measure)


@pytest.fixture
def tiny(tmp_path):
    """The smoke config checking dpr alone, its results under tmp_path, dpr's loss falling."""
    cfg = load_config(overrides={"results_dir": str(tmp_path)})
    model = hp.path(cfg, hp.Ref("model", "dpr"))
    model.mkdir(parents=True)
    write_json(model / "meta.json", {"learning": {"loss": {"first": 2.0, "last": 0.5, "steps": 96, "fell": True}}})
    return cfg


def test_a_model_that_beats_its_initial_checkpoint_learned(tiny):
    qs = [f"q{i}" for i in range(40)]
    _eval(tiny, "dpr", "dpr", {q: 1.0 if i % 4 else 0.0 for i, q in enumerate(qs)})     # 0.75
    _eval(tiny, "dpr@init", "dpr", {q: 1.0 if i % 4 == 0 else 0.0 for i, q in enumerate(qs)})  # 0.25
    v = learning.verdict(tiny, "dpr")
    (c,) = [c for c in v["init"] if c["dataset"] == "smoke"]
    assert c["queries"] == 40 and math.isclose(c["diff"], 0.5) and c["p_one_sided"] < 0.001
    assert c["ci95"][0] > 0 and c["beats_init"]
    assert v["learned"] is True and len(v["init"]) == 1  # one comparison: on its training dataset
    assert learning.cell_status(tiny, "dpr.bm25-m5", "smoke") is None


def test_a_model_no_better_than_its_initial_checkpoint_did_not_learn(tiny):
    qs = [f"q{i}" for i in range(40)]
    _eval(tiny, "dpr", "dpr", {q: 1.0 if i % 2 else 0.0 for i, q in enumerate(qs)})
    _eval(tiny, "dpr@init", "dpr", {q: 1.0 if i % 2 == 0 or i < 6 else 0.0 for i, q in enumerate(qs)})
    v = learning.verdict(tiny, "dpr")
    (c,) = [c for c in v["init"] if c["dataset"] == "smoke"]
    assert c["diff"] < 0 and not c["beats_init"] and v["learned"] is False
    status = learning.cell_status(tiny, "dpr.bm25-m5", "smoke")  # re-ranks with dpr: fed by it
    assert status is not None and status[0] == "did not learn" and "model dpr did not learn" in status[1]
    assert learning.cell_status(tiny, "bm25", "smoke") is None
    assert "bpr" in learning.models_feeding(tiny, "bpr.bflat", "smoke")


def test_a_loss_that_did_not_fall_is_enough_to_fail(tiny):
    write_json(hp.path(tiny, hp.Ref("model", "dpr")) / "meta.json",
               {"learning": {"loss": {"first": 1.0, "last": 1.2, "steps": 96, "fell": False}}})
    assert learning.verdict(tiny, "dpr")["learned"] is False


def test_a_table_cell_fed_by_a_model_that_did_not_learn_says_so(tiny):
    """SVDR Table 1's DPR row (system dpr on the NQ stand-in) with dpr worse than its initial
    checkpoint: the cell keeps its value, its status is "did not learn" with the figures in its
    reason (markdown footnote, CSV reason), never a verdict against the paper."""
    import csv as _csv
    import io

    from harness.tables.render import fill, to_csv, to_markdown

    qs = [f"q{i}" for i in range(40)]
    for job, good in (("dpr", lambda i: i % 2), ("dpr@init", lambda i: i % 2 == 0 or i < 6)):
        _eval(tiny, job, "dpr", {q: float(bool(good(i))) for i, q in enumerate(qs)})
        f = hp.path(tiny, hp.Ref("eval", job, "smoke")) / "dpr.json"
        doc = json.loads(f.read_text())
        doc["measures"].update({"Success@20": 0.6, "Success@100": 0.8})
        f.write_text(json.dumps(doc))
    tinfo, cells = fill(tiny, "svdr", "1")
    dpr = [c for c in cells if c.system == "dpr" and c.kind == "measured"]
    assert dpr and all(c.status == "did not learn" and "model dpr did not learn" in c.reason for c in dpr)
    md = to_markdown(tiny, "svdr", "1", tinfo, cells)
    assert "Did not learn (the value is no result):" in md and "did not learn ⁽" in md
    rows = list(_csv.DictReader(io.StringIO(to_csv("svdr", "1", cells))))
    assert {r["status"] for r in rows if r["system"] == "dpr" and r["measured"]} == {"did not learn"}
    assert all("vs initial" in r["reason"] for r in rows if r["status"] == "did not learn")


def test_the_learning_command_writes_one_row_per_comparison(tiny, tmp_path):
    import csv as _csv

    from harness.config import dump

    qs = [f"q{i}" for i in range(40)]
    _eval(tiny, "dpr", "dpr", {q: 1.0 if i % 4 else 0.0 for i, q in enumerate(qs)})
    _eval(tiny, "dpr@init", "dpr", {q: 1.0 if i % 4 == 0 else 0.0 for i, q in enumerate(qs)})
    dump(tiny, tmp_path / "cfg.yaml")
    assert learning.main(["--config", str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "l.csv")]) == 0
    rows = list(_csv.DictReader(open(tmp_path / "l.csv", encoding="utf-8")))
    dpr = [r for r in rows if r["model"] == "dpr"]
    assert {r["dataset"] for r in dpr} == {"smoke"} and dpr[0]["beats_initial"] == "True"  # its training set only
    assert [r["system"] for r in dpr] == ["dpr", "dpr.bm25-m5", "dpr.bm25-m10", "dpr.bm25-m20", "dpr.bm25-m100"]
    assert [r["primary"] for r in dpr] == ["True"] + ["False"] * 4 and dpr[0]["system_check"] == "beats its start"
    assert {r["system_check"] for r in dpr[1:]} == {""}  # not evaluated here: no comparison, no word
    assert dpr[0]["verdict"] == "learned" and float(dpr[0]["ci_low"]) > 0
    assert {r["verdict"] for r in rows if r["model"] == "svdr"} == {"not checked"}  # nothing evaluated yet
    assert {r["verdict"] for r in rows if r["model"] == "bm25"} == set()  # BM25 is not trained
    assert not [r for r in rows if r["model"] == "svdr.abl-m1"]  # neither trained here nor checked


def _eval_at(cfg, job_id: str, dataset: str, system: str, per_query: dict[str, float], measure: str) -> None:
    """An evaluation of ``system`` by job ``job_id`` on ``dataset``: its means and per-query values."""
    folder = hp.path(cfg, hp.Ref("eval", job_id, dataset))
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / f"{system}.json", {"measures": {measure: sum(per_query.values()) / len(per_query)}})
    write_per_query(folder / f"{system}{PER_QUERY_SUFFIX}", {q: {measure: v} for q, v in per_query.items()})


def test_a_system_that_training_made_worse_than_its_start_did_not_learn(tmp_path):
    """LightRetriever learns (its first system, light dense, beats its initial checkpoint) while its
    sparse side falls below its own start (as VDR's beta search did on small): the sparse cells, and
    the hybrid that fuses the sparse run, are "did not learn"; light dense and the full-size base
    (no different from its start) are not marked; the CSV says which system is which."""
    import csv as _csv

    from harness.config import dump

    cfg = load_config(overrides={"results_dir": str(tmp_path)})
    model = hp.path(cfg, hp.Ref("model", "lightretriever"))
    model.mkdir(parents=True)
    write_json(model / "meta.json", {"learning": {"loss": {"first": 2.0, "last": 0.5, "steps": 96, "fell": True}}})
    (twin,) = learning.twin_searches(cfg, "lightretriever")
    qs = [f"q{i}" for i in range(40)]
    hi, lo = {q: 1.0 if i % 4 else 0.0 for i, q in enumerate(qs)}, {q: 1.0 if i % 4 == 0 else 0.0 for i, q in enumerate(qs)}
    for system, trained, init in (("lightretriever", hi, lo), ("lightretriever.sparse", lo, hi),
                                  ("lightretriever.base", hi, hi)):
        _eval_at(cfg, "lightretriever", twin.dataset, system, trained, "nDCG@10")
        _eval_at(cfg, twin.id, twin.dataset, system, init, "nDCG@10")
    v = learning.verdict(cfg, "lightretriever")
    assert v["learned"] is True and [c["system"] for c in v["init"]] == ["lightretriever"]
    by = {c["system"]: c for c in v["systems"] if "missing" not in c}
    assert by["lightretriever.sparse"]["below_init"] and not by["lightretriever.sparse"]["beats_init"]
    assert not by["lightretriever.base"]["below_init"] and not by["lightretriever.base"]["beats_init"]
    for system, dataset in (("lightretriever.sparse", twin.dataset), ("lightretriever.hybrid", "smoke-ir")):
        status = learning.cell_status(cfg, system, dataset)
        assert status is not None and status[0] == learning.STATUS, system
        assert "lightretriever.sparse is worse than lightretriever's initial checkpoint" in status[1]
        assert "p (worse) " in status[1] and "-0.500" in status[1]
    assert learning.cell_status(cfg, "lightretriever.sparse", dataset, "ms") is None  # a time: not a result of learning
    for system in ("lightretriever", "lightretriever.base"):
        assert learning.cell_status(cfg, system, twin.dataset) is None, system
    assert "lightretriever.sparse" in learning.describe(v) and "lightretriever.base" not in learning.describe(v)
    dump(cfg, tmp_path / "cfg.yaml")
    assert learning.main(["--config", str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "l.csv")]) == 0
    rows = {r["system"]: r for r in _csv.DictReader(open(tmp_path / "l.csv", encoding="utf-8"))
            if r["model"] == "lightretriever"}
    assert rows["lightretriever"]["verdict"] == "learned" and rows["lightretriever"]["primary"] == "True"
    assert rows["lightretriever.sparse"]["system_check"] == "below its start: did not learn"
    assert rows["lightretriever.sparse"]["below_initial"] == "True"
    assert rows["lightretriever.base"]["system_check"] == "not significantly different from its start"


def test_a_claim_on_a_model_that_did_not_learn_is_no_evidence(tiny):
    """dpr-beats-bm25-top20 with DPR worse than its initial checkpoint: the claim's verdict is "did
    not learn" (not holds or fails), it leaves Holm's correction, and the row says which model."""
    from harness import claims as hclaims

    qs = [f"q{i}" for i in range(40)]
    _eval(tiny, "dpr", "dpr", {q: float(i % 2) for i, q in enumerate(qs)}, "Success@20")
    _eval(tiny, "dpr@init", "dpr", {q: float(i % 2 == 0 or i < 6) for i, q in enumerate(qs)}, "Success@20")
    _eval(tiny, "bm25", "bm25", {q: float(i % 3 == 0) for i, q in enumerate(qs)}, "Success@20")
    tiny = {**tiny, "learning": {**tiny["learning"], "measures": ["Success@20"]}}
    claims = [c for c in hclaims.load_claims() if c["id"] == "dpr-beats-bm25-top20"]
    rows = [hclaims.evaluate(tiny, c) for c in claims]
    assert rows[0]["holds"] == "true" and rows[0]["p"] not in (None, "")  # 0.5 > 0.35: it would hold
    assert "model dpr did not learn" in rows[0]["unlearned"]
    hclaims.verdicts(rows, claims)
    assert rows[0]["verdict"] == "did not learn" and "p_holm" not in rows[0]


def test_which_models_feed_a_figure_and_which_figures_a_failure_voids():
    cfg = load_config()
    assert learning.models_feeding(cfg, "dpr.bm25-m5", "smoke") == ["dpr"]  # re-ranks BM25's run with DPR
    assert learning.models_feeding(cfg, "bm25", "smoke") == []
    # a measure job reads several models; each figure is fed by those its name carries
    assert learning.models_feeding(cfg, "qcr.noent-usage-docs", "smoke-ir") == ["qcr.noent"]
    assert learning.models_feeding(cfg, "densephrases.nodistill-rc", "smoke") == ["densephrases.nodistill"]
    # a search reads the models behind its index and its runs, not the teachers its models trained with
    assert learning.models_feeding(cfg, "densephrases.qs", "smoke") == ["densephrases", "densephrases.qs"]
    assert learning.models_feeding(cfg, "densephrases.shared", "smoke") == ["densephrases.shared"]
    assert learning.models_feeding(cfg, "qcr.fig2-positive", "smoke-ir") == ["qcr"]
    # a time, a size, a rate or a speedup is the same whether the weights learned: only other figures are voided
    assert [learning.applies(u) for u in ("%", "ratio", "count", None, "ms", "s", "GB", "Q/s", "x")] == \
        [True, True, True, True, False, False, False, False, False]


def _figures(cfg, job_id: str, dataset: str, system: str, em: dict[str, bool]) -> None:
    """A measure job's figure file with each question's EM (as measure_rc writes it)."""
    folder = hp.path(cfg, hp.Ref("metrics", job_id, dataset))
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / f"{system}.json", {"values": {"em": {"value": sum(em.values()) / len(em), "unit": "ratio"}},
                                           "predictions": [{"id": q, "em": v, "f1": float(v)} for q, v in em.items()]})


def test_densephrases_is_checked_on_the_objective_every_variant_trains_for(tmp_path):
    """A DensePhrases model is compared with its initial checkpoint on reading comprehension too (each
    question against its gold passage: L_single, the one objective Table 6's "None" trains on), and
    learned if its search or its reading beats its start (Bonferroni over the two). As none-b48 on
    small (RC EM 8.2 % vs 0.5 % at init, its D_small search 0.271 vs 0.576): the model learned, its
    search cells say its search fell below its start, its RC cell is a result. As ci's main model
    (RC F1 0.062 vs 0.028, EM 1 % either way; search far above its start): learned. Neither: did not."""
    cfg = load_config(overrides={"results_dir": str(tmp_path), "learning": {"check": "all"}})
    model = "densephrases.none-b48"
    folder = hp.path(cfg, hp.Ref("model", model))
    folder.mkdir(parents=True)
    write_json(folder / "meta.json", {"learning": {"loss": {"first": 2.0, "last": 0.5, "steps": 96, "fell": True}}})
    (search,) = learning.twin_searches(cfg, model)
    ((rc, system),) = learning.objective_twins(cfg, model)
    assert (rc.id, system) == ("densephrases.rc@init", "densephrases.none-b48-rc")
    # none-b48 differs from the other variants in training alone: it is compared with the twin of the
    # first of them, whose systems carry that variant's name
    twin_sys = {j.stage: ts for j, ts, s, _ in learning.comparisons(cfg, model)}
    assert twin_sys["search"] != model and twin_sys["measure"] == twin_sys["search"] + "-rc"
    assert search.id == twin_sys["search"] + hp.INIT and len(learning.twin_searches(cfg, twin_sys["search"])) == 1
    assert hp.get(cfg).metric_jobs(system, "smoke")[0].id == "densephrases.rc"  # a twin writes no table's figure
    qs = [f"q{i}" for i in range(40)]
    hi, lo = {q: float(i % 4 > 0) for i, q in enumerate(qs)}, {q: float(i % 4 == 0) for i, q in enumerate(qs)}

    def check(search_trained, search_init, rc_trained, rc_init, alpha=0.05):
        _eval_at(cfg, model, search.dataset, model, search_trained, "Success@5")
        _eval_at(cfg, search.id, search.dataset, twin_sys["search"], search_init, "Success@5")
        _figures(cfg, "densephrases.rc", "smoke", system, rc_trained)
        _figures(cfg, rc.id, "smoke", twin_sys["measure"], rc_init)
        fresh = {**cfg, "learning": {**cfg["learning"], "alpha": alpha}}  # a fresh plan: nothing memoised
        return fresh, learning.verdict(fresh, model)

    c, v = check(lo, hi, hi, lo)
    assert v["learned"] is True and [(x["system"], x["measure"]) for x in v["init"]] == [(system, "f1"), (model, "Success@5")]
    assert math.isclose(v["init"][0]["diff"], 0.5) and v["init"][0]["queries"] == 40 and v["init"][1]["below_init"]
    assert v["init"][1]["start"] == f"{search.id}/{twin_sys['search']}" and "(" + v["init"][1]["start"] in learning.describe(v)
    status = learning.cell_status(c, model, search.dataset)
    assert status is not None and status[0] == learning.STATUS and f"worse than {model}'s initial checkpoint" in status[1]
    assert learning.cell_status(c, system, "smoke") is None
    folders = {str(f) for f in learning.required(c, system, "smoke")}
    assert {str(hp.path(c, hp.Ref("metrics", i, "smoke"))) for i in ("densephrases.rc", rc.id)} <= folders
    assert set(map(str, learning._compared_folders(c, model))) <= set(learning.required_all(c))

    c, v = check(hi, lo, hi, hi, alpha=0.049)  # reads no better than at its start, retrieves better
    assert v["learned"] is True and not v["init"][0]["beats_init"] and not v["init"][0]["below_init"]
    assert learning.cell_status(c, system, "smoke") is None and learning.cell_status(c, model, search.dataset) is None

    five = dict(lo)
    five.update(dict.fromkeys([q for q in qs if not lo[q]][:5], 1.0))  # 5 more queries right: p one-sided about 1/32
    c, v = check(five, lo, hi, hi, alpha=0.047)  # significant alone, not at 0.047 / 2 (two primary comparisons)
    assert v["init"][1]["beats_init"] and 0.0235 < v["init"][1]["p_one_sided"] < 0.047 and v["learned"] is False

    c, v = check(hi, hi, hi, hi, alpha=0.048)  # neither
    assert v["learned"] is False
    status = learning.cell_status(c, system, "smoke")
    assert status is not None and f"model {model} did not learn" in status[1] and "f1 on smoke" in status[1]


def test_models_that_start_from_one_checkpoint_share_one_twin(monkeypatch):
    """DensePhrases' variants differ in training only, so their initial checkpoints, D_small indexes and
    searches are one computation: on small, one twin stands for the 7 variant models of the main
    architecture; shared encoders (Share) and split vectors (DenSPI) start elsewhere, the main model
    (its own dump) too. So for BPR's train variants, SVDR's ablations, QCR's models of one K and
    LightRetriever's no-KL variant. A variant whose setting outside training differs gets its own twin."""
    monkeypatch.setenv("HARNESS_DATA_MIRROR", "/nonexistent")
    small = _plan(load_config(["configs/profiles/small.yaml"]))
    dp = {j.id: _of(j) for j in small.jobs.values() if j.stage == "search" and hp.INIT in j.id
          and j.method == "densephrases"}
    assert set(dp) == {"densephrases@init", "densephrases.denspi@init", "densephrases.shared@init", "densephrases.ib-b48@init"}
    assert len(dp["densephrases.ib-b48@init"]) == 7 and "densephrases.ref" in dp["densephrases.ib-b48@init"]
    assert ("train", "densephrases.ref@init", None) not in small.jobs and ("train", "densephrases.ib-b48@init", None) in small.jobs
    assert sum(1 for j in small.jobs.values() if j.stage == "index" and hp.INIT in j.id and j.method == "densephrases") == 4
    shared = {j.id: _of(j) for j in small.jobs.values() if j.stage == "search" and hp.INIT in j.id and len(_of(j)) > 1}
    assert {k: len(v) for k, v in shared.items()} == {  # variants that differ in training alone, method by method
        "bpr.a0@init": 8, "densephrases.ib-b48@init": 7, "lightretriever.nokl@init": 2, "qcr.grid-b0k0@init": 2,
        "qcr.noent@init": 3, "svdr.abl-m1@init": 6}
    assert "qcr.grid-b1k0" in shared["qcr.grid-b0k0@init"] and "qcr.grid-b1k1" in shared["qcr.noent@init"]  # K apart
    mains = {j.method for j in small.jobs.values() if j.stage == "search" and j.id == j.method + hp.INIT}
    assert mains >= {"bpr", "densephrases", "dpr", "lightretriever", "qcr", "svdr", "vdr"}  # each main model its own
    own = load_config(["configs/profiles/small.yaml"], overrides={"methods": {"densephrases": {"variants": {"ref": {"p_max_len": 128}}}}})
    p = _plan(own)
    assert ("search", "densephrases.ref@init", "squad-open") in p.jobs
    assert _of(p.job("search", "densephrases.ref@init", "squad-open")) == {"densephrases.ref"}
    assert len(_of(p.job("search", "densephrases.ib-b48@init", "squad-open"))) == 6
