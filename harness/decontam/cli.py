"""The decontamination's commands (they load the whole config, so they sit above the plan):

- `python -m harness decontam --config YAML... --out-dir DIR`: the plan's decontamination job (its
  query sets from config key ``decontam``, its config hash in meta.json); with ``--train``/``--test``
  instead of ``--config``, any query files (:func:`harness.decontam.stage.main`).
- `python -m harness decontam-report`: LightRetriever's Tables 6 and 7 measured on this profile's
  decontamination (:func:`harness.decontam.report.render`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.decontam import stage
from harness.decontam.report import DEFAULT_K, DEFAULT_TABLE7, plan as query_sets, render


def report_main(argv: list[str]) -> int:
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


def decontam_main(argv: list[str]) -> int:
    """The plan's decontamination job with ``--config``; the stand-alone form otherwise."""
    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        return stage.main(argv)
    from harness import plan as hplan

    ap = argparse.ArgumentParser(prog="python -m harness decontam",
                                 description="the plan's decontamination job (config key decontam)",
                                 epilog="without --config: python -m harness decontam --train NAME=PATH ... "
                                        "--test NAME=PATH ... --out-dir DIR")
    add_config_argument(ap)
    ap.add_argument("--out-dir", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    p = hplan.get(cfg)
    job = p.job("decontam", "decontam")
    for role, ref in job.inputs.items():
        hplan.check_input(p, role, ref)
    train, test = query_sets(cfg)
    dc = cfg["decontam"]
    meta = stage.run([(s.name, s.path(cfg)) for s in train], [(s.name, s.path(cfg)) for s in test], args.out_dir,
                     k=int(dc.get("k", DEFAULT_K)), table7_per_set=int(dc.get("table7_per_set", DEFAULT_TABLE7)),
                     workers=int(dc.get("workers", 1)),
                     identity={"job": job.id, "config_hash": p.hash(job), "config_values": p.values(job),
                               "input_hashes": p.input_hashes(job)})
    stage.summary(meta, args.out_dir)
    return 0
