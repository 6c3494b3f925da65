"""`python -m harness bench backbones`: is each configured backbone really pretrained, and how good
a retriever is it before any training? For every backbone whose weights install offline (config
``backbones``, source ``package:`` or ``path:``) and for a randomly initialised model of the same
configuration (the control): its size, the masked-LM probe (harness.models.probe.PROBES, hits in the
top 5) where it has an MLM head, and zero-shot nDCG@10 / R@100 on BEIR SciFact's test queries
(dense mean pooling; SPLADE max pooling where it has an MLM head), read from the data mirror.

What it showed is written down in docs/backbones.md. No target: a benchmark prints figures.

    HARNESS_DATA_MIRROR=../shared/data python -m harness bench backbones
    python -m harness bench backbones --backbones splade-tiny --max-docs 1000 --json out.json
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

MEASURES = ("nDCG@10", "R@100")

def _scifact(mirror: str | None, max_docs: int | None, seed: int):
    """SciFact's test collection from the mirror (harness.datasets.beir); with ``max_docs``, every
    judged document plus a seeded sample of the others."""
    from harness.datasets import beir, store

    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"data": {"cache_dir": str(Path(tmp) / "cache"), "mirror": mirror, "offline": True}}
        beir.prepare("scifact", {"name": "scifact"}, cfg, Path(tmp) / "d")
        docs = [(d.id, f"{d.title} {d.text}".strip()) for d in store.iter_corpus(Path(tmp) / "d")]
        queries = [(q.id, q.text) for q in store.read_queries(Path(tmp) / "d", "test")]
        qrels = store.read_qrels(Path(tmp) / "d" / store.QRELS)
    if max_docs and max_docs < len(docs):
        judged = {d for r in qrels.values() for d in r}
        rest = [d for d in docs if d[0] not in judged]
        random.Random(seed).shuffle(rest)
        docs = [d for d in docs if d[0] in judged] + rest[:max(0, max_docs - len(judged))]
    return docs, queries, qrels


def _size(path: str) -> dict[str, Any]:
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(path)
    weights = sum(p.stat().st_size for p in Path(path).glob("*.safetensors")) or \
        sum(p.stat().st_size for p in Path(path).glob("*.bin"))
    return {"architecture": (c.architectures or [c.model_type])[0], "layers": getattr(c, "num_hidden_layers", None),
            "hidden": getattr(c, "hidden_size", None), "vocab": getattr(c, "vocab_size", None),
            "weights_mb": round(weights / 2**20, 1)}


def main(argv: list[str]) -> int:
    """Load, probe, retrieve, print (a script in the order it measures)."""
    from harness.config import load_config
    from harness.evaluate.ir import evaluate
    from harness.models import probe
    from harness.models.backbones import model_dir

    ap = argparse.ArgumentParser(prog="python -m harness bench backbones", description=__doc__.split("\n")[0])
    ap.add_argument("--backbones", nargs="*", help="names in config backbones (default: every offline one)")
    ap.add_argument("--mirror", help="data mirror folder (default: env HARNESS_DATA_MIRROR)")
    ap.add_argument("--max-docs", type=int, help="judged documents plus a sample of the rest (default: all 5,183)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--no-twin", action="store_true", help="skip the randomly initialised control")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    specs = load_config()["backbones"]
    names = a.backbones or [n for n, s in specs.items() if not s["source"].startswith("hub:")]
    docs, queries, qrels = _scifact(a.mirror, a.max_docs, a.seed)
    print(f"SciFact test: {len(queries)} queries, {len(docs)} documents, max length {a.max_length}")
    report: dict[str, Any] = {"queries": len(queries), "documents": len(docs), "backbones": {}}
    for name in names:
        spec = specs[name]
        path, mlm = model_dir(name, spec), bool(spec.get("has_mlm_head"))
        row: dict[str, Any] = {"source": spec["source"], **_size(path)}
        for label, loaded in (("pretrained", lambda: probe.load(path, mlm)),
                              *(() if a.no_twin else (("random init", lambda: probe.random_twin(path, mlm, a.seed)),))):
            m, t0 = loaded(), time.perf_counter()
            res = {"mlm": probe.mlm_probe(m)}
            for kind in ("dense", "sparse") if mlm else ("dense",):
                run, info = probe.zero_shot(m, docs, queries, kind, max_length=a.max_length)
                res[kind] = {**info, **evaluate(qrels, run, MEASURES)}
            res["seconds"] = round(time.perf_counter() - t0, 1)
            row[label] = res
            mp = res["mlm"]
            mlm_txt = "no MLM head" if mp["hits"] is None else f"MLM probe {mp['hits']}/{mp['of']} in top 5"
            sparse = f", sparse (SPLADE) {res['sparse']['nDCG@10']:.3f}" if "sparse" in res else ""
            print(f"{name} [{label}] {row['architecture']} {row['layers']}x{row['hidden']}, {row['weights_mb']} MB: "
                  f"{mlm_txt}; SciFact nDCG@10 dense {res['dense']['nDCG@10']:.3f}{sparse} ({res['seconds']} s)")
            if mp["hits"] is not None and label == "pretrained":
                for p in mp["probes"]:
                    print(f"    {p['probe']!r}: {', '.join(p['top'])}")
        report["backbones"][name] = row
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0
