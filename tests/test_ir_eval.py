"""qrels-based evaluation (harness.evaluate.ir) against values computed by hand."""
from __future__ import annotations

import math

import pytest

from harness.errors import ConfigError
from harness.evaluate.ir import evaluate, parse_measures

MEASURES = ["nDCG@10", "R@100", "RR@10", "P@5"]

# Three queries; graded relevance for q1. Scores descend in the listed order (no ties).
QRELS = {
    "q1": {"d1": 1, "d2": 2, "d5": 1, "d4": 0},   # d4 judged non-relevant
    "q2": {"d3": 1},
    "q3": {"d9": 1},
}
RUN = {
    "q1": {"d1": 10.0, "d3": 9.0, "d2": 8.0, "d4": 7.0, "d6": 6.0},   # ranks: d1 d3 d2 d4 d6
    "q2": {"d7": 5.0, "d8": 4.0, "d3": 3.0},                          # ranks: d7 d8 d3
    "q3": {"d1": 1.0, "d2": 0.5},                                     # nothing relevant
}

# Hand computation (trec_eval conventions: gain = relevance grade, discount log2(rank + 1),
# the ideal ranking sorts every judged relevant document of the qrels, retrieved or not).
#
# nDCG@10
#   q1: DCG = 1/log2(2) [d1, rank 1] + 2/log2(4) [d2, rank 3] = 1 + 1 = 2
#       IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.6309298 + 0.5 = 3.1309298
#       nDCG = 2 / 3.1309298 = 0.6387879
#   q2: DCG = 1/log2(4) = 0.5 [d3, rank 3]; IDCG = 1; nDCG = 0.5
#   q3: 0
#   mean = (0.6387879 + 0.5 + 0) / 3 = 0.3795960
# R@100: q1 2 of 3 relevant (d5 never retrieved) = 2/3; q2 1/1; q3 0/1 -> mean 5/9 = 0.5556
# RR@10: q1 first relevant at rank 1 -> 1; q2 at rank 3 -> 1/3; q3 -> 0 -> mean 4/9 = 0.4444
# P@5:   q1 d1, d2 relevant in top 5 -> 2/5; q2 only 3 retrieved, 1 relevant -> 1/5 (trec_eval
#        divides by the cutoff); q3 0 -> mean (0.4 + 0.2 + 0) / 3 = 0.2
NDCG_Q1 = 2 / (2 + 1 / math.log2(3) + 0.5)
EXPECTED = {
    "nDCG@10": (NDCG_Q1 + 0.5 + 0.0) / 3,
    "R@100": (2 / 3 + 1 + 0) / 3,
    "RR@10": (1 + 1 / 3 + 0) / 3,
    "P@5": (0.4 + 0.2 + 0) / 3,
}


def test_hand_values_are_what_the_comments_say():
    assert NDCG_Q1 == pytest.approx(0.6387879, abs=1e-7)
    assert EXPECTED["nDCG@10"] == pytest.approx(0.3795960, abs=1e-7)


def test_evaluate_matches_hand_computation():
    out = evaluate(QRELS, RUN, MEASURES)
    assert set(out) == set(MEASURES)
    for name, value in EXPECTED.items():
        assert out[name] == pytest.approx(value, abs=1e-9), name
        assert isinstance(out[name], float)


def test_output_keys_are_ir_measures_strings_in_order():
    out = evaluate(QRELS, RUN, MEASURES)
    assert list(out) == MEASURES
    # a measure written with parameters is printed back the same way ir_measures prints it
    [m] = parse_measures(["nDCG@10"])
    assert str(m) == "nDCG@10"


def test_cutoffs_matter():
    # one query, the only relevant document at rank 11
    qrels = {"q": {"rel": 1}}
    run = {"q": {f"n{i}": 100.0 - i for i in range(10)} | {"rel": 50.0, "n10": 40.0}}
    out = evaluate(qrels, run, ["nDCG@10", "RR@10", "P@5", "R@100", "R@10"])
    # nDCG@10, RR@10, P@5, R@10: the relevant document is outside the cutoff -> 0; R@100 -> 1
    assert out == pytest.approx({"nDCG@10": 0.0, "RR@10": 0.0, "P@5": 0.0, "R@100": 1.0, "R@10": 0.0})


def test_run_scores_not_dict_order_decide_ranks():
    # same documents, listed in the reverse of the score order
    qrels = {"q": {"b": 1}}
    run = {"q": {"a": 1.0, "b": 3.0, "c": 2.0}}   # ranks: b c a
    out = evaluate(qrels, run, ["RR@10", "P@1"])
    assert out == pytest.approx({"RR@10": 1.0, "P@1": 1.0})


def test_parse_measures_ok():
    ms = parse_measures(["nDCG@10", "R@100", "RR@10", "P@5", "Success@100"])
    assert [str(m) for m in ms] == ["nDCG@10", "R@100", "RR@10", "P@5", "Success@100"]
    assert parse_measures([]) == []


@pytest.mark.parametrize("bad", ["nDCG@@10", "Foo@3", "R@", "nDCG@10x"])
def test_parse_measures_invalid_name_raises_config_error(bad):
    with pytest.raises(ConfigError) as exc:
        parse_measures(["nDCG@10", bad])
    assert repr(bad) in str(exc.value)
    assert "evaluate.ir_measures" in str(exc.value)


def test_evaluate_with_invalid_measure_raises_config_error():
    with pytest.raises(ConfigError, match="Foo@3"):
        evaluate(QRELS, RUN, ["nDCG@10", "Foo@3"])
