"""`python -m harness data --dataset KEY --out DIR`: fetch, verify and convert one dataset."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness import plan as hplan
from harness.config import add_config_argument, load_config
from harness.datasets import prepare
from harness.errors import ConfigError
from harness.io import atomic_path
from harness.meta import write_meta


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness data", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--dataset", required=True, help="dataset key (config key datasets.<key>)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.dataset not in cfg["datasets"]:
        raise ConfigError(f"unknown dataset {args.dataset!r}; config key datasets defines: {', '.join(cfg['datasets'])}")
    dcfg = cfg["datasets"][args.dataset]
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        info = prepare(args.dataset, dcfg, cfg, tmp)
        write_meta(tmp, "dataset", spec=dcfg["id"], config_hash=hplan.data_hash(cfg, args.dataset),
                   seconds=time.perf_counter() - t0, extra={"key": args.dataset, "family": dcfg["family"], **info})
    print(f"{args.dataset}: {info.get('documents')} documents, queries {info.get('queries')}")
    return 0
