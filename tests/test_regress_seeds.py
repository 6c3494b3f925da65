"""`python -m harness regress --record --seeds N`: tolerances derived from measured spreads."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from harness import regress
from harness.config import load_config, validate


def test_tolerance_rule_by_hand():
    # seeds 0.36, 0.38, 0.34: sample sd 0.02 -> 3 sd = 0.06; n 2,351: SE sqrt(.36*.64/2351) = 0.0099
    sp = regress.tolerance([0.36, 0.38, 0.34], 2351, deterministic=False)
    assert sp["sd"] == pytest.approx(0.02) and sp["se"] == pytest.approx(math.sqrt(0.36 * 0.64 / 2351), abs=1e-5)
    assert sp["tol"] == 0.06
    # a tight spread: the binomial SE at n decides (0.0099 -> 0.01)
    assert regress.tolerance([0.36, 0.3601, 0.3599], 2351, deterministic=False)["tol"] == 0.01
    # a value of 0 on 200 questions still gets one question's SE: sqrt(0.005 * 0.995 / 200) = 0.00499 -> 0.005
    assert regress.tolerance([0.0, 0.0, 0.0], 200, deterministic=False)["tol"] == 0.005
    # deterministic values keep a tight tolerance whatever n
    assert regress.tolerance([0.8952] * 3, 1000, deterministic=True)["tol"] == 0.001
    # a metric: fraction over n questions (a reader's EM on 200) gets the SE too
    assert regress.tolerance([0.0, 0.01, 0.0], 200, deterministic=False, metric=True)["tol"] == 0.018
    # metric: values without n: 3 sd, at least 0.1 % of the value
    assert regress.tolerance([0.048, 0.048, 0.048], None, deterministic=False, metric=True)["tol"] == 0.001
    assert regress.tolerance([1000.0, 1010.0, 990.0], None, deterministic=False, metric=True)["tol"] == 30.0


def test_spread_note_replaces_the_old_clause():
    sp = regress.tolerance([0.36, 0.38, 0.34], 2351, deterministic=False)
    note = regress._spread_note("DPR, 1 epoch (CPU, seeded); tolerance covers thread-order float differences",
                                [13, 14, 15], [0.36, 0.38, 0.34], sp, 2351, False)
    assert note.startswith("DPR, 1 epoch (CPU, seeded) | seeds 13/14/15: 0.3600, 0.3800, 0.3400 (sd 0.0200")
    assert "thread-order" not in note and "n 2,351 queries" in note and note.endswith("-> tol 0.06")
    again = regress._spread_note(note, [13, 14, 15], [0.36, 0.38, 0.34], sp, 2351, False)
    assert again == note  # re-recording replaces the spread, it does not stack
    bare = regress._spread_note(None, [13, 14], [0.5, 0.5], regress.tolerance([0.5, 0.5], 63, True), 63, True)
    assert bare.startswith("seeds 13/14: 0.5000, 0.5000; deterministic")
    assert regress._spread_note(bare, [13, 14], [0.5, 0.5], regress.tolerance([0.5, 0.5], 63, True), 63, True) == bare


def test_record_seeds_writes_values_spreads_and_valid_yaml(tmp_path, monkeypatch):
    cfg = load_config([])
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump({"profile": "smoke", "values": [
        {"key": "smoke/bm25/Success@20", "value": 0.5, "tol": 0.005, "note": "BM25"},
        {"key": "smoke/dpr/Success@20", "value": 0.5, "tol": 0.03, "note": "DPR; tolerance covers thread-order float differences"},
        {"key": "smoke/qcr/Success@20", "value": 0.1, "tol": 0.03, "note": "kept as it is"}]}))
    monkeypatch.setattr(regress, "expected_path", lambda profile: path)
    measured = {("bm25", 13): 0.7, ("bm25", 14): 0.7, ("bm25", 15): 0.7,
                ("dpr", 13): 0.40, ("dpr", 14): 0.44, ("dpr", 15): 0.42}
    monkeypatch.setattr(regress, "lookup", lambda c, key: measured[(key.split("/")[1], c["seed"])])
    monkeypatch.setattr(regress, "_queries", lambda c, key: 63)
    monkeypatch.setattr(regress, "_source_hash", lambda c, key: "same" if "bm25" in key else str(c["seed"]))
    out = regress.record_seeds([], cfg, ["smoke/bm25/Success@20", "smoke/dpr/Success@20"], 3, run=False)
    text = out.read_text()
    assert "&id" not in text and "seeds: [13, 14, 15]" in text   # no YAML anchors; a spread on one line
    doc = yaml.safe_load(text)
    validate(doc, "expected", source=str(out))
    by = {e["key"]: e for e in doc["values"]}
    assert [e["key"] for e in doc["values"]] == ["smoke/bm25/Success@20", "smoke/dpr/Success@20", "smoke/qcr/Success@20"]
    assert by["smoke/bm25/Success@20"]["tol"] == 0.001 and by["smoke/bm25/Success@20"]["spread"]["deterministic"]
    dpr = by["smoke/dpr/Success@20"]
    assert dpr["value"] == 0.40 and dpr["spread"]["values"] == [0.40, 0.44, 0.42] and dpr["spread"]["seeds"] == [13, 14, 15]
    # sd 0.02 -> 0.06; SE at n 63: sqrt(.4*.6/63) = 0.0617 -> tol 0.062
    assert dpr["tol"] == 0.062 and dpr["spread"]["n"] == 63
    assert by["smoke/qcr/Success@20"] == {"key": "smoke/qcr/Success@20", "value": 0.1, "tol": 0.03, "note": "kept as it is"}


def test_link_unchanged_links_only_what_no_seed_changes(tmp_path):
    """A seed changes the trained models and everything after them; data and BM25 are linked."""
    from harness import plan as hplan
    from harness.io import write_json

    base = {**load_config([]), "results_dir": str(tmp_path / "r")}
    other = regress.seed_config(base, base["seed"] + 1)
    assert other["results_dir"] == f"{base['results_dir']}/seed-{base['seed'] + 1}"
    pb = hplan.get(base)
    made = {}
    for stage, kind in (("train", "model"), ("search", "run")):
        for job in pb.concrete(stage):
            ref = hplan.Ref(kind, job.id, None if stage == "train" else job.dataset)
            folder = hplan.path(base, ref)
            folder.mkdir(parents=True)
            write_json(folder / "meta.json", {"config_hash": pb.hash(job)})
            (folder / "payload").write_text(job.id)
            made[(kind, job.id, ref.dataset)] = folder
    negatives = hplan.path(base, hplan.Ref("negatives", None, "smoke"))   # a file artifact with its meta beside it
    negatives.parent.mkdir(parents=True)
    negatives.write_text("{}\n")
    Path(f"{negatives}.meta.json").write_text("{}")
    linked = {str(p) for p in regress.link_unchanged(base, other)}
    moved = hplan.path(other, hplan.Ref("negatives", None, "smoke"))
    assert str(moved) in linked and Path(f"{moved}.meta.json").exists()
    po = hplan.get(other)
    assert linked
    for (kind, id_, ds), folder in made.items():
        dst = hplan.path(other, hplan.Ref(kind, id_, ds))
        job = pb.job("train" if kind == "model" else "search", id_, ds)
        same = pb.hash(job) == po.hash(job)
        assert (str(dst) in linked) == same, (kind, id_, ds)
    assert any(k[1] == "bm25" for k in made) and all(
        str(hplan.path(other, hplan.Ref(k, i, d))) in linked for (k, i, d) in made if i == "bm25")
    assert not any(str(hplan.path(other, hplan.Ref("model", i, None))) in linked for (k, i, _) in made
                   if k == "model")


def test_questions_of_a_metric_fraction_from_its_description():
    q = regress._QUESTIONS
    assert q.search("reader EM over the top 20 passages; a seeded sample of 200 of 2351 test questions").group(1) == "200"
    assert q.search("top-1 phrase F1 (SQuAD v1.1); 2,351 test questions").group(1) == "2,351"
    assert q.search("token index bytes / embedding index bytes") is None
