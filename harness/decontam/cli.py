"""`python -m harness decontam-report`: LightRetriever's Tables 6 and 7 measured on this profile's
decontamination (:func:`harness.decontam.report.render`). A command, so it may load the whole config."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.decontam.report import render


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness decontam-report", description="render LightRetriever Tables 6/7 for this profile's decontamination")
    add_config_argument(ap)
    ap.add_argument("--decontam", type=Path, required=True, help="output folder of rule decontam")
    ap.add_argument("--out", type=Path, required=True,
                    help="markdown of Table 6 (its .csv, 7-measured.md and 7-measured.csv are written beside it)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    paths = render(cfg, args.decontam, args.out)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
