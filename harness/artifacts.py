"""The artifact I/O every stage shares: doc-id files, hits from (scores, rows), run files with
their meta.json, and the config-hash check on load.

An artifact is a folder (model, index, metrics group) or a file (a run) with ``meta.json``
(folders) or ``<file>.meta.json`` (runs) beside it; see :mod:`harness.meta`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import DataError

DOCIDS = "docids.txt"
Hits = dict[str, list[tuple[str, float]]]


def write_docids(folder: Path, docids: Sequence[str]) -> Path:
    """One doc id per line, in row order of the index that sits beside it."""
    path = Path(folder) / DOCIDS
    path.write_text("".join(f"{d}\n" for d in docids), encoding="utf-8")
    return path


def read_docids(folder: Path, expect: int | None = None) -> list[str]:
    """Doc ids of an index folder; ``expect`` (the index's row count) is checked."""
    path = Path(folder) / DOCIDS
    if not path.exists():
        raise DataError(f"{path} does not exist", fix="rebuild the index (its folder is incomplete)")
    ids = path.read_text(encoding="utf-8").split("\n")
    if ids and ids[-1] == "":
        ids.pop()
    if expect is not None and len(ids) != expect:
        raise DataError(f"{path}: {len(ids)} doc ids for {expect} indexed rows", fix="rebuild the index")
    return ids


def hits_from_rows(docids: Sequence[str], qids: Sequence[str], scores: np.ndarray, rows: np.ndarray) -> Hits:
    """{qid: [(docid, score), ...]} from a search's (scores, rows); rows < 0 (padding) dropped."""
    return {q: [(docids[int(r)], float(s)) for s, r in zip(srow, rrow) if r >= 0]
            for q, srow, rrow in zip(qids, scores, rows)}


def write_run_with_meta(path: Path, hits: Mapping[str, Sequence[tuple[str, float]]], *, system: str,
                        meta: Mapping[str, Any]) -> None:
    """A TREC run file and ``<run>.meta.json`` (system, query count, commit, versions, hardware, ...)."""
    from harness.io import write_json
    from harness.meta import git_commit, hardware, versions
    from harness.runs import write_run

    write_run(path, hits, tag=system)
    write_json(Path(f"{path}.meta.json"), {
        "kind": "run", "system": system, "queries": len(hits), **meta,
        "git_commit": git_commit(), "versions": versions(), "hardware": hardware(),
    })
