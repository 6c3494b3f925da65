"""Claims as evidence (harness.claims.evidence / verdicts): the paired test over the queries both sides
share, its interval, Holm per paper, the verdict words, sizes exact, a constant side, and a side
without per-query values."""
from __future__ import annotations

import numpy as np
import pytest

from harness import claims
from harness.evaluate.run import PER_QUERY_SUFFIX, write_per_query
from harness.measured import Found


def _side(tmp_path, system: str, values: dict[str, float], measure: str = "Success@20") -> Found:
    folder = tmp_path / "eval" / "nq" / system
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{system}.json"
    path.write_text("{}")
    write_per_query(folder / f"{system}{PER_QUERY_SUFFIX}", {q: {measure: v} for q, v in values.items()})
    return Found(float(np.mean(list(values.values()))), path=path)


def _claim(op=">", factor=1.0, cid="c1", paper="svdr", rhs=None):
    return {"id": cid, "paper": paper, "op": op, "factor": factor, "statement": "s",
            "lhs": {"system": "a", "dataset": "NQ", "measure": "Success@20"},
            "rhs": rhs or {"system": "b", "dataset": "NQ", "measure": "Success@20"}}


def _row(claim, found):
    values = [f.value if f is not None else claim["rhs"]["value"] for f in found]
    holds = claims.OPS[claim["op"]](values[0], claim.get("factor", 1.0) * values[1])
    return {"claim_id": claim["id"], "paper": claim["paper"], "holds": "true" if holds else "false",
            **claims.evidence(claim, values, found)}


def test_a_clear_paired_difference_holds_and_its_opposite_fails(tmp_path):
    rng = np.random.default_rng(0)
    qs = [f"q{i}" for i in range(200)]
    better = {q: float(v) for q, v in zip(qs, rng.random(200) < 0.8, strict=True)}
    worse = {q: float(v) for q, v in zip(qs, rng.random(200) < 0.5, strict=True)}
    a, b = _side(tmp_path, "a", better), _side(tmp_path, "b", worse)
    up, down = _claim(">"), _claim("<", cid="c2")
    rows = [_row(up, [a, b]), _row(down, [a, b])]
    claims.verdicts(rows, [up, down])
    assert rows[0]["n"] == 200 and rows[0]["test"].startswith("paired sign-flip permutation")
    assert rows[0]["ci_low"] > 0 and rows[0]["diff"] == pytest.approx(a.value - b.value)
    assert rows[0]["verdict"] == "holds" and rows[1]["verdict"] == "fails"
    assert rows[0]["p_holm"] == pytest.approx(min(1.0, 2 * rows[0]["p"]))  # two tested claims of one paper
    assert 0 < rows[0]["mdd"] < 0.2


def test_a_small_difference_on_few_queries_is_not_significant(tmp_path):
    qs = [f"q{i}" for i in range(12)]
    a = _side(tmp_path, "a", {q: float(i % 2) for i, q in enumerate(qs)})
    b_vals = {q: float(i % 2) for i, q in enumerate(qs)}
    b_vals["q1"] = 0.0
    b = _side(tmp_path, "b", b_vals)
    c = _claim(">")
    rows = [_row(c, [a, b])]
    claims.verdicts(rows, [c])
    assert rows[0]["holds"] == "true" and rows[0]["verdict"] == "holds (not significant)"
    assert rows[0]["p"] == pytest.approx(1.0)  # one query differs: half the sign flips are as extreme


def test_factor_constant_side_sizes_and_missing_per_query_values(tmp_path):
    qs = [f"q{i}" for i in range(50)]
    a = _side(tmp_path, "a", {q: 1.0 for q in qs})
    c = _claim(">=", rhs={"value": 0.5})
    row = _row(c, [a, None])
    assert row["n"] == 50 and row["diff"] == pytest.approx(0.5) and row["p"] < 0.001
    sizes = _claim("<=", factor=0.2)
    row = _row(sizes, [Found(10.0, unit="B", path=tmp_path / "metrics" / "x.json"),
                       Found(100.0, unit="B", path=tmp_path / "metrics" / "y.json")])
    claims.verdicts([row], [sizes])
    assert row["verdict"] == "holds (exact)" and row["test"].startswith("exact")
    bare = tmp_path / "eval" / "nq" / "old" / "old.json"
    bare.parent.mkdir(parents=True)
    bare.write_text("{}")
    row = _row(_claim(">"), [a, Found(0.1, path=bare)])
    claims.verdicts([row], [_claim(">")])
    assert row["verdict"] == "holds (untested)" and "no per-query values" in row["test"]


def test_holm_runs_per_paper(tmp_path):
    rows = [{"claim_id": "x", "paper": "svdr", "holds": "true", "p": 0.01, "diff": 0.1},
            {"claim_id": "y", "paper": "svdr", "holds": "true", "p": 0.04, "diff": 0.1},
            {"claim_id": "z", "paper": "bpr", "holds": "true", "p": 0.04, "diff": 0.1}]
    claims.verdicts(rows, [{"id": i, "op": ">"} for i in "xyz"])
    assert [r["p_holm"] for r in rows] == pytest.approx([0.02, 0.04, 0.04])
    assert [r["verdict"] for r in rows] == ["holds", "holds", "holds"]


def test_effect_ratio_and_delta_ri_use_the_published_cells_the_matrix_maps():
    claim = next(c for c in claims.load_claims() if c["id"] == "dpr-beats-bm25-top20")
    assert claims.published_side("svdr", claim["lhs"]) == (pytest.approx(0.802), "Table 1 DPR / NQ top20 = 80.2%")
    got = claims.against_paper(claim, [0.70, 0.60])
    assert got["er"] == pytest.approx(0.10 / (0.802 - 0.629))
    assert got["dri"] == pytest.approx((0.802 - 0.629) / 0.629 - 0.10 / 0.60)
    assert "62.9%" in got["published"]
    sizes = next(c for c in claims.load_claims() if c["lhs"]["measure"].startswith("metric:"))
    assert claims.against_paper(sizes, [1.0, 2.0]) == {}


def test_a_metric_with_per_question_predictions_is_tested_paired(tmp_path):
    """The reader's EM lists each question's prediction and em: an EM claim is a paired test too."""
    import json

    def metrics(system, ems):
        path = tmp_path / "metrics" / "nq" / "reader.em" / f"{system}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"values": {"em": {"value": float(np.mean(ems))}},
                                    "predictions": [{"id": f"q{i}", "em": bool(e)} for i, e in enumerate(ems)]}))
        return Found(float(np.mean(ems)), unit="ratio", path=path)

    c = _claim(">")
    c["lhs"]["measure"] = c["rhs"]["measure"] = "metric:em"
    rng = np.random.default_rng(1)
    a, b = metrics("a", rng.random(150) < 0.6), metrics("b", rng.random(150) < 0.2)
    row = _row(c, [a, b])
    claims.verdicts([row], [c])
    assert row["n"] == 150 and row["test"].startswith("paired") and row["verdict"] == "holds"
    timing = Found(1.0, unit="s", path=tmp_path / "metrics" / "nq" / "x" / "t.json")
    row = _row(_claim("<"), [timing, timing])
    assert row["test"].startswith("none: a figure without per-query values or timed batches")


def test_per_question_timings_are_read_in_the_sides_base_unit(tmp_path):
    """BPR keeps each question's query time in ms; a claim side reads metrics in base units (s): the
    per-question values are converted, so the paired difference and its interval are in seconds."""
    import json

    def metrics(system, ms):
        path = tmp_path / "metrics" / "nq" / "bpr.efficiency" / f"{system}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        preds = [{"id": f"q{i}", "query_ms": float(v)} for i, v in enumerate(ms)]
        path.write_text(json.dumps({"values": {"query_ms": {"value": float(np.mean(ms)), "unit": "ms"}},
                                    "predictions": preds}))
        return Found(float(np.mean(ms)) / 1e3, unit="s", path=path)

    c = _claim("<")
    c["lhs"]["measure"] = c["rhs"]["measure"] = "metric:query_ms"
    rng = np.random.default_rng(2)
    fast, slow = metrics("a", rng.uniform(0.1, 0.2, 80)), metrics("b", rng.uniform(0.3, 0.4, 80))
    row = _row(c, [fast, slow])
    claims.verdicts([row], [c])
    assert row["n"] == 80 and row["verdict"] == "holds"
    assert row["diff"] == pytest.approx(fast.value - slow.value)
    assert -3e-4 < row["ci_low"] < row["ci_high"] < -1e-4


def _batched(tmp_path, system: str, num, den, unit: str = "Q/s") -> Found:
    """A throughput or speedup figure kept batch by batch (harness.figures.value's ``batches``)."""
    from harness import figures

    entry = figures.value(float(np.sum(num) / np.sum(den)), unit, "x", batches=(num, den))
    return Found(entry["value"], unit="", raw=entry, path=tmp_path / "metrics" / "d" / "j" / f"{system}.json")


def test_throughputs_kept_batch_by_batch_get_a_paired_interval(tmp_path):
    """Two systems timed on the same batches (DensePhrases' Q/s beside DPR + reader's): the interval
    of the difference resamples the batches of both sides together; the verdict reads it."""
    rng = np.random.default_rng(0)
    sizes = [64] * 12
    fast = _batched(tmp_path, "a", sizes, rng.uniform(0.10, 0.12, 12))     # ~580 Q/s
    slow = _batched(tmp_path, "b", sizes, rng.uniform(0.30, 0.36, 12))     # ~195 Q/s
    c = _claim(">")
    c["lhs"]["measure"] = c["rhs"]["measure"] = "metric:qps_cpu"
    row = _row(c, [fast, slow])
    claims.verdicts([row], [c])
    assert row["n"] == 12 and row["test"].startswith("paired percentile bootstrap over the 12 timed batches")
    assert row["ci_low"] < row["diff"] < row["ci_high"] and row["ci_low"] > 0 and row["verdict"] == "holds"
    assert row["diff"] == pytest.approx(fast.value - slow.value)
    # the same figures with batch times that overlap: an interval over 0, not significant
    close = _batched(tmp_path, "c", sizes, rng.uniform(0.08, 0.14, 12))
    row = _row(c, [fast, close])
    claims.verdicts([row], [c])
    assert row["ci_low"] < 0 < row["ci_high"] and row["verdict"].endswith("(not significant)")
    # one timed batch: no interval, said so
    row = _row(c, [_batched(tmp_path, "d", [63], [0.1]), _batched(tmp_path, "e", [63], [0.3])])
    claims.verdicts([row], [c])
    assert row["verdict"] == "holds (untested)" and "one timed batch" in row["test"]
    # sides timed on different batches are not paired
    row = _row(c, [fast, _batched(tmp_path, "f", [64] * 5, [0.3] * 5)])
    assert "different batches" in row["test"]


def test_a_speedup_against_a_constant_factor(tmp_path):
    """LightRetriever's speedup (full seconds / lookup seconds over the same batches) >= 100: the
    interval is of the ratio of sums minus the constant, its batches resampled in pairs."""
    rng = np.random.default_rng(1)
    full = rng.uniform(0.20, 0.30, 16)
    c = _claim(">=", rhs={"value": 100.0})
    c["lhs"]["measure"] = "metric:speedup_cpu"
    far = _batched(tmp_path, "a", full, full / rng.uniform(900, 1100, 16), unit="x")
    row = _row(c, [far, None])
    claims.verdicts([row], [c])
    assert row["verdict"] == "holds" and 800 < row["ci_low"] < row["diff"] < row["ci_high"] < 1000
    near = _batched(tmp_path, "b", full, full / rng.uniform(50, 150, 16), unit="x")
    row = _row(c, [near, None])
    claims.verdicts([row], [c])
    assert row["ci_low"] < 0 < row["ci_high"] and row["verdict"].endswith("(not significant)")


def test_a_figures_batches_must_add_up_to_its_value():
    from harness import figures

    assert figures.value(2.0, "x", batches=([2, 4], [1, 2]))["batches"] == {"num": [2.0, 4.0], "den": [1.0, 2.0]}
    with pytest.raises(ValueError, match="not the value"):
        figures.value(3.0, "x", batches=([2, 4], [1, 2]))
    with pytest.raises(ValueError, match="one pair per timed batch"):
        figures.value(2.0, "x", batches=([2, 4], [1]))


def _mean_side(tmp_path, system: str, per_set: dict[str, dict[str, float]], measure: str = "nDCG@10") -> Found:
    """A side whose label a mean over sets stands in for (harness.measured.find_mean's Found)."""
    parts = {}
    for dataset, values in per_set.items():
        folder = tmp_path / "eval" / dataset / system
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{system}.json").write_text("{}")
        write_per_query(folder / f"{system}{PER_QUERY_SUFFIX}", {q: {measure: v} for q, v in values.items()})
        parts[dataset] = Found(float(np.mean(list(values.values()))), path=folder / f"{system}.json")
    first = next(iter(parts.values()))
    return Found(float(np.mean([p.value for p in parts.values()])), path=first.path, parts=parts)


def test_a_mean_over_sets_is_tested_paired_stratified_by_set(tmp_path):
    """Each set weighs equally (the paper's BEIR average), not each query: the difference is the mean of
    the sets' mean differences, the exact sign-flip p-value weights each query 1 / (sets x its set's
    queries) (checked against all 2**6 flips, scipy's two-sided rule), the interval resamples within sets."""
    from itertools import product

    lhs = {"A": {"a1": 0.5, "a2": 0.6, "a3": 0.7, "a4": 0.8}, "B": {"b1": 0.2, "b2": 0.4}}
    rhs = {"A": {"a1": 0.4, "a2": 0.5, "a3": 0.5, "a4": 0.6}, "B": {"b1": 0.3, "b2": 0.2}}
    c = {**_claim(">"), "lhs": {"system": "a", "dataset": "BEIR", "measure": "nDCG@10"},
         "rhs": {"system": "b", "dataset": "BEIR", "measure": "nDCG@10"}}
    row = _row(c, [_mean_side(tmp_path, "a", lhs), _mean_side(tmp_path, "b", rhs)])
    assert row["n"] == 6 and "stratified by set" in row["test"] and "2 sets" in row["test"]
    assert row["diff"] == pytest.approx(0.10)          # (0.15 + 0.05) / 2; the pooled mean would be 0.1167
    d = np.array([0.1, 0.1, 0.2, 0.2, -0.1, 0.2])
    w = np.array([1 / 8] * 4 + [1 / 4] * 2)
    null = np.array([float(np.sum(np.array(s) * w * d)) for s in product([1.0, -1.0], repeat=6)])
    t, eps = float(np.sum(w * d)), 1e-12
    p = min(1.0, 2 * min(np.mean(null >= t - eps), np.mean(null <= t + eps)))
    assert row["p"] == pytest.approx(p)
    # within each set, resampled means stay in [min, max] of its differences: the mean over sets in [0, 0.2]
    assert 0.0 <= row["ci_low"] <= 0.10 <= row["ci_high"] <= 0.2
    one = {"A": lhs["A"], "B": {"b1": 0.2}}
    row = _row(c, [_mean_side(tmp_path / "x", "a", one), _mean_side(tmp_path / "x", "b", {"A": rhs["A"], "B": {"b1": 0.3}})])
    assert row["test"].startswith("none: a set with fewer than 2 queries")
