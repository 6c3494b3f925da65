"""TREC run files: ``qid Q0 docid rank score tag``, best first per query."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import DataError
from harness.io import atomic_path


def write_run(path: Path, results: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> None:
    with atomic_path(Path(path)) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for qid, hits in results.items():
            fh.writelines(f"{qid} Q0 {doc_id} {rank} {score:.6f} {tag}\n" for rank, (doc_id, score) in enumerate(hits, 1))


def read_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    """Results per query, sorted by rank; malformed lines raise DataError with file:line."""
    rows: dict[str, list[tuple[int, str, float]]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise DataError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag'")
            try:
                rows.setdefault(parts[0], []).append((int(parts[3]), parts[2], float(parts[4])))
            except ValueError:
                raise DataError(f"{path}:{lineno}: rank/score are not numbers") from None
    return {q: [(d, s) for _, d, s in sorted(hits)] for q, hits in rows.items()}
