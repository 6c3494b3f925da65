"""`python -m harness <command> ...`: the one entry point every Snakemake rule calls.

Each command lives in its own module and is imported only when used, so that
`python -m harness --help` stays fast (pyserini and torch are slow to import).
"""
from __future__ import annotations

import importlib
import sys

from harness.errors import HarnessError

# command -> (module, one-line help). Each module defines `main(argv: list[str]) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "config": ("harness.config", "validate and print the resolved configuration"),
    "data": ("harness.datasets.cli", "prepare a dataset (download/verify/convert) into the results tree"),
    "bm25-negatives": ("harness.methods.negatives", "mine BM25 hard negatives for training questions"),
    "train": ("harness.methods.cli", "train a method's model"),
    "index": ("harness.indexes.cli", "build an index variant"),
    "search": ("harness.search", "search an index and write a TREC run + meta.json"),
    "evaluate": ("harness.evaluate.cli", "evaluate a run (QA top-k accuracy or ir_measures)"),
    "timing": ("harness.timing", "time index build and search with a paper's protocol"),
    "table": ("harness.tables.render", "render one paper table (measured beside published)"),
    "index-html": ("harness.tables.html", "write results/index.html linking every table"),
    "published": ("harness.tables.published", "print the published numbers of a paper"),
    "regress": ("harness.regress", "compare measured values with configs/expected/<profile>.yaml"),
    "claims": ("harness.claims", "evaluate configs/claims.yaml on measured values"),
    "decontam": ("harness.decontam.stage", "remove test-set near-duplicates from training queries"),
    "decontam-report": ("harness.decontam.report", "render LightRetriever Tables 6/7 for this profile's decontamination"),
    "datasets": ("harness.datasets.catalog", "the dataset registry: --cards (docs/datasets.md), --list, --check"),
    "bench": ("harness.bench", "run a benchmark and print its figures"),
}


def _usage() -> str:
    lines = ["usage: python -m harness <command> [options]", "", "commands:"]
    lines += [f"  {name:<15} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n{_usage()}", file=sys.stderr)
        return 2
    try:
        if name == "bench":
            from harness.bench import BENCHMARKS, run

            if not rest or rest[0] in {"-h", "--help"}:
                print("usage: python -m harness bench <name> [options]\nbenchmarks: " + ", ".join(BENCHMARKS))
                return 0
            return run(rest[0], rest[1:])
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
