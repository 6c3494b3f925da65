"""Statistics for claims: paired tests over the same queries, bootstrap intervals, Holm's
correction, the minimum detectable difference, and Breuer et al.'s reproducibility measures.

Usable without Snakemake or a config: every function takes arrays (one value per query, in the same
query order on both sides of a paired comparison) and returns plain floats.

- :func:`paired_test`: the two-sided p-value of the mean paired difference ``x - y``: a sign-flip
  permutation test (``scipy.stats.permutation_test`` with ``permutation_type="samples"``: exact
  when ``2**n <= n_resamples``, Monte Carlo with a fixed seed otherwise) or the paired t-test
  (``scipy.stats.ttest_rel``).
- :func:`bootstrap_ci`: the percentile bootstrap interval of a statistic (``scipy.stats.bootstrap``),
  one sample (the paired differences), independent samples (two systems measured on different
  queries) or paired samples (a ratio of sums over the same timed batches).
- :func:`holm`: Holm–Bonferroni adjusted p-values. Written here (eight lines) because scipy has
  only Benjamini–Hochberg (``false_discovery_control``) and statsmodels is not worth a dependency
  for it; checked against a hand-computed case in tests/test_stats.py.
- :func:`min_detectable_difference`: the smallest true mean difference a paired t-test at ``alpha``
  detects with probability ``power`` given the differences' standard deviation and n.
- :func:`effect_ratio` and :func:`delta_ri`: Breuer et al. (SIGIR 2020), from aggregates (the mean of
  per-topic scores; the papers publish no per-topic runs): ER = reproduced mean improvement /
  original mean improvement; ΔRI = RI_orig − RI_rep with RI = (advanced − baseline) / baseline, as
  the ``repro_eval`` package computes them (tested against it).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: the defaults a claim's test uses unless it says otherwise (recorded beside every verdict)
N_RESAMPLES = 10_000
SEED = 0
CONFIDENCE = 0.95


def _pair(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a paired comparison needs two 1-d arrays of one length, got {a.shape} and {b.shape}")
    if a.size < 2:
        raise ValueError(f"a paired comparison needs at least 2 queries, got {a.size}")
    return a, b


def paired_test(x: Sequence[float], y: Sequence[float], method: str = "permutation", *,
                n_resamples: int = N_RESAMPLES, seed: int = SEED) -> float:
    """Two-sided p-value of the mean of ``x - y`` (paired by position). ``method``: ``permutation``
    (sign flips of the differences) or ``t`` (paired t-test). Identical sides give p = 1."""
    from scipy import stats

    a, b = _pair(x, y)
    d = a - b
    if not np.any(d):
        return 1.0
    if method == "t":
        return float(stats.ttest_rel(a, b).pvalue) if np.ptp(d) > 0 else 0.0  # constant non-zero difference
    if method != "permutation":
        raise ValueError(f"unknown paired test {method!r}: permutation or t")
    res = stats.permutation_test((a, b), lambda u, v, axis: np.mean(u - v, axis=axis), vectorized=True,
                                 permutation_type="samples", alternative="two-sided",
                                 n_resamples=n_resamples, rng=np.random.default_rng(seed))
    return float(min(1.0, res.pvalue))


def bootstrap_ci(samples: Sequence[float] | tuple[Sequence[float], ...],
                 statistic: Callable[..., float] | None = None, *, paired: bool = False,
                 confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                 seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` (default the mean) over one sample, or over a
    tuple of samples ``(a, b, ...)`` (``statistic(a, b, ..., axis)``): resampled separately (independent
    samples, e.g. a ratio of two systems' mean timings) or, with ``paired``, by one draw of positions
    for all of them (their i-th elements belong together: a ratio of sums over the same timed
    batches). A sample without spread gives the point itself at both ends."""
    from scipy import stats

    two = isinstance(samples, tuple)
    data = tuple(np.asarray(s, dtype=float) for s in samples) if two else (np.asarray(samples, dtype=float),)
    if any(s.size == 0 for s in data):
        raise ValueError("bootstrap of an empty sample")
    if paired and len({s.size for s in data}) > 1:
        raise ValueError(f"a paired bootstrap needs samples of one length, got {[s.size for s in data]}")
    if statistic is None:
        if two:
            raise ValueError("two samples need a statistic, e.g. lambda a, b, axis: a.mean(axis) / b.mean(axis)")
        statistic = lambda s, axis: np.mean(s, axis=axis)  # noqa: E731
    point = float(statistic(*data, axis=-1))
    if all(np.ptp(s) == 0 for s in data):
        return point, point
    res = stats.bootstrap(data, statistic, vectorized=True, paired=paired, confidence_level=confidence,
                          n_resamples=n_resamples, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order (NaN stays NaN and counts for nothing)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = [i for i in np.argsort(p, kind="stable") if not math.isnan(p[i])]
    m, running = len(idx), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def min_detectable_difference(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The true mean paired difference a two-sided paired t-test at ``alpha`` detects with
    probability ``power``, for differences of standard deviation ``sd`` over ``n`` queries
    ((t_{1-alpha/2} + t_power) * sd / sqrt(n), t with n - 1 degrees of freedom)."""
    from scipy import stats

    if n < 2:
        return math.inf
    df = n - 1
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n))


def effect_ratio(orig_base: float, orig_adv: float, rep_base: float, rep_adv: float) -> float:
    """ER = (rep_adv - rep_base) / (orig_adv - orig_base): 1 reproduces the published improvement,
    0 finds none, a negative value finds the opposite (NaN when the paper reports no difference)."""
    den = orig_adv - orig_base
    return (rep_adv - rep_base) / den if den else math.nan


def delta_ri(orig_base: float, orig_adv: float, rep_base: float, rep_adv: float) -> float:
    """ΔRI = RI_orig - RI_rep, RI = (adv - base) / base: 0 reproduces the published relative
    improvement (NaN when a baseline is 0)."""
    if not orig_base or not rep_base:
        return math.nan
    return (orig_adv - orig_base) / orig_base - (rep_adv - rep_base) / rep_base
