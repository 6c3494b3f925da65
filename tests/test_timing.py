"""Timing protocols as data, their summary statistics and the call timer (no timing asserts:
the clock is replaced by a fake one)."""
from __future__ import annotations

import types

import pytest

import harness.timing as timing
from harness.errors import ConfigError
from harness.timing import PROTOCOLS, Protocol, summarize, time_calls


# --------------------------------------------------------------------------- summarize

def test_summarize_minmax_drops_one_max_and_one_min():
    # sorted: 1 4 4 7 10 100 -> drop 1 and 100 -> 4 4 7 10
    s = summarize([10, 1, 4, 100, 4, 7], "minmax")
    assert s["n"] == 4
    assert s["mean"] == pytest.approx(25 / 4)          # 6.25
    assert s["median"] == pytest.approx(5.5)
    assert (s["min"], s["max"]) == (4, 10)
    # sample stdev of 4 4 7 10: squared deviations from 6.25 sum to 24.75; /3 = 8.25
    assert s["stdev"] == pytest.approx(8.25 ** 0.5)


def test_summarize_minmax_drops_exactly_one_of_tied_extremes():
    # sorted: 1 1 5 9 9 -> drop one 1 and one 9 -> 1 5 9
    s = summarize([9, 1, 5, 1, 9], "minmax")
    assert s["n"] == 3
    assert s["mean"] == pytest.approx(5.0)
    assert (s["min"], s["max"]) == (1, 9)


def test_summarize_none_keeps_all():
    s = summarize([10, 1, 4, 100, 4, 7], "none")
    assert s["n"] == 6
    assert s["mean"] == pytest.approx(126 / 6)         # 21
    assert s["median"] == pytest.approx(5.5)
    assert (s["min"], s["max"]) == (1, 100)


@pytest.mark.parametrize("samples, trim, n, mean", [
    ([1.0, 2.0, 9.0], "minmax", 1, 2.0),    # three samples: only the middle one remains
    ([3.0, 5.0], "minmax", 2, 4.0),         # too short to trim: kept as is
    ([7.0], "minmax", 1, 7.0),
    ([7.0], "none", 1, 7.0),
])
def test_summarize_short_lists(samples, trim, n, mean):
    s = summarize(samples, trim)
    assert s["n"] == n
    assert s["mean"] == pytest.approx(mean)
    if n == 1:
        assert s["stdev"] == 0.0


def test_summarize_does_not_mutate_input():
    xs = [3.0, 1.0, 2.0, 5.0]
    summarize(xs, "minmax")
    assert xs == [3.0, 1.0, 2.0, 5.0]


# --------------------------------------------------------------------------- protocols

def test_svdr_appendix_b_protocol():
    p = PROTOCOLS.get("svdr-appendix-b")
    assert isinstance(p, Protocol)
    assert p.name == "svdr-appendix-b"
    assert p.repeats == 10
    assert p.trim == "minmax"
    assert p.batch_size == 32
    assert p.max_length == 256
    assert p.warmup == 0


def test_protocol_registry_contract():
    assert "svdr-appendix-b" in PROTOCOLS.names()
    for name, p in PROTOCOLS.items():
        assert p.name == name
        assert p.repeats >= 1 and p.batch_size >= 1 and p.warmup >= 0
        assert p.trim in ("minmax", "none")
        assert p.source and p.inside_timer      # every protocol says what is inside the timer
    with pytest.raises(ConfigError, match="did you mean 'svdr-appendix-b'"):
        PROTOCOLS.get("svdr-appendix")


# --------------------------------------------------------------------------- time_calls

class FakeClock:
    """perf_counter replacement; each timed call advances it by a scripted duration."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)
        self.calls = 0

    def perf_counter(self):
        return self.now

    def fn(self):
        self.now += self.durations[self.calls]
        self.calls += 1


def test_time_calls_counts_and_skips_warmup(monkeypatch):
    clock = FakeClock([100.0, 50.0, 1.0, 2.0, 3.0, 4.0])
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    samples = time_calls(clock.fn, repeats=4, warmup=2)
    assert clock.calls == 6                               # warm-up calls are made ...
    assert samples == pytest.approx([1.0, 2.0, 3.0, 4.0])  # ... but the leading ones are not kept


def test_time_calls_without_warmup(monkeypatch):
    clock = FakeClock([0.5, 0.25, 0.125])
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    assert time_calls(clock.fn, repeats=3) == pytest.approx([0.5, 0.25, 0.125])
    assert clock.calls == 3


def test_time_calls_real_clock_returns_repeats_samples():
    calls = []
    samples = time_calls(lambda: calls.append(1), repeats=5, warmup=3)
    assert len(calls) == 8
    assert len(samples) == 5
    assert all(isinstance(s, float) and s >= 0 for s in samples)
