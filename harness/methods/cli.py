"""`python -m harness train --method M --out DIR [--negatives FILE]`: train a method's model."""
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
    ap = argparse.ArgumentParser(prog="python -m harness train", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--method", required=True)
    ap.add_argument("--negatives", type=Path, help="BM25 hard negatives (JSONL) of the training questions")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    ctx = Context(cfg, args.method)
    module = method_module(args.method)
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        info = module.train(ctx, tmp, args.negatives)
        write_meta(tmp, "model", spec=args.method, config_hash=ctx.config_hash(),
                   seconds=time.perf_counter() - t0, extra=info)
    print(f"trained {args.method}: {info.get('steps')} steps in {time.perf_counter() - t0:.1f}s")
    return 0
