"""`python -m harness index --method M --dataset KEY --out DIR [--model DIR]`: build an index.

The index folder holds the backend's files and a meta.json (spec, build seconds, bytes on disk).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.io import atomic_path
from harness.meta import write_meta
from harness.methods import method_module
from harness.methods.base import Context


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness index", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--method", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", type=Path, help="trained model folder (neural methods)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    ctx = Context(cfg, args.method, args.dataset)
    ctx.data_dir()
    module = method_module(args.method)
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        info = module.build_index(ctx, tmp) if args.model is None else module.build_index(ctx, tmp, args.model)
        seconds = time.perf_counter() - t0
        write_meta(tmp, "index", spec=info.pop("spec"), config_hash=ctx.config_hash(), seconds=seconds,
                   extra={"method": args.method, "dataset": args.dataset, **info})
    print(f"index {args.method}/{args.dataset}: {info.get('documents')} documents in {seconds:.1f}s")
    return 0
