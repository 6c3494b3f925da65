"""Benchmarks: `python -m harness bench <name> [options]`.

Each benchmark is a module with ``main(argv: list[str]) -> int`` that prints its figures
(and, with ``--json PATH``, writes them). Modules are imported only when run.
"""
from __future__ import annotations

import importlib

from harness.registry import Registry

BENCHMARKS: Registry[str] = Registry("benchmark")
BENCHMARKS.add("decontam", "harness.bench.decontam")
BENCHMARKS.add("beta-search", "harness.bench.beta_search")
BENCHMARKS.add("bpr-index", "harness.bench.bpr_index")
BENCHMARKS.add("lr-query-speed", "harness.bench.lr_query_speed")
BENCHMARKS.add("phrase-search", "harness.bench.phrase_search")
BENCHMARKS.add("numerics", "harness.bench.numerics")
BENCHMARKS.add("flat-search", "harness.bench.flat_search")
BENCHMARKS.add("backbones", "harness.bench.backbones")
BENCHMARKS.add("projection", "harness.bench.projection")
BENCHMARKS.add("qcr-loss", "harness.bench.qcr_loss")


def run(name: str, argv: list[str]) -> int:
    module = importlib.import_module(BENCHMARKS.get(name))
    return int(module.main(argv) or 0)
