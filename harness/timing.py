"""The papers' timing protocols, as data, and the runner that applies them.

Measure steps of the methods time index construction and search with a protocol and write raw
samples, the summary, the protocol itself and the hardware to their metrics JSON. What is inside
the timer is part of the protocol, and is printed in every table that uses the numbers.

Any method can be timed without the runner knowing it: `run_protocol` takes an ``encode`` and a
``search`` callable and applies every field of a `Protocol` (batching, warm-up batches, repeats,
trimming, dtype and device, max length, what the timer covers, device synchronisation);
`time_build` does the same for index construction. The device of a measurement is the one torch
really sees (`harness.meta.resolve_device`), never the configured string.
"""
from __future__ import annotations

import inspect
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.meta import device_info, git_commit, hardware, resolve_device, versions
from harness.registry import Registry

# What the timer can cover during search, in the order a pass runs them:
#   "encode"        E(q): query encoding alone (its own samples);
#   "search"        f(q, D): search alone; when "encode" is not timed, encoding runs before the timer;
#   "encode+search" encoding and search inside one timed interval (one sample per call).
STAGES = ("encode", "search", "encode+search")
INDEX = "index"                                         # the stage `time_build` times
TRIMS = ("minmax", "none")
DEVICES = ("cpu", "cuda")
DTYPES = ("float16", "bfloat16", "float32", "float64")  # torch dtype names


@dataclass(frozen=True)
class Protocol:
    """A paper's timing protocol. ``timed`` decides what the search timer covers (see STAGES);
    ``inside_timer`` says it in words for every timed stage (and "index" for builds), for captions."""

    name: str
    source: str
    repeats: int                # timed calls per recorded batch (or build runs)
    trim: str                   # "minmax": drop the largest and smallest sample; "none"
    warmup: int                 # leading search batches run once each and not recorded
    batch_size: int             # queries per search call
    max_length: int | None      # encoder max length, handed to the callables
    dtype: dict[str, str]       # device kind ("cpu", "cuda") -> torch dtype name the callables cast to
    inside_timer: dict[str, str] = field(default_factory=dict)
    timed: tuple[str, ...] = field(kw_only=True)

    def __post_init__(self) -> None:
        where = f"timing protocol {self.name!r}"
        if self.repeats < 1 or self.warmup < 0 or self.batch_size < 1:
            raise ValueError(f"{where}: repeats and batch_size must be >= 1 and warmup >= 0")
        if self.trim not in TRIMS:
            raise ValueError(f"{where}: trim {self.trim!r} is not one of {', '.join(TRIMS)}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"{where}: max_length must be >= 1 or None")
        if set(self.dtype) != set(DEVICES) or not set(self.dtype.values()) <= set(DTYPES):
            raise ValueError(f"{where}: dtype must map each of {', '.join(DEVICES)} "
                             f"to one of {', '.join(DTYPES)}")
        if not self.timed or len(set(self.timed)) != len(self.timed) or not set(self.timed) <= set(STAGES):
            raise ValueError(f"{where}: timed must name distinct stages among {', '.join(STAGES)}")
        missing = [s for s in self.timed if not self.inside_timer.get(s)]
        unknown = set(self.inside_timer) - set(self.timed) - {INDEX}
        if missing or unknown:
            raise ValueError(f"{where}: inside_timer must describe exactly the timed stages (and {INDEX!r}); "
                             f"missing {missing}, not timed {sorted(unknown)}")

    def dtype_for(self, device: str) -> str:
        """The torch dtype name the protocol uses on ``device`` ("cuda:1" counts as "cuda")."""
        kind = str(device).split(":", 1)[0]
        if kind not in self.dtype:
            raise ValueError(f"timing protocol {self.name!r}: no dtype for device {device!r}")
        return self.dtype[kind]

    @property
    def dtype_text(self) -> str:
        """The dtype rule in words, e.g. "float16 on cuda, float32 on cpu"."""
        return ", ".join(f"{self.dtype[d]} on {d}" for d in ("cuda", "cpu"))


PROTOCOLS: Registry[Protocol] = Registry("timing protocol")
PROTOCOLS.add("svdr-appendix-b", Protocol(
    name="svdr-appendix-b", source="SVDR, Appendix B",
    repeats=10, trim="minmax", warmup=0, batch_size=32, max_length=256,
    dtype={"cuda": "float16", "cpu": "float32"},
    inside_timer={
        "index": "encoding/tokenisation of the whole corpus and index construction; "
                 "I/O and dtype conversion excluded",
        "encode": "E(q): encoding one batch of 32 queries",
        "search": "f(q, D): similarity of one batch of 32 queries with the whole index plus the top-k sort",
    },
    timed=("encode", "search")))
PROTOCOLS.add("bpr-query-time", Protocol(
    name="bpr-query-time", source="BPR, Sec. 4 (query time) and the authors' code",
    repeats=3, trim="none", warmup=0, batch_size=1, max_length=256,
    dtype={"cuda": "float32", "cpu": "float32"},
    inside_timer={"search": "search only, query encoding excluded; reported per question",
                  "index": "index construction from precomputed embeddings"},
    timed=("search",)))
PROTOCOLS.add("densephrases-qps", Protocol(
    name="densephrases-qps", source="DensePhrases, Sec. 6 (#Q/sec) and the authors' code",
    repeats=1, trim="none", warmup=5, batch_size=64, max_length=None,
    dtype={"cuda": "float32", "cpu": "float32"},
    inside_timer={"encode+search": "query encoding + search for batches of 64; first 5 batches excluded; "
                                   "no HTTP"},
    timed=("encode+search",)))


PROTOCOLS.add("qcr-latency", Protocol(
    name="qcr-latency", source="this harness (QCR reports no latency; its reviewers asked for it)",
    repeats=1, trim="none", warmup=5, batch_size=1, max_length=None,
    dtype={"cuda": "float32", "cpu": "float32"},
    inside_timer={"encode+search": "query encoding + search of one question per call (latency); "
                                   "the first 5 questions excluded"},
    timed=("encode+search",)))


def summarize(samples: Sequence[float], trim: str) -> dict[str, float]:
    """Mean after the protocol's trimming (SVDR: drop max and min), plus spread."""
    xs = sorted(samples)
    if trim == "minmax" and len(xs) > 2:
        xs = xs[1:-1]
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs), "min": xs[0], "max": xs[-1],
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}


class Untimed(Iterator[Any]):
    """``items`` as an iterator whose own time is kept apart in :attr:`seconds`: a corpus streamed from
    its file into a build, so that the build's clock, less ``seconds``, excludes reading it (as when
    the corpus was read whole before the clock started)."""

    def __init__(self, items: Iterable[Any]) -> None:
        self._it, self.seconds = iter(items), 0.0

    def __iter__(self) -> Untimed:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        try:
            return next(self._it)
        finally:
            self.seconds += time.perf_counter() - t0


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> list[float]:
    out = []
    for i in range(repeats + warmup):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            out.append(dt)
    return out


# --------------------------------------------------------------------------------------------
# the generic runner
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    """What the protocol asks of the timed callables: run on ``device``, cast the model and inputs to
    ``dtype`` (a torch dtype name), truncate inputs at ``max_length``; ``batch_size`` for builds."""

    device: str
    dtype: str
    max_length: int | None
    batch_size: int

    def torch_dtype(self) -> Any:
        """``dtype`` as a torch.dtype (imports torch)."""
        import torch

        return getattr(torch, self.dtype)


@dataclass
class TimingResult:
    """One measurement: raw samples in seconds per stage, their trimmed summary, the protocol as data,
    the device actually used (and the hardware behind it), and every deviation from the protocol."""

    protocol: dict[str, Any]
    device: str                         # device the callables ran on (from the hardware)
    device_requested: str
    device_note: str | None             # why ``device`` differs from the request (None when it does not)
    hardware: dict[str, Any]            # harness.meta.device_info(device)
    options: dict[str, Any]             # the Options handed to the callables
    timed: tuple[str, ...]              # stages with samples ("index" for builds)
    repeats: int
    warmup: int                         # warm-up batches (builds: runs) run and not recorded
    batch_sizes: list[int]              # sizes of the recorded batches (empty for builds)
    samples: dict[str, list[float]]     # stage -> seconds, batch after batch, ``repeats`` per batch
    summary: dict[str, dict[str, float]]  # stage -> summarize(samples, protocol trim), seconds
    deviations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def deviation(self) -> str | None:
        """The deviations in one line, None when the protocol was followed."""
        return "; ".join(self.deviations) or None

    @property
    def queries(self) -> int:
        """Queries in the recorded batches."""
        return sum(self.batch_sizes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["timed"] = list(self.timed)
        d["deviation"] = self.deviation
        d["queries"] = self.queries
        return d


Sync = Callable[[], None]


def _device_setup(protocol: Protocol, device: str, repeats: int | None, sync: Sync | None,
                  batch_size: int) -> tuple[str, str | None, Options, int, list[str], Sync | None]:
    """Resolves the device from the hardware, the options, the repeats and the sync hook."""
    used, why = resolve_device(device)
    opts = Options(device=used, dtype=protocol.dtype_for(used), max_length=protocol.max_length,
                   batch_size=batch_size)
    n = protocol.repeats if repeats is None else repeats
    if n < 1:
        raise ValueError(f"repeats must be >= 1, got {n}")
    deviations = [] if n == protocol.repeats else [f"{n} repeats instead of {protocol.repeats}"]
    if used.split(":", 1)[0] != "cuda":
        return used, why, opts, n, deviations, None
    if sync is None:
        def sync() -> None:
            import torch

            torch.cuda.synchronize(used)
    return used, why, opts, n, deviations, sync


def _stopwatch(clock: Callable[[], float],
               sync: Sync | None) -> Callable[[Callable[[], Any]], tuple[Any, float]]:
    """A timer for one call: the device is synchronised before the clock stops (asynchronous GPU work)."""

    def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
        t0 = clock()
        out = fn()
        if sync is not None:
            sync()
        return out, clock() - t0

    return timed


def _summaries(samples: dict[str, list[float]], trim: str,
               deviations: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for stage, xs in samples.items():
        if trim == "minmax" and len(xs) <= 2:
            deviations.append(f"{stage}: only {len(xs)} samples, max and min not dropped")
        out[stage] = summarize(xs, trim)
    return out


def run_protocol(protocol: Protocol, queries: Sequence[str], *, encode: Callable[[list[str], Options], Any],
                 search: Callable[[Any, int, Options], Any], k: int, device: str, repeats: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, sync: Callable[[], None] | None = None,
                 max_queries: int | None = None) -> TimingResult:
    """Times ``encode`` (query texts -> whatever ``search`` takes) and ``search`` (encoded, k -> hits)
    the protocol's way. Queries go in batches of ``batch_size`` (full batches only, or the single
    partial one when none is full); the first ``warmup`` batches run once and are not recorded; every
    recorded batch is timed ``repeats`` times (the protocol's unless given, a deviation); the timer
    covers the protocol's ``timed`` stages; on cuda ``sync`` (default torch.cuda.synchronize) runs
    before each stop. ``device`` is the requested one: it is resolved against the hardware and the
    callables get the device actually used, the protocol's dtype for it and max_length (Options)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if max_queries is not None and max_queries < 1:
        raise ValueError(f"max_queries must be >= 1 or None, got {max_queries}")
    texts = list(queries)
    notes: list[str] = []
    if max_queries is not None and max_queries < len(texts):
        notes.append(f"first {max_queries} of {len(texts)} queries")
        texts = texts[:max_queries]
    if not texts:
        raise ValueError("no queries to time")
    bs = protocol.batch_size
    used, why, opts, n, deviations, stop_sync = _device_setup(protocol, device, repeats, sync, bs)
    batches = [texts[i:i + bs] for i in range(0, len(texts), bs)]
    full = [b for b in batches if len(b) == bs]
    if not full:
        full = batches[:1]
        deviations.append(f"one batch of {len(full[0])} queries instead of {bs}")
    elif len(full) < len(batches):
        notes.append(f"last partial batch of {len(batches[-1])} queries not timed")
    warmup = min(protocol.warmup, len(full) - 1)
    if warmup < protocol.warmup:
        deviations.append(f"{warmup} warm-up batches instead of {protocol.warmup} "
                          f"(only {len(full)} batches of {len(full[0])})")
    stages = [s for s in STAGES if s in protocol.timed]
    encode_outside = "search" in stages and "encode" not in stages
    timed = _stopwatch(clock, stop_sync)
    samples: dict[str, list[float]] = {s: [] for s in stages}
    from harness.progress import steps

    for i, batch in steps(enumerate(full), len(full), f"timing ({protocol.name}, {used})", "batch"):
        record = i >= warmup
        outside = None
        if encode_outside:                      # encoding before the timer starts (BPR: search only)
            outside = encode(list(batch), opts)
            if stop_sync is not None:
                stop_sync()
        for _ in range(n if record else 1):
            encoded = outside
            for stage in stages:
                if stage == "encode":
                    encoded, dt = timed(lambda b=batch: encode(list(b), opts))
                elif stage == "search":
                    _, dt = timed(lambda e=encoded: search(e, k, opts))
                else:
                    _, dt = timed(lambda b=batch: search(encode(list(b), opts), k, opts))
                if record:
                    samples[stage].append(dt)
    if used != device:
        notes.append(why or f"requested {device}, ran on {used}")
    return TimingResult(
        protocol=asdict(protocol), device=used, device_requested=device, device_note=why,
        hardware=device_info(used), options=asdict(opts), timed=tuple(stages), repeats=n, warmup=warmup,
        batch_sizes=[len(b) for b in full[warmup:]], samples=samples,
        summary=_summaries(samples, protocol.trim, deviations), deviations=deviations, notes=notes)


def time_build(protocol: Protocol, build: Callable[[Options], Any], *, device: str,
               repeats: int | None = None, warmup: int = 0, clock: Callable[[], float] = time.perf_counter,
               sync: Callable[[], None] | None = None, after: Callable[[Any], None] | None = None,
               own_seconds: Callable[[Any], float | None] | None = None) -> TimingResult:
    """Times index construction: ``build(options)`` run ``warmup`` times unrecorded, then ``repeats``
    times (the protocol's unless given), trimmed the protocol's way, on the device the hardware
    allows. ``after(result)`` runs outside the timer (removing a temporary folder); ``own_seconds``
    reads a build's own inside-the-timer seconds from its result (a method that can exclude model
    loading and I/O) and replaces the wall time when it gives a number."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    used, why, opts, n, deviations, stop_sync = _device_setup(protocol, device, repeats, sync,
                                                              protocol.batch_size)
    notes: list[str] = []
    if INDEX not in protocol.inside_timer:
        deviations.append(f"{protocol.name} does not time index construction; "
                          "timed with its repeats and trim")
    timed = _stopwatch(clock, stop_sync)
    samples: list[float] = []
    own = False
    for i in range(warmup + n):
        out, dt = timed(lambda: build(opts))
        reported = own_seconds(out) if own_seconds is not None else None
        if reported is not None:
            dt, own = float(reported), True
        if after is not None:
            after(out)
        if i >= warmup:
            samples.append(dt)
    if own:
        notes.append("index samples: the build's own timer where it reported one "
                     "(model loading and I/O excluded)")
    if used != device:
        notes.append(why or f"requested {device}, ran on {used}")
    by_stage = {INDEX: samples}
    return TimingResult(
        protocol=asdict(protocol), device=used, device_requested=device, device_note=why,
        hardware=device_info(used), options=asdict(opts), timed=(INDEX,), repeats=n, warmup=warmup,
        batch_sizes=[], samples=by_stage, summary=_summaries(by_stage, protocol.trim, deviations),
        deviations=deviations, notes=notes)


# --------------------------------------------------------------------------------------------
# the command line (index build and search of one method on one dataset)
# --------------------------------------------------------------------------------------------
_KEYS = {"encode": "encode", "search": "search", "encode+search": "encode_search"}


def _takes_options(fn: Callable[..., Any]) -> bool:
    """Whether a Searcher method accepts ``options`` (then it is told the device and dtype)."""
    try:
        return "options" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def run(cfg: Mapping[str, Any], name: str, dataset: str, queries: Sequence[str], *,
        build_index: Callable[..., dict[str, Any]], searcher: Any, protocol: Protocol, repeats: int,
        max_queries: int | None, index_repeats: int | None = None) -> dict[str, Any]:
    """Index build (``build_index(out_folder)``, repeated ``index_repeats`` times (``repeats`` unless
    given) into temporary folders; its own ``build_seconds`` when it reports one) and search
    (``searcher.encode`` / ``searcher.search``) of one system timed with ``protocol`` (run_protocol,
    time_build). The callables are told the
    device and dtype only when they take ``options``; otherwise they run where they loaded (the
    CPU) and that is noted."""
    requested = cfg["timing"]["device"]
    build_hooks = _takes_options(build_index)

    def build(opts: Options) -> tuple[Path, dict[str, Any]]:
        tmp = Path(tempfile.mkdtemp(prefix="timing-index-"))
        try:
            info = build_index(tmp, options=opts) if build_hooks else build_index(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp, info

    index = time_build(protocol, build, device=requested if build_hooks else "cpu",
                       repeats=repeats if index_repeats is None else index_repeats,
                       after=lambda out: shutil.rmtree(out[0], ignore_errors=True),
                       own_seconds=lambda out: (out[1] or {}).get("build_seconds"))
    hooks = _takes_options(searcher.encode) and _takes_options(searcher.search)
    device = requested if hooks else "cpu"
    res = run_protocol(
        protocol, list(queries),
        encode=(lambda b, o: searcher.encode(b, options=o)) if hooks else (lambda b, o: searcher.encode(b)),
        search=((lambda e, k, o: searcher.search(e, k, options=o)) if hooks
                else (lambda e, k, o: searcher.search(e, k))),
        k=cfg["evaluate"]["depth"], device=device, repeats=repeats, max_queries=max_queries)
    notes = res.notes + [f"index: {x}" for x in index.notes]
    if not hooks and requested != "cpu":
        notes.append(f"{name}'s Searcher takes no timing options: ran on the CPU, timing.device "
                     f"{requested} not applied")
    if not build_hooks and requested != "cpu":
        notes.append(f"{name}'s build_index takes no timing options: index built on the CPU")

    def ms(summary: dict[str, float]) -> dict[str, float]:
        return {k_: v * 1000 if k_ != "n" else v for k_, v in summary.items()}

    return {
        "protocol": res.protocol,
        "repeats": res.repeats,
        "index_repeats": len(index.samples[INDEX]),
        "method": name,
        "dataset": dataset,
        "device": res.device,
        "device_requested": requested,
        "device_info": res.hardware,
        "options": res.options,
        "timed": list(res.timed),
        "warmup_batches": res.warmup,
        "queries": res.queries,
        "batches": len(res.batch_sizes),
        "samples": {"index_seconds": index.samples[INDEX],
                    **{f"{_KEYS[s]}_seconds_per_batch": v for s, v in res.samples.items()}},
        "summary": {"index_seconds": index.summary[INDEX],
                    **{f"{_KEYS[s]}_ms_per_batch": ms(v) for s, v in res.summary.items()}},
        "deviation": "; ".join(dict.fromkeys(res.deviations + index.deviations)) or None,
        "notes": notes,
        "hardware": hardware(), "versions": versions(), "git_commit": git_commit(),
    }
