"""``datasets.<key>.relevance: gold``: a QA dataset judged by its gold passages (qrels) instead of
answer strings — the qrels prepare writes, evaluate_run's measures, errors, the default unchanged."""
from __future__ import annotations

import pytest

from harness.config import load_config
from harness.datasets import prepare, store
from harness.errors import ConfigError, DataError
from harness.evaluate.run import evaluate_run
from harness.io import write_jsonl
from harness.methods.base import Context
from harness.runs import write_run

SMOKE_IR = {"id": "harness:smoke", "family": "smoke", "relevance": "gold"}


def _cfg(tmp_path, **evaluate):
    over = {"results_dir": str(tmp_path / "results"), "datasets": {"smoke-ir": SMOKE_IR}}
    if evaluate:
        over["evaluate"] = evaluate
    return load_config([], overrides=over)


def _prepared(cfg, key):
    folder = Context(cfg, "bm25", key).data_dir()
    folder.mkdir(parents=True)
    return prepare(key, cfg["datasets"][key], cfg, folder), folder


def test_config_accepts_relevance_and_refuses_other_values(tmp_path):
    assert _cfg(tmp_path)["datasets"]["smoke-ir"]["relevance"] == "gold"
    with pytest.raises(ConfigError, match="relevance"):
        load_config([], overrides={"datasets": {"smoke-ir": {**SMOKE_IR, "relevance": "answer"}}})
    with pytest.raises(ConfigError, match="datasets.x.relevance: 'both'"):
        prepare("x", {**SMOKE_IR, "relevance": "both"}, {}, tmp_path)


def test_gold_qrels_are_the_test_queries_gold_ids(tmp_path):
    cfg = _cfg(tmp_path)
    meta, folder = _prepared(cfg, "smoke-ir")
    test = store.read_queries(folder, "test")
    assert len(test) == 63
    want = {q.id: {g: 1 for g in q.gold} for q in test}
    assert store.read_qrels(folder / store.QRELS) == want
    assert meta["relevance"] == "gold" and meta["qrels"] == 63 and meta["queries_without_gold"] == 0
    assert meta["documents"] == 122  # the family's own meta is kept


def test_queries_without_gold_are_counted_and_left_out(tmp_path, monkeypatch):
    from harness.datasets import smoke

    real = smoke.prepare

    def fewer_gold(key, dcfg, cfg, out):  # the family writes two test queries without gold ids
        meta = real(key, dcfg, cfg, out)
        qs = store.read_queries(out, "test")
        store.write_queries(out, "test", [q._replace(gold=None) if i < 2 else q for i, q in enumerate(qs)])
        return meta

    monkeypatch.setattr(smoke, "prepare", fewer_gold)
    cfg = _cfg(tmp_path)
    meta, folder = _prepared(cfg, "smoke-ir")
    test = store.read_queries(folder, "test")
    assert (meta["qrels"], meta["queries_without_gold"]) == (61, 2)
    assert set(store.read_qrels(folder / store.QRELS)) == {q.id for q in test[2:]}


def test_no_gold_at_all_is_a_data_error(tmp_path):
    write_jsonl(tmp_path / store.queries_file("test"), [{"id": "1", "text": "q", "answers": ["a"]}] * 3)
    from harness.datasets import write_gold_qrels

    with pytest.raises(DataError, match="dataset smoke-ir: none of its 3 test queries has gold"):
        write_gold_qrels("smoke-ir", tmp_path)


def _hand_run(folder, path):
    """Per test query, in file order: i % 3 == 0 gold first; 1 a non-gold passage then gold; 2 only
    non-gold passages. Success@1 = 21/63 = 1/3, RR@10 = (21 * 1 + 21 * 1/2 + 21 * 0) / 63 = 1/2."""
    test = store.read_queries(folder, "test")
    docs = [d.id for d in store.iter_corpus(folder)]
    run = {}
    for i, q in enumerate(test):
        wrong = [d for d in docs if d not in q.gold][:3]
        run[q.id] = ([(q.gold[0], 3.0)] if i % 3 == 0 else
                     [(wrong[0], 3.0), (q.gold[0], 2.0)] if i % 3 == 1 else
                     [(wrong[0], 3.0), (wrong[1], 2.0), (wrong[2], 1.0)])
    write_run(path, run, tag="hand")
    return test


def test_evaluate_uses_gold_qrels_not_answers(tmp_path):
    cfg = _cfg(tmp_path, ir_measures=["Success@1", "RR@10"])
    _, folder = _prepared(cfg, "smoke-ir")
    test = _hand_run(folder, tmp_path / "run.trec")
    assert len(test) == 63
    res = evaluate_run(cfg, "smoke-ir", tmp_path / "run.trec")
    assert res["relevance"] == "gold"
    assert "answer_rule" not in res
    assert res["measures"] == pytest.approx({"Success@1": 1 / 3, "RR@10": 1 / 2}, abs=1e-12)
    # no answer-based accuracy: none of the qa_cutoffs' Success@k beyond the ir_measures
    assert set(res["measures"]) == {"Success@1", "RR@10"}


def test_evaluate_gold_without_qrels_fails(tmp_path):
    cfg = _cfg(tmp_path, ir_measures=["Success@1"])
    _, folder = _prepared(cfg, "smoke-ir")
    _hand_run(folder, tmp_path / "run.trec")
    (folder / store.QRELS).unlink()
    with pytest.raises(DataError, match="relevance is gold"):
        evaluate_run(cfg, "smoke-ir", tmp_path / "run.trec")


def test_default_relevance_is_unchanged(tmp_path):
    cfg = _cfg(tmp_path)
    assert "relevance" not in cfg["datasets"]["smoke"]
    meta, folder = _prepared(cfg, "smoke")
    assert not {"relevance", "qrels", "queries_without_gold"} & set(meta)
    _hand_run(folder, tmp_path / "run.trec")
    res = evaluate_run(cfg, "smoke", tmp_path / "run.trec")
    assert "relevance" not in res
    assert res["answer_rule"] == "dpr-string"  # answer-string top-k accuracy, as before
    assert {f"Success@{k}" for k in cfg["evaluate"]["qa_cutoffs"]} <= set(res["measures"])


@pytest.mark.parametrize("key, dcfg", [("smoke", {"id": "harness:smoke", "family": "smoke"}),  # answers + qrels
                                       ("smoke-ir", SMOKE_IR)])                                   # gold qrels only
def test_per_query_values_average_to_every_aggregate(tmp_path, key, dcfg):
    """Every measure kind (answer-string Success@k, ir_measures over qrels) keeps its per-query values,
    and their mean is the aggregate the eval JSON reports; the file round-trips byte-stably."""
    import random

    from harness.evaluate.run import read_per_query, write_per_query

    cfg = load_config([], overrides={"results_dir": str(tmp_path / "results"), "datasets": {key: dcfg},
                                     "evaluate": {"ir_measures": ["nDCG@10", "RR@10", "R@100"], "qa_cutoffs": [1, 5, 20]}})
    _, folder = _prepared(cfg, key)
    docs = [d.id for d in store.iter_corpus(folder)]
    rng = random.Random(3)
    run = {q.id: [(d, 1.0 / (i + 1)) for i, d in enumerate(rng.sample(docs, 30) + list(q.gold or [])[:1])]
           for q in store.read_queries(folder, "test")}
    run_path = tmp_path / "r.trec"
    write_run(run_path, run, tag="t")
    per_query: dict = {}
    res = evaluate_run(cfg, key, run_path, per_query=per_query)
    kinds = {m for vals in per_query.values() for m in vals}
    assert kinds == set(res["measures"]) and len(kinds) >= 3
    for m, agg in res["measures"].items():
        vals = [v[m] for v in per_query.values() if m in v]
        assert vals and sum(vals) / len(vals) == pytest.approx(agg, abs=1e-12), m
    if key == "smoke":
        assert {m for m in kinds if m.startswith("Success@")} == {"Success@1", "Success@5", "Success@20"}
        assert all(v in (0.0, 1.0) for vals in per_query.values() for m, v in vals.items() if m.startswith("Success@"))
    f1, f2 = tmp_path / "a.perquery.tsv.gz", tmp_path / "b.perquery.tsv.gz"
    write_per_query(f1, per_query)
    write_per_query(f2, per_query)
    assert f1.read_bytes() == f2.read_bytes() and read_per_query(f1) == per_query
