"""Any dataset that ir_datasets covers (family ``ir-datasets``), e.g. the DPR Wikipedia
benchmarks ``dpr-w100/natural-questions/test`` (21,015,324 passages; questions with answers).

ir_datasets downloads and checksums the official files itself (needs internet or its own
cache, ``IR_DATASETS_HOME``). Documents are streamed to corpus.jsonl, never held in memory.
Config keys: ``id`` (the test split's ir_datasets id) and ``train_id`` (optional, the split
whose queries train the methods; answers and qrels-derived gold passages are kept).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, store
from harness.errors import DataError, DependencyError


def load(dataset_id: str):
    """``ir_datasets.load(dataset_id)``: the one loader of the harness (every family that reads
    ir_datasets comes here), with a missing package or an unknown id as a one-line error. Its
    ``*_iter()`` methods (where ir_datasets downloads, lazily) are guarded too (:class:`Guarded`)."""
    try:
        import ir_datasets
    except ImportError:
        raise DependencyError("ir_datasets is not installed", fix="pip install ir_datasets==0.6.3") from None
    try:
        return Guarded(ir_datasets.load(dataset_id), dataset_id)
    except KeyError:
        raise DataError(f"ir_datasets has no dataset {dataset_id!r} (config key datasets.*.id or a dataset card)") from None


def cache_dir() -> str:
    """Where ir_datasets keeps its files (env IR_DATASETS_HOME, default ~/.ir_datasets)."""
    import os

    return os.environ.get("IR_DATASETS_HOME") or str(Path.home() / ".ir_datasets")


class Guarded:
    """An ir_datasets dataset whose iterators fail with one line: a package extra the dataset needs
    (ir_datasets raises ImportError on first use), or a download that cannot happen (offline, an
    unreachable host, an empty cache), naming the dataset id, the cache and the fix."""

    def __init__(self, ds: Any, dataset_id: str) -> None:
        self._ds, self._id = ds, dataset_id

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ds, name)
        if not (name.endswith("_iter") and callable(attr)):
            return attr

        def guarded(*args: Any, **kw: Any) -> Iterator[Any]:
            try:
                yield from attr(*args, **kw)
            except ImportError as exc:
                raise DependencyError(f"ir_datasets {self._id}: {exc}",
                                      fix="pip install the package it names (pyproject.toml pins the extras the "
                                          "profiles need; bash scripts/setup.sh installs them)") from None
            except OSError as exc:  # ConnectionError and requests' errors are OSErrors
                raise DataError(f"ir_datasets {self._id}: {name} needs a download that failed "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                                f"its cache {cache_dir()} does not hold it",
                                fix=f"fill {cache_dir()} on a machine with internet (python -c \"import ir_datasets; "
                                    f"[None for _ in ir_datasets.load('{self._id}').{name}()]\") and copy it here, "
                                    "or set IR_DATASETS_HOME to a filled cache") from None
            except Exception as exc:  # noqa: BLE001 (requests' errors and ir_datasets' own, one line each)
                if type(exc).__module__.split(".")[0] not in ("requests", "urllib3", "ir_datasets"):
                    raise
                raise DataError(f"ir_datasets {self._id}: {name} failed ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}); cache {cache_dir()}",
                                fix="check the network or fill the cache (IR_DATASETS_HOME)") from None

        return guarded


def _docs(ds) -> Iterator[Doc]:
    for d in ds.docs_iter():
        yield Doc(str(d.doc_id), getattr(d, "title", "") or "", d.text)


def _queries(ds) -> tuple[list[Query], dict[str, dict[str, int]]]:
    qrels: dict[str, dict[str, int]] = {}
    if ds.has_qrels():
        for q in ds.qrels_iter():
            if q.relevance > 0:
                qrels.setdefault(q.query_id, {})[q.doc_id] = int(q.relevance)
    out = []
    for q in ds.queries_iter():
        answers = list(q.answers) if hasattr(q, "answers") else None
        gold = sorted(qrels.get(q.query_id, {})) or None
        out.append(Query(str(q.query_id), q.text, answers, gold))
    return out, qrels


def prepare(key: str, dcfg: Mapping[str, Any], cfg: Mapping[str, Any], out: Path) -> dict[str, Any]:
    test = load(dcfg["id"])
    n_docs = store.write_corpus(out, _docs(test))
    queries, qrels = _queries(test)
    counts = {"test": store.write_queries(out, "test", queries)}
    if qrels:
        store.write_qrels(out / store.QRELS, qrels)
    if dcfg.get("train_id"):
        train_q, _ = _queries(load(dcfg["train_id"]))
        counts["train"] = store.write_queries(out, "train", train_q)
    return {"documents": n_docs, "queries": counts, "source": {"ir_datasets": [dcfg["id"], dcfg.get("train_id")]}}
