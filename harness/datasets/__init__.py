"""Datasets: one module per family, registered by name, each preparing a dataset folder.

A prepared dataset folder (``results/<profile>/data/<key>/``) holds:
``corpus.jsonl`` (id, title, text), ``queries-<split>.jsonl`` (id, text, answers?, gold?),
``qrels-test.txt`` (TREC qrels, for qrels datasets) and ``meta.json`` (ids, counts, sources).
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from harness.registry import Registry

FAMILIES: Registry[str] = Registry("dataset family")
FAMILIES.add("smoke", "harness.datasets.smoke")
FAMILIES.add("squad-open", "harness.datasets.squad")
FAMILIES.add("beir", "harness.datasets.beir")
FAMILIES.add("ir-datasets", "harness.datasets.irds")
# registry-driven families (file locations and checksums from configs/datasets.yaml)
FAMILIES.add("qa-list", "harness.datasets.qa_lists")
FAMILIES.add("classic", "harness.datasets.classic")
FAMILIES.add("squad-style", "harness.datasets.squad_style")
FAMILIES.add("beir-queries", "harness.datasets.beir_queries")
FAMILIES.add("msmarco-passage", "harness.datasets.msmarco")
FAMILIES.add("dpr-wiki", "harness.datasets.dpr_wiki")
FAMILIES.add("kilt", "harness.datasets.kilt")
FAMILIES.add("mteb", "harness.datasets.cmteb")
FAMILIES.add("training-pairs", "harness.datasets.training_pairs")


class Doc(NamedTuple):
    id: str
    title: str
    text: str


class Query(NamedTuple):
    id: str
    text: str
    answers: list[str] | None = None
    gold: list[str] | None = None


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """Prepare dataset ``key`` into folder ``out`` with its family's module; returns meta."""
    module = importlib.import_module(FAMILIES.get(dcfg["family"]))
    return module.prepare(key, dcfg, cfg, out)
