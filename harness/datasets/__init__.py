"""Datasets: one module per family, registered by name, each preparing a dataset folder.

A prepared dataset folder (``results/<profile>/data/<key>/``) holds:
``corpus.jsonl`` (id, title, text), ``queries-<split>.jsonl`` (id, text, answers?, gold?),
``qrels-test.txt`` (TREC qrels, for qrels datasets) and ``meta.json`` (ids, counts, sources).
:func:`prepare` adds ``empty_answers`` to every dataset's meta: per split, the questions with a gold
answer that has no token (empty or white space only), which DPR's string rule finds in every
passage (harness.datasets.answers).

Relevance (config key ``datasets.<key>.relevance``): ``answers`` (default) leaves the folder as the
family writes it, and QA datasets are judged by answer strings; ``gold`` makes a QA dataset a
qrels dataset: :func:`prepare` (re)writes ``qrels-test.txt`` from the test queries' gold passage
ids (relevance 1), and evaluation uses those qrels instead of the answer rule (QCR's setting).
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.datasets.store import Doc, Query  # noqa: F401 (the record types, defined beside their files)
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
FAMILIES.add("synthetic", "harness.datasets.synthetic")   # payloads with the papers' shapes (scale overlay)


RELEVANCE = ("answers", "gold")


def relevance(key: str, dcfg: Mapping[str, Any]) -> str:
    """The dataset's ``relevance`` setting (``answers`` when unset); a bad value is a ConfigError."""
    from harness.errors import ConfigError

    value = dcfg.get("relevance", "answers")
    if value not in RELEVANCE:
        raise ConfigError(f"config key datasets.{key}.relevance: {value!r} is not one of {', '.join(RELEVANCE)}",
                          fix="use answers (answer strings) or gold (gold passage ids as qrels)")
    return value


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """Prepare dataset ``key`` into folder ``out`` with its family's module; returns meta.
    With ``relevance: gold`` the family's folder then gets gold qrels (:func:`write_gold_qrels`)."""
    rel = relevance(key, dcfg)
    module = importlib.import_module(FAMILIES.get(dcfg["family"]))
    meta = module.prepare(key, dcfg, cfg, out)
    if rel == "gold":
        meta = {**meta, **write_gold_qrels(key, Path(out))}
    return {**meta, "empty_answers": count_empty_answers(Path(out))}


def count_empty_answers(folder: Path) -> dict[str, int]:
    """Per split present in ``folder`` (``queries-<split>.jsonl``), the number of questions with at
    least one gold answer that has no token (empty, white space only: ``answers.is_empty_answer``).
    DPR's string rule counts such an answer as found in any passage, so these questions are hits
    at every rank. Streams the written query files; splits without answers count 0."""
    from harness.datasets import store
    from harness.datasets.answers import is_empty_answer
    from harness.io import iter_jsonl

    prefix, suffix = store.queries_file(""), ".jsonl"
    prefix = prefix[: -len(suffix)]
    counts: dict[str, int] = {}
    for path in sorted(Path(folder).glob(store.queries_file("*"))):
        split = path.name[len(prefix): -len(suffix)]
        counts[split] = sum(1 for rec in iter_jsonl(path)
                            if any(isinstance(a, str) and is_empty_answer(a) for a in rec.get("answers") or ()))
    return counts


def write_gold_qrels(key: str, folder: Path) -> dict[str, Any]:
    """Write ``folder/qrels-test.txt`` from the test queries' ``gold`` ids (relevance 1), replacing
    any qrels the family wrote. Test queries without gold passages are left out and counted
    (``queries_without_gold``); when none has any, DataError. Returns the meta entries
    ``relevance``, ``qrels`` (judged queries) and ``queries_without_gold``."""
    from harness.datasets import store
    from harness.errors import DataError

    queries = store.read_queries(folder, "test")
    qrels = {q.id: {g: 1 for g in q.gold} for q in queries if q.gold}
    if not qrels:
        raise DataError(f"dataset {key}: none of its {len(queries)} test queries has gold passage ids "
                        f"({folder / store.queries_file('test')}), so relevance gold has nothing to judge",
                        fix=f"drop datasets.{key}.relevance (use answers) or use a family that records gold passages")
    store.write_qrels(folder / store.QRELS, qrels)
    return {"relevance": "gold", "qrels": len(qrels), "queries_without_gold": len(queries) - len(qrels)}


def input_files(cfg: Mapping[str, Any], key: str) -> list[str]:
    """Local files that preparing dataset ``key`` reads, for Snakemake to track as inputs of its data rule.

    A family module lists them with a hook ``input_files(key, dcfg, cfg)`` (the smoke fixture);
    families without one read only downloads, which are checksummed instead, and give [].
    Paths inside the repository are relative to its root (the workflow's working directory).
    """
    import difflib

    from harness.errors import ConfigError

    if key not in cfg["datasets"]:
        close = difflib.get_close_matches(key, list(cfg["datasets"]), n=1)
        raise ConfigError(f"unknown dataset {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                          + f"; config key datasets defines: {', '.join(cfg['datasets'])}")
    dcfg = cfg["datasets"][key]
    hook = getattr(importlib.import_module(FAMILIES.get(dcfg["family"])), "input_files", None)
    if hook is None:
        return []
    repo = Path(__file__).resolve().parents[2]
    out = []
    for p in hook(key, dcfg, cfg):
        p = Path(p).resolve()
        out.append(str(p.relative_to(repo)) if p.is_relative_to(repo) else str(p))
    return out
