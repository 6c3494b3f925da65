"""Timing protocols as data, their summary statistics and the call timer (no timing asserts:
the clock is replaced by a fake one)."""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness import timing
from harness.errors import ConfigError
from harness.timing import PROTOCOLS, Protocol, summarize, time_calls

REPO_ROOT = Path(__file__).resolve().parents[1]


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


# --------------------------------------------------------------------------- protocol fields as data

def test_every_protocol_says_what_the_timer_covers_and_its_dtypes():
    for name in PROTOCOLS.names():
        p = PROTOCOLS.get(name)
        assert p.timed and set(p.timed) <= set(timing.STAGES)
        assert all(p.inside_timer[s] for s in p.timed)          # every timed stage described in words
        assert set(p.dtype) == {"cpu", "cuda"}
    assert PROTOCOLS.get("svdr-appendix-b").timed == ("encode", "search")
    assert PROTOCOLS.get("bpr-query-time").timed == ("search",)
    assert PROTOCOLS.get("bpr-query-time").batch_size == 1      # one question per call
    assert PROTOCOLS.get("densephrases-qps").timed == ("encode+search",)


def test_dtype_for_device():
    p = PROTOCOLS.get("svdr-appendix-b")
    assert [p.dtype_for(d) for d in ("cuda", "cuda:1", "cpu")] == ["float16", "float16", "float32"]
    assert p.dtype_text == "float16 on cuda, float32 on cpu"
    with pytest.raises(ValueError, match="no dtype for device 'tpu'"):
        p.dtype_for("tpu")


@pytest.mark.parametrize("change, match", [
    ({"timed": ("encode", "rerank")}, "timed must name"),
    ({"timed": ()}, "timed must name"),
    ({"timed": ("encode+search",)}, "missing \\['encode\\+search'\\]"),
    ({"dtype": {"cpu": "float32"}}, "dtype must map"),
    ({"dtype": {"cpu": "fp32", "cuda": "fp16"}}, "dtype must map"),
    ({"trim": "median"}, "trim 'median'"),
    ({"repeats": 0}, "repeats"),
])
def test_protocol_rejects_bad_fields(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PROTOCOLS.get("svdr-appendix-b"), **change)


# --------------------------------------------------------------------------- run_protocol

class Rig:
    """A fake clock and recording encode/search/sync: encoding a batch costs 1 s, searching it 10 s
    (``search_cost`` can script other durations), so every sample is exact and independent of the
    machine. ``events`` logs each call with the clock time it happened at."""

    def __init__(self, search_cost=None):
        self.now = 0.0
        self.events: list[tuple] = []
        self.search_cost = search_cost or (lambda encoded, i: 10.0)
        self.searches = 0

    def clock(self):
        self.events.append(("clock", self.now))
        return self.now

    def encode(self, batch, opts):
        self.events.append(("encode", tuple(batch), opts))
        self.now += 1.0
        return ("enc", tuple(batch))

    def search(self, encoded, k, opts):
        self.events.append(("search", encoded, k, opts))
        self.now += self.search_cost(encoded, self.searches)
        self.searches += 1
        return encoded[1][:k]

    def sync(self):
        self.events.append(("sync", self.now))

    def called(self, what):
        return [e for e in self.events if e[0] == what]


def proto(timed=("encode", "search"), **kw):
    """A test protocol: one repeat, no trim, no warm-up, batches of 2, unless told otherwise."""
    desc = {s: f"{s} (test)" for s in timed}
    fields = {"name": "test", "repeats": 1, "trim": "none", "warmup": 0, "batch_size": 2, "timed": timed,
              "inside_timer": desc, **kw}
    return dataclasses.replace(PROTOCOLS.get("svdr-appendix-b"), **fields)


QUERIES = [f"q{i}" for i in range(9)]


def run_rig(p, rig, queries=QUERIES, **kw):
    kw.setdefault("device", "cpu")
    return timing.run_protocol(p, queries, encode=rig.encode, search=rig.search, k=3, clock=rig.clock,
                               sync=rig.sync, **kw)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A visible GPU as far as the runner knows (resolve_device and device_info replaced)."""
    monkeypatch.setattr(timing, "resolve_device", lambda d: (d, None))
    monkeypatch.setattr(timing, "device_info", lambda d: {"device": d, "name": "Fake GPU"})


def test_batch_size_sets_the_batches_handed_to_encode():
    rig = Rig()
    res = run_rig(proto(batch_size=4), rig)
    assert [e[1] for e in rig.called("encode")] == [("q0", "q1", "q2", "q3"), ("q4", "q5", "q6", "q7")]
    assert res.batch_sizes == [4, 4] and res.queries == 8
    assert "last partial batch of 1 queries not timed" in res.notes
    assert res.deviations == []


def test_single_partial_batch_when_none_is_full():
    rig = Rig()
    res = run_rig(proto(batch_size=32), rig, queries=QUERIES[:5])
    assert [e[1] for e in rig.called("encode")] == [tuple(QUERIES[:5])]
    assert res.batch_sizes == [5]
    assert res.deviation == "one batch of 5 queries instead of 32"


def test_max_queries_cuts_the_query_list():
    rig = Rig()
    res = run_rig(proto(batch_size=2), rig, max_queries=4)
    assert [e[1] for e in rig.called("encode")] == [("q0", "q1"), ("q2", "q3")]
    assert "first 4 of 9 queries" in res.notes


def test_warmup_batches_run_but_are_not_recorded():
    # search of a warm-up batch costs 100 s, of a recorded one 10 s: no 100 may reach the samples
    rig = Rig(search_cost=lambda enc, i: 100.0 if enc[1][0] in ("q0", "q2") else 10.0)
    res = run_rig(proto(batch_size=2, warmup=2, repeats=3), rig)
    batches = [e[1] for e in rig.called("encode")]
    assert batches[:2] == [("q0", "q1"), ("q2", "q3")]               # warm-up batches are called, once each
    assert batches[2:] == [("q4", "q5")] * 3 + [("q6", "q7")] * 3
    assert res.warmup == 2 and res.batch_sizes == [2, 2]
    assert res.samples["search"] == [10.0] * 6
    assert res.samples["encode"] == [1.0] * 6
    assert res.deviations == []


def test_warmup_shortened_when_too_few_batches():
    rig = Rig()
    res = run_rig(proto(batch_size=4, warmup=5), rig)
    assert res.warmup == 1 and res.batch_sizes == [4]
    assert res.deviation == "1 warm-up batches instead of 5 (only 2 batches of 4)"


def test_repeats_set_the_number_of_samples():
    rig = Rig()
    res = run_rig(proto(batch_size=3, repeats=4), rig)
    assert res.repeats == 4
    assert len(res.samples["encode"]) == len(res.samples["search"]) == 3 * 4
    assert res.deviation is None


def test_repeats_override_is_a_deviation():
    rig = Rig()
    res = run_rig(proto(batch_size=3, repeats=10), rig, repeats=3)
    assert len(res.samples["search"]) == 3 * 3
    assert res.deviations == ["3 repeats instead of 10"]
    assert res.to_dict()["deviation"] == "3 repeats instead of 10"
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        run_rig(proto(), Rig(), repeats=0)


def test_trim_minmax_drops_max_and_min_in_the_summary():
    costs = [5.0, 1.0, 3.0, 9.0, 4.0]
    rig = Rig(search_cost=lambda enc, i: costs[i])
    res = run_rig(proto(timed=("search",), batch_size=9, repeats=5, trim="minmax"), rig)
    assert res.samples["search"] == costs                           # raw samples keep everything
    assert res.summary["search"]["n"] == 3
    assert res.summary["search"]["mean"] == pytest.approx(4.0)      # 5 3 4
    assert (res.summary["search"]["min"], res.summary["search"]["max"]) == (3.0, 5.0)
    untrimmed = run_rig(proto(timed=("search",), batch_size=9, repeats=5, trim="none"),
                        Rig(search_cost=lambda enc, i: costs[i]))
    assert untrimmed.summary["search"]["n"] == 5
    assert untrimmed.summary["search"]["mean"] == pytest.approx(22 / 5)


def test_trim_with_too_few_samples_is_a_deviation():
    res = run_rig(proto(timed=("search",), batch_size=9, repeats=2, trim="minmax"), Rig())
    assert res.summary["search"]["n"] == 2
    assert "search: only 2 samples, max and min not dropped" in res.deviations


def test_dtype_device_and_max_length_reach_the_callables_on_cpu():
    rig = Rig()
    res = run_rig(proto(max_length=128), rig, device="cpu")
    opts = {e[2] for e in rig.called("encode")} | {e[3] for e in rig.called("search")}
    assert opts == {timing.Options(device="cpu", dtype="float32", max_length=128, batch_size=2)}
    assert res.device == "cpu" and res.device_note is None
    assert res.options == {"device": "cpu", "dtype": "float32", "max_length": 128, "batch_size": 2}
    assert res.hardware["device"] == "cpu" and res.hardware["name"] and res.hardware["cores"] >= 1
    assert all(e[2] == 3 for e in rig.called("search"))            # k


def test_dtype_and_device_reach_the_callables_on_cuda(fake_gpu):
    rig = Rig()
    res = run_rig(proto(), rig, device="cuda")
    opts = {e[2] for e in rig.called("encode")} | {e[3] for e in rig.called("search")}
    assert opts == {timing.Options(device="cuda", dtype="float16", max_length=256, batch_size=2)}
    assert res.device == "cuda" and res.hardware["name"] == "Fake GPU"


def intervals(rig):
    """(start, stop) clock pairs, in order."""
    t = [e[1] for e in rig.called("clock")]
    return list(zip(t[::2], t[1::2]))


def test_search_only_timing_encodes_outside_the_timer():
    rig = Rig()
    res = run_rig(proto(timed=("search",), batch_size=3, repeats=2), rig)
    assert res.samples == {"search": [10.0] * 6}                    # 1 s of encoding never inside
    assert len(rig.called("encode")) == 3                           # once per batch, not per repeat
    # each encode happens before the clock starts for that batch's searches
    kinds = [e[0] for e in rig.events if e[0] != "sync"]
    assert kinds[:6] == ["encode", "clock", "search", "clock", "clock", "search"]


def test_encode_and_search_timed_apart():
    rig = Rig()
    res = run_rig(proto(timed=("encode", "search"), batch_size=3), rig)
    assert res.samples == {"encode": [1.0] * 3, "search": [10.0] * 3}
    assert res.summary["encode"]["mean"] == 1.0 and res.summary["search"]["mean"] == 10.0
    # search gets what the timed encode of the same pass returned
    assert [e[1] for e in rig.called("search")] == [("enc", tuple(QUERIES[i:i + 3])) for i in (0, 3, 6)]


def test_encode_plus_search_timed_together():
    rig = Rig()
    res = run_rig(proto(timed=("encode+search",), batch_size=3), rig)
    assert res.samples == {"encode+search": [11.0] * 3}             # both inside one interval
    assert res.timed == ("encode+search",)
    assert [b - a for a, b in intervals(rig)] == [11.0] * 3


def test_sync_before_each_timer_stop_on_cuda(fake_gpu):
    rig = Rig()
    run_rig(proto(timed=("encode", "search"), batch_size=3, repeats=2), rig, device="cuda")
    kinds = [e[0] for e in rig.events]
    stops = [i for i, e in enumerate(rig.events) if e[0] == "clock"][1::2]
    assert len(stops) == 3 * 2 * 2
    assert all(kinds[i - 1] == "sync" for i in stops)
    assert kinds.count("sync") == len(stops)


def test_sync_after_untimed_encoding_on_cuda(fake_gpu):
    rig = Rig()
    run_rig(proto(timed=("search",), batch_size=9), rig, device="cuda")
    assert [e[0] for e in rig.events] == ["encode", "sync", "clock", "search", "sync", "clock"]


def test_no_sync_on_cpu():
    rig = Rig()
    run_rig(proto(), rig, device="cpu")
    assert rig.called("sync") == []


def test_run_protocol_input_checks():
    with pytest.raises(ValueError, match="no queries"):
        run_rig(proto(), Rig(), queries=[])
    with pytest.raises(ValueError, match="k must be"):
        timing.run_protocol(proto(), QUERIES, encode=Rig().encode, search=Rig().search, k=0, device="cpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        run_rig(proto(), Rig(), device="tpu")


def test_result_is_json_data():
    res = run_rig(proto(), Rig())
    d = json.loads(json.dumps(res.to_dict()))
    assert d["protocol"]["name"] == "test" and d["protocol"]["dtype"] == {"cuda": "float16", "cpu": "float32"}
    assert d["timed"] == ["encode", "search"] and d["queries"] == 8 and d["deviation"] is None
    assert set(d["summary"]["search"]) == {"mean", "median", "min", "max", "stdev", "n"}


# --------------------------------------------------------------------------- time_build

def test_time_build_repeats_warmup_options_and_after():
    rig = Rig()
    calls = []

    def build(opts):
        calls.append(opts)
        rig.now += 2.0 + len(calls)
        return len(calls)

    res = timing.time_build(proto(repeats=3, trim="minmax"), build, device="cpu", warmup=1, clock=rig.clock,
                            sync=rig.sync, after=lambda out: rig.events.append(("after", rig.now)))
    assert len(calls) == 4 and calls[0] == timing.Options("cpu", "float32", 256, 2)
    assert res.samples == {"index": [4.0, 5.0, 6.0]}                # the 3 s warm-up run is not kept
    assert res.summary["index"]["n"] == 1 and res.summary["index"]["mean"] == 5.0
    # `after` runs after the clock stopped
    assert [e[0] for e in rig.events[:3]] == ["clock", "clock", "after"]
    assert rig.called("sync") == []


def test_time_build_own_seconds_and_protocol_without_index_timing():
    res = timing.time_build(PROTOCOLS.get("densephrases-qps"), lambda o: {"build_seconds": 0.25},
                            device="cpu", repeats=2, own_seconds=lambda out: out["build_seconds"])
    assert res.samples == {"index": [0.25, 0.25]}
    assert any("own timer" in n for n in res.notes)
    assert res.deviations == ["2 repeats instead of 1",
                              ("densephrases-qps does not time index construction; "
                               "timed with its repeats and trim")]


# --------------------------------------------------------------------------- device from the hardware

def test_resolve_device_cuda_without_gpu_names_the_machine():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    from harness.meta import cpu_model, resolve_device

    used, why = resolve_device("cuda")
    assert used == "cpu"
    assert why.startswith("requested cuda but torch sees no GPU on ")
    assert platform.node() in why and cpu_model() in why
    assert resolve_device("cpu") == ("cpu", None)
    res = run_rig(proto(), Rig(), device="cuda")                    # the runner falls back and says why
    assert res.device == "cpu" and res.device_requested == "cuda" and res.device_note == why
    assert why in res.notes
    assert res.options["device"] == "cpu" and res.options["dtype"] == "float32"


def test_device_info_from_the_hardware():
    from harness.meta import cpu_model, device_info

    info = device_info("cpu")
    assert info == {"device": "cpu", "name": cpu_model(), "cores": os.cpu_count(),
                    "host": platform.node() or None}
    with pytest.raises(ValueError, match="unknown device"):
        device_info("gpu")


def test_meta_does_not_import_torch():
    code = "import sys, harness.meta as m; m.hardware(); m.device_info('cpu'); m.resolve_device('cpu'); " \
           "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT)
    assert out.stdout.strip() == "False"


# files whose literal GPU notes are still to be switched to resolve_device (owned by other modules)
PENDING_GPU_LITERALS: set[str] = set()


def test_no_literal_gpu_note_in_the_package():
    literals = ("no GPU here", "no GPU on this machine", "sees no GPU on this machine")
    offenders = []
    for path in sorted((REPO_ROOT / "harness").rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if any(s in line for s in literals) and rel not in PENDING_GPU_LITERALS:
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


# --------------------------------------------------------------------------- the measure steps' runner

def test_run_uses_the_runner_and_keeps_the_json_layout(monkeypatch, tmp_path):
    built = []

    class Searcher:
        def encode(self, texts):
            return list(texts)

        def search(self, encoded, k):
            return encoded[:k]

    def build_index(folder):
        built.append(folder)
        return {"build_seconds": 0.5}

    queries = [f"question {i}" for i in range(70)]
    cfg = {"timing": {"device": "cpu"}, "evaluate": {"depth": 5}}
    kw = {"build_index": build_index, "searcher": Searcher(), "max_queries": None}
    res = timing.run(cfg, "fake", "smoke", queries, protocol=PROTOCOLS.get("svdr-appendix-b"), repeats=3, **kw)
    assert len(built) == 3 and not any(p.exists() for p in built)   # fresh folders, removed after
    assert res["samples"]["index_seconds"] == [0.5, 0.5, 0.5]
    assert res["batches"] == 2 and res["queries"] == 64
    assert len(res["samples"]["encode_seconds_per_batch"]) == 6
    assert len(res["samples"]["search_seconds_per_batch"]) == 6
    assert set(res["summary"]) == {"index_seconds", "encode_ms_per_batch", "search_ms_per_batch"}
    assert res["protocol"]["batch_size"] == 32 and res["device"] == "cpu"
    assert res["deviation"] == "3 repeats instead of 10"
    json.dumps(res)
    dp = timing.run(cfg, "fake", "smoke", queries, protocol=PROTOCOLS.get("densephrases-qps"), repeats=1, **kw)
    assert set(dp["summary"]) == {"index_seconds", "encode_search_ms_per_batch"}
    assert dp["batches"] == 1 and dp["warmup_batches"] == 0
    assert "0 warm-up batches instead of 5 (only 1 batches of 64)" in dp["deviation"]
