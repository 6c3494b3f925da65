"""harness.stats against exact enumeration, hand-computed cases, a coverage simulation and the
repro_eval package (Breuer et al.'s reference implementation of ER and ΔRI)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from harness import stats


def test_permutation_p_equals_exact_sign_flip_enumeration():
    rng = np.random.default_rng(7)
    x = rng.normal(0.4, 1.0, 9)
    y = rng.normal(0.0, 1.0, 9)
    d = x - y
    obs = abs(d.mean())
    flips = [abs((d * np.array(s)).mean()) for s in itertools.product((1, -1), repeat=d.size)]
    exact = np.mean([f >= obs - 1e-12 for f in flips])
    assert stats.paired_test(x, y) == pytest.approx(exact, abs=1e-12)
    assert stats.paired_test(y, x) == pytest.approx(exact, abs=1e-12)  # two-sided: symmetric


def test_permutation_test_monte_carlo_is_seeded_and_close_to_the_t_test_on_normal_data():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.2, 1.0, 200), rng.normal(0.0, 1.0, 200)
    p1, p2 = stats.paired_test(x, y, seed=1), stats.paired_test(x, y, seed=1)
    assert p1 == p2
    from scipy.stats import ttest_rel

    assert stats.paired_test(x, y, "t") == pytest.approx(ttest_rel(x, y).pvalue)
    assert abs(p1 - stats.paired_test(x, y, "t")) < 0.02


def test_identical_sides_give_p_one_and_bad_input_is_refused():
    assert stats.paired_test([0.1, 0.5, 1.0], [0.1, 0.5, 1.0]) == 1.0
    assert stats.paired_test([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], "t") == 0.0
    with pytest.raises(ValueError, match="one length"):
        stats.paired_test([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="unknown paired test"):
        stats.paired_test([1, 2, 3], [0, 2, 3], "wilcoxon")


def test_bootstrap_interval_covers_a_known_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(11)
    hits = 0
    reps = 300
    for r in range(reps):
        lo, hi = stats.bootstrap_ci(rng.normal(0.3, 1.0, 40), n_resamples=1000, seed=r)
        hits += lo <= 0.3 <= hi
    assert 0.89 <= hits / reps <= 0.98, hits / reps


def test_bootstrap_of_a_ratio_of_two_samples_and_of_a_constant():
    rng = np.random.default_rng(5)
    a, b = rng.normal(10.0, 0.5, 30), rng.normal(5.0, 0.25, 30)
    lo, hi = stats.bootstrap_ci((a, b), lambda u, v, axis: u.mean(axis) / v.mean(axis), n_resamples=2000)
    assert lo < a.mean() / b.mean() < hi and 1.8 < lo < hi < 2.2
    assert stats.bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)


def test_holm_against_a_hand_computed_case():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 -> max-so-far 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    out = stats.holm([0.01, math.nan])
    assert out[0] == pytest.approx(0.01) and math.isnan(out[1])


def test_min_detectable_difference():
    # (t_0.975,99 + t_0.8,99) / sqrt(100) = (1.98422 + 0.84527) / 10 (t tables)
    assert stats.min_detectable_difference(1.0, 100) == pytest.approx(0.282949, abs=1e-5)
    assert stats.min_detectable_difference(2.0, 100) == pytest.approx(2 * 0.282949, abs=1e-5)
    assert stats.min_detectable_difference(1.0, 1) == math.inf


def test_effect_ratio_and_delta_ri_match_repro_eval():
    repro = pytest.importorskip("repro_eval.measure.overall_effects")
    rng = np.random.default_rng(2)
    topics = [f"q{i}" for i in range(25)]

    def run(mu):
        return {t: {"ndcg": float(v)} for t, v in zip(topics, np.clip(rng.normal(mu, 0.2, len(topics)), 0, 1),
                                                      strict=True)}

    ob, oa, rb, ra = run(0.40), run(0.50), run(0.38), run(0.44)

    def mean(r):
        return float(np.mean([v["ndcg"] for v in r.values()]))

    er = repro.ER(oa, ob, ra, rb)["ndcg"]
    dri = repro.DRI(oa, ob, ra, rb)["ndcg"]
    assert stats.effect_ratio(mean(ob), mean(oa), mean(rb), mean(ra)) == pytest.approx(er)
    assert stats.delta_ri(mean(ob), mean(oa), mean(rb), mean(ra)) == pytest.approx(dri)
    # the definitions by hand: improvement 0.1 published, 0.05 reproduced
    assert stats.effect_ratio(0.4, 0.5, 0.4, 0.45) == pytest.approx(0.5)
    assert stats.delta_ri(0.4, 0.5, 0.4, 0.45) == pytest.approx(0.25 - 0.125)
    assert math.isnan(stats.effect_ratio(0.4, 0.4, 0.3, 0.5)) and math.isnan(stats.delta_ri(0.0, 0.4, 0.3, 0.5))


def test_paired_bootstrap_keeps_each_batch_whole():
    """A ratio of sums over batches whose every ratio is 2 is 2 under any paired resampling: the paired
    interval is the point; resampling the two arrays separately (unpaired) spreads it."""
    rng = np.random.default_rng(3)
    den = rng.uniform(0.5, 1.5, 30)
    num = 2 * den
    ratio = lambda a, b, axis: a.sum(axis) / b.sum(axis)  # noqa: E731
    lo, hi = stats.bootstrap_ci((num, den), ratio, paired=True)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)
    lo, hi = stats.bootstrap_ci((num, den), ratio)
    assert lo < 1.9 and hi > 2.1
    with pytest.raises(ValueError, match="one length"):
        stats.bootstrap_ci((num, den[:5]), ratio, paired=True)
