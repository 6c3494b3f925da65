"""The papers' timing protocols, as data, and the runner that applies them.

`python -m harness timing --method M --dataset KEY --index DIR [--model DIR] --out JSON`
times index construction and search with a protocol and writes raw samples, the summary,
the protocol itself and the hardware to JSON. What is inside the timer is part of the
protocol, and is printed in every table that uses the numbers.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.config import add_config_argument, load_config
from harness.datasets import store
from harness.io import write_json
from harness.meta import git_commit, hardware, versions
from harness.methods import method_module
from harness.methods.base import Context
from harness.registry import Registry


@dataclass(frozen=True)
class Protocol:
    name: str
    source: str
    repeats: int
    trim: str                   # "minmax": drop the largest and smallest sample; "none"
    warmup: int                 # leading samples (batches or runs) excluded
    batch_size: int             # queries per search batch
    max_length: int | None      # encoder max length
    dtype: str
    inside_timer: dict[str, str] = field(default_factory=dict)


PROTOCOLS: Registry[Protocol] = Registry("timing protocol")
PROTOCOLS.add("svdr-appendix-b", Protocol(
    name="svdr-appendix-b", source="SVDR, Appendix B",
    repeats=10, trim="minmax", warmup=0, batch_size=32, max_length=256,
    dtype="fp16 on GPU, fp32 on CPU",
    inside_timer={
        "index": "encoding/tokenisation of the whole corpus and index construction; I/O and dtype conversion excluded",
        "encode": "E(q): encoding one batch of 32 queries",
        "search": "f(q, D): similarity of one batch of 32 queries with the whole index plus the top-k sort",
    }))
PROTOCOLS.add("bpr-query-time", Protocol(
    name="bpr-query-time", source="BPR, Sec. 4 (query time) and the authors' code",
    repeats=3, trim="none", warmup=0, batch_size=1, max_length=256, dtype="fp32",
    inside_timer={"search": "search only, query encoding excluded; reported per question",
                  "index": "index construction from precomputed embeddings"}))
PROTOCOLS.add("densephrases-qps", Protocol(
    name="densephrases-qps", source="DensePhrases, Sec. 6 (#Q/sec) and the authors' code",
    repeats=1, trim="none", warmup=5, batch_size=64, max_length=None, dtype="fp32",
    inside_timer={"search": "query encoding + search for batches of 64; first 5 batches excluded; no HTTP"}))


def summarize(samples: Sequence[float], trim: str) -> dict[str, float]:
    """Mean after the protocol's trimming (SVDR: drop max and min), plus spread."""
    xs = sorted(samples)
    if trim == "minmax" and len(xs) > 2:
        xs = xs[1:-1]
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs), "min": xs[0], "max": xs[-1],
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> list[float]:
    out = []
    for i in range(repeats + warmup):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            out.append(dt)
    return out


def run(ctx: Context, index_dir: Path, model_dir: Path | None, protocol: Protocol, repeats: int,
        max_queries: int | None) -> dict[str, Any]:
    module = method_module(ctx.method)
    # index construction, repeated into fresh temporary folders; the method reports the time
    # inside its own timer when it can exclude model loading and I/O ("build_seconds").
    index_samples = []
    for _ in range(repeats):
        tmp = Path(tempfile.mkdtemp(prefix="timing-index-"))
        try:
            t0 = time.perf_counter()
            info = module.build_index(ctx, tmp) if model_dir is None else module.build_index(ctx, tmp, model_dir)
            index_samples.append(info.get("build_seconds", time.perf_counter() - t0))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    queries = store.read_queries(ctx.data_dir(), "test")
    if max_queries:
        queries = queries[:max_queries]
    searcher = module.Searcher(ctx, index_dir, model_dir)
    bs, k = protocol.batch_size, ctx.cfg["evaluate"]["depth"]
    batches = [[q.text for q in queries[i:i + bs]] for i in range(0, len(queries), bs)]
    full = [b for b in batches if len(b) == bs] or batches[:1]
    encoded = [searcher.encode(b) for b in full]
    enc_samples: list[float] = []
    search_samples: list[float] = []
    for b, e in zip(full, encoded):
        enc_samples += time_calls(lambda b=b: searcher.encode(b), repeats)
        search_samples += time_calls(lambda e=e: searcher.search(e, k), repeats)
    return {
        "protocol": asdict(protocol),
        "repeats": repeats,
        "method": ctx.method,
        "dataset": ctx.dataset,
        "device": ctx.cfg["timing"]["device"],
        "queries": sum(len(b) for b in full),
        "batches": len(full),
        "samples": {"index_seconds": index_samples, "encode_seconds_per_batch": enc_samples,
                    "search_seconds_per_batch": search_samples},
        "summary": {
            "index_seconds": summarize(index_samples, protocol.trim),
            "encode_ms_per_batch": {k_: v * 1000 if k_ != "n" else v for k_, v in summarize(enc_samples, protocol.trim).items()},
            "search_ms_per_batch": {k_: v * 1000 if k_ != "n" else v for k_, v in summarize(search_samples, protocol.trim).items()},
        },
        "hardware": hardware(), "versions": versions(), "git_commit": git_commit(),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness timing", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--method", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    ctx = Context(cfg, args.method, args.dataset)
    tcfg = cfg["timing"]
    protocol = PROTOCOLS.get(tcfg.get("protocol") or "svdr-appendix-b")
    repeats = tcfg.get("repeats") or protocol.repeats
    res = run(ctx, args.index, args.model, protocol, repeats, tcfg.get("search_queries"))
    res["deviation"] = None if repeats == protocol.repeats else f"{repeats} repeats instead of {protocol.repeats}"
    write_json(args.out, res)
    s = res["summary"]
    print(f"timing {args.method}/{args.dataset}: index {s['index_seconds']['mean']:.2f}s, "
          f"encode {s['encode_ms_per_batch']['mean']:.1f} ms/batch, search {s['search_ms_per_batch']['mean']:.1f} ms/batch")
    return 0
