"""C-MTEB retrieval sets through mteb (family ``mteb``): T2, MMarco, Du, Covid, Cmedqa, Ecom,
Medical and Video retrieval, as LightRetriever Tables 2 and 10 evaluate them (dev split).

mteb downloads each set from the Hugging Face hub at the revision pinned in its task metadata
(recorded in configs/datasets.yaml); set ``HF_HOME`` / ``HF_HUB_OFFLINE=1`` to use a filled cache.
The corpus is written record by record from the Hugging Face dataset (Arrow-backed, memory-mapped).

Config: ``card`` (e.g. cmteb-t2; default the dataset key) or ``name`` (the mteb task name).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, catalog, store
from harness.errors import DataError, DependencyError

SPLIT = "dev"


def task_name(key: str, dcfg: Mapping[str, Any]) -> tuple[str, str]:
    """(card key, mteb task name)."""
    if dcfg.get("card"):
        ckey = str(dcfg["card"])
    elif dcfg.get("name"):
        ckey = f"cmteb-{str(dcfg['name']).lower().replace('retrieval', '')}"
    else:
        ckey = key
    cid = catalog.split_entry(ckey, SPLIT)["id"]
    return ckey, cid.rsplit("/", 1)[-1]


def load_split(name: str) -> dict[str, Any]:
    try:
        import mteb
    except ImportError:
        raise DependencyError("mteb is not installed", fix="pip install mteb") from None
    task = mteb.get_task(name)
    try:
        task.load_data()
    except Exception as exc:  # noqa: BLE001 -- network, hub and cache errors come in many types
        raise DataError(f"mteb could not load {name} ({type(exc).__name__}: {str(exc)[:200]})",
                        fix="needs the Hugging Face hub, or its cache with HF_HUB_OFFLINE=1 (HF_HOME)") from None
    data = task.dataset
    subset = data.get("default") or next(iter(data.values()))
    if SPLIT not in subset:
        raise DataError(f"mteb task {name} has no {SPLIT} split (has {', '.join(subset)})")
    return subset[SPLIT]


def _docs(corpus: Any) -> Iterator[Doc]:
    for rec in corpus:
        yield Doc(str(rec["id"]), rec.get("title") or "", rec["text"])


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    ckey, name = task_name(key, dcfg)
    split = load_split(name)
    n_docs = store.write_corpus(out, _docs(split["corpus"]))
    qrels = {str(q): {str(d): int(r) for d, r in docs.items()} for q, docs in split["relevant_docs"].items()}
    queries = [Query(str(r["id"]), r["text"], None, sorted(d for d, rel in qrels.get(str(r["id"]), {}).items() if rel > 0) or None)
               for r in split["queries"]]
    doc_ids = frozenset(d.id for d in store.iter_corpus(out))
    unknown = sorted({d for r in qrels.values() for d in r if d not in doc_ids})
    if unknown:
        raise DataError(f"mteb {name}: {len(unknown)} judged documents are not in the corpus (e.g. {unknown[:3]})")
    n_q = store.write_queries(out, "test", queries)
    store.write_qrels(out / store.QRELS, qrels)
    entry = catalog.split_entry(ckey, SPLIT)
    return {"documents": n_docs, "queries": {"test": n_q}, "judgments": sum(len(r) for r in qrels.values()),
            "card": ckey, "canonical_ids": {"test": entry["id"]}, "mteb_task": name,
            "source": {"test": [{"url": f["url"], "revision": f.get("revision")} for f in entry["files"]]},
            "note": f"C-MTEB {name} {SPLIT} split, written as the harness's test split"}
