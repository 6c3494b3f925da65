"""`python -m harness search --method M --dataset KEY --index DIR --out RUN`: TREC run + meta.json.

Searches the test queries of the dataset to depth ``evaluate.depth``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.datasets import store
from harness.io import write_json
from harness.meta import git_commit, hardware, versions
from harness.methods import method_module
from harness.methods.base import Context
from harness.runs import write_run


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness search", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--method", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", type=Path, required=True, help="run file; <out>.meta.json is written beside it")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    ctx = Context(cfg, args.method, args.dataset)
    queries = store.read_queries(ctx.data_dir(), args.split)
    module = method_module(args.method)
    k = cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    if args.model is None:
        results = module.search(ctx, args.index, queries, k)
    else:
        results = module.search(ctx, args.index, queries, k, args.model)
    seconds = time.perf_counter() - t0
    write_run(args.out, results, tag=f"{args.method}")
    write_json(Path(f"{args.out}.meta.json"), {
        "kind": "run", "method": args.method, "dataset": args.dataset, "split": args.split, "depth": k,
        "queries": len(queries), "seconds": round(seconds, 3), "config_hash": ctx.config_hash(),
        "git_commit": git_commit(), "versions": versions(), "hardware": hardware(),
        "note": "wall time of the whole search call (model loading and query encoding included); see timing/ for protocol timings",
    })
    print(f"search {args.method}/{args.dataset}: {len(queries)} queries in {seconds:.1f}s")
    return 0
