"""Fusion of runs (harness.fusion): weighted and unweighted reciprocal rank fusion against
hand-computed scores, and the weights' validation in fuse and fusion_job."""
from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.fusion import fuse, fusion_job

# q1: run A ranks a, b, c; run B ranks d, b, a (d and b tie on score 5.0: their list order is their rank)
# q2: a tie of the fused scores: z-tie is 33rd in A only, a-tie 2nd in B only: 0.6/93 = 0.4/62 = 1/155
A = {"q1": [("a", 3.0), ("b", 2.0), ("c", 1.0)],
     "q2": [(f"x{i:02d}", 100.0 - i) for i in range(1, 33)] + [("z-tie", 1.0)]}
B = {"q1": [("d", 5.0), ("b", 5.0), ("a", 1.0)],
     "q2": [("y01", 9.0), ("a-tie", 8.0)]}


def scores(run, qid):
    return dict(run[qid])


def test_weighted_rrf_by_hand():
    fused = fuse([A, B], "rrf", k=100, weights=[0.6, 0.4])
    # a: 0.6/61 + 0.4/63 = 0.0098361 + 0.0063492 = 0.0161853 (both runs)
    # b: 0.6/62 + 0.4/62 = 1/62 = 0.0161290
    # c: 0.6/63 = 0.0095238 (run A only)
    # d: 0.4/61 = 0.0065574 (run B only)
    assert [d for d, _ in fused["q1"]] == ["a", "b", "c", "d"]
    s = scores(fused, "q1")
    assert s["a"] == pytest.approx(0.6 / 61 + 0.4 / 63, rel=1e-12)
    assert s["b"] == pytest.approx(1 / 62, rel=1e-12)
    assert s["c"] == pytest.approx(0.6 / 63, rel=1e-12)
    assert s["d"] == pytest.approx(0.4 / 61, rel=1e-12)
    assert s["a"] == pytest.approx(0.0161853, abs=1e-7) and s["d"] == pytest.approx(0.0065574, abs=1e-7)


def test_weighted_rrf_ties_break_by_docid():
    fused = fuse([A, B], "rrf", k=100, weights=[0.6, 0.4])
    q2 = fused["q2"]
    s = dict(q2)
    assert s["z-tie"] == s["a-tie"] == pytest.approx(1 / 155, rel=1e-12)
    order = [d for d, _ in q2]
    assert order.index("a-tie") + 1 == order.index("z-tie")  # equal scores: doc id ascending
    assert s["y01"] == pytest.approx(0.4 / 61, rel=1e-12)
    assert order[0] == "x01" and s["x01"] == pytest.approx(0.6 / 61, rel=1e-12)
    assert len(q2) == 35


def test_weights_change_the_order_unweighted_is_plain_rrf():
    plain = fuse([A, B], "rrf", k=100)
    # a: 1/61 + 1/63 = 0.0322664; b: 2/62 = 0.0322581; d: 1/61 = 0.0163934; c: 1/63 = 0.0158730
    assert [d for d, _ in plain["q1"]] == ["a", "b", "d", "c"]
    assert scores(plain, "q1")["a"] == pytest.approx(1 / 61 + 1 / 63, rel=1e-12)
    assert fuse([A, B], "rrf", k=100, weights=None) == plain
    assert fuse([A, B], "rrf", k=100, weights=[1, 1]) == plain  # bit for bit, not approximately


def test_depth_and_k():
    fused = fuse([A, B], "rrf", k=2, depth=2, weights=[0.6, 0.4])
    # depth 2 keeps A: a, b and B: d, b (ranks unchanged; c and B's a are cut):
    # b = 1/62 = 0.0161290, a = 0.6/61 = 0.0098361, d = 0.4/61 = 0.0065574; k = 2 keeps b, a
    assert [d for d, _ in fused["q1"]] == ["b", "a"]
    assert scores(fused, "q1")["a"] == pytest.approx(0.6 / 61, rel=1e-12)


def test_three_runs_and_a_zero_weight():
    C = {"q1": [("c", 1.0)], "q2": [("x01", 1.0)]}
    fused = fuse([A, B, C], "rrf", k=100, weights=[0.6, 0.4, 0.0])
    assert fused == fuse([A, B], "rrf", k=100, weights=[0.6, 0.4])
    fused = fuse([A, B, C], "rrf", k=100, weights=[0.6, 0.4, 2])
    assert scores(fused, "q1")["c"] == pytest.approx(0.6 / 63 + 2 / 61, rel=1e-12)


@pytest.mark.parametrize("weights, match", [
    ([0.6], "1 rrf weights for 2 runs"),
    ([0.6, 0.4, 0.1], "3 rrf weights for 2 runs"),
    ([0.6, -0.1], "-0.1 is not a finite number >= 0"),
    ([0, 0.0], "all rrf weights are 0"),
    ([0.5, float("nan")], "nan"),
    ([0.5, "1"], "'1'"),
    ("0.5", "list of numbers"),
])
def test_bad_weights_are_refused(weights, match):
    with pytest.raises(ConfigError, match=match):
        fuse([A, B], "rrf", k=10, weights=weights)
    with pytest.raises(ConfigError, match=f"system qcr-hybrid: .*{match}"):
        fusion_job("qcr-hybrid", "qcr", "nq", ["qcr-codes", "qcr-dense"], "rrf", weights=weights)


def test_weights_are_rrf_only():
    with pytest.raises(ConfigError, match="rrf fusion only"):
        fuse([A, B], "interpolate", k=10, weights=[0.5, 0.5])


def test_fusion_job_carries_weights_as_a_param():
    job = fusion_job("qcr-hybrid", "qcr", "nq", ["qcr-codes", "qcr-dense"], "rrf", weights=[3, 1], rrf_k=60)
    assert job.params == {"how": "rrf", "runs": ["qcr-codes", "qcr-dense"], "weights": [3.0, 1.0], "rrf_k": 60}
    plain = fusion_job("qcr-hybrid", "qcr", "nq", ["qcr-codes", "qcr-dense"], "rrf")
    assert "weights" not in plain.params  # unweighted jobs hash as before


def test_a_fusion_job_counts_its_queries_for_its_cost(tmp_path):
    """run_fusion reports the fused run's queries (the union of its runs'): meta.json's cost is then
    per query, as a search's is (python -m harness estimate prices the profile's queries from it)."""
    from types import SimpleNamespace

    from harness import cost
    from harness.fusion import run_fusion
    from harness.runs import read_run, write_run

    job = fusion_job("qcr-hybrid", "qcr", "nq", ["qcr-codes", "qcr-dense"], "rrf")
    for i, (system, run) in enumerate((("qcr-codes", A), ("qcr-dense", {**B, "q3": [("e", 1.0)]}))):
        (tmp_path / f"r{i}").mkdir()
        write_run(tmp_path / f"r{i}" / f"{system}.trec", run, system)
    (tmp_path / "out").mkdir()
    info = run_fusion(SimpleNamespace(cfg={"evaluate": {"depth": 10}}), job,
                      {"run_0": tmp_path / "r0", "run_1": tmp_path / "r1"}, tmp_path / "out")
    assert info["queries"] == 3 == len(read_run(tmp_path / "out" / "qcr-hybrid.trec"))
    cost.allow_fallbacks(False)
    rec = cost.record("search", info, 0.3)
    assert rec["unit"] == "query" and rec["seconds_per_unit"] == pytest.approx(0.1)
