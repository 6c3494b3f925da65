"""`python -m harness decontam`: drop training queries that near-duplicate a test query.

LightRetriever (following tDRO) removes from every training set the queries whose 64-bit
SimHash lies within Hamming distance k=2 of some test query (BEIR, C-MTEB, MIRACL).

    python -m harness decontam --train msmarco=train/msmarco.jsonl --train nq=train/nq.jsonl \\
        --test scifact=test/scifact.jsonl --test nfcorpus=test/nfcorpus.jsonl --k 2 --out-dir DIR

Inputs are JSONL, one object per line with at least "id" and "text" (other fields are kept
verbatim). Outputs in DIR:

* ``train/<NAME>.jsonl``: the input lines of the records without a near-duplicate,
  byte for byte (blank lines dropped, a missing final newline added);
* ``duplicates.jsonl``: one line per dropped record: train set, id, text, line number and
  its matching test queries (set, id, text, Hamming distance);
* ``table6.csv``: dataset,original,deduped,duplicates (LightRetriever's Table 6);
* ``table7.csv``: train_set,train_id,train_query,test_set,test_id,test_query: the first
  ``--table7-per-set`` pairs of each training set in file order (0 = all pairs);
* ``meta.json``: k, counts, seconds, versions; written last.

As in tDRO, test queries whose formatted text is empty are not indexed. Everything is
written under temporary names and renamed into place at the end (meta.json last), so a
killed run leaves nothing that looks finished.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import re
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.decontam.simhash import FingerprintIndex, fingerprints, format_query, pool_start_method
from harness.errors import ConfigError, DataError
from harness.io import atomic_path
from harness.meta import git_commit, hardware, versions

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CHUNK_LINES = 100_000


@dataclass
class TrainStats:
    """Counts for one training set (a row of Table 6)."""

    path: str
    original: int = 0
    duplicates: int = 0
    pairs: int = 0
    blank_lines: int = 0

    @property
    def deduped(self) -> int:
        return self.original - self.duplicates


@dataclass
class IndexedTests:
    """The indexed queries of all test sets, in order."""

    names: list[str] = field(default_factory=list)
    ids: list[Any] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    info: dict[str, dict[str, Any]] = field(default_factory=dict)


def _parse_spec(spec: str, flag: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"{flag} {spec!r}: expected NAME=PATH", fix=f"e.g. {flag} msmarco=data/msmarco.jsonl")
    if not _NAME_RE.match(name):
        raise ConfigError(
            f"{flag} {spec!r}: the name must be letters, digits, '.', '_' or '-' (it names an output file)",
            fix=f"e.g. {flag} my-set=PATH",
        )
    return name, Path(path)


def _parse_record(path: Path, lineno: int, raw: bytes) -> dict[str, Any] | None:
    """One JSONL line -> its record (None for a blank line). Bad lines raise DataError."""
    if not raw.strip():
        return None
    try:
        rec = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DataError(f"{path}:{lineno}: invalid JSON ({exc})", fix="write one JSON object per line") from None
    if not isinstance(rec, dict):
        raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}",
                        fix='write one object per line, e.g. {"id": "q1", "text": "..."}')
    for key in ("id", "text"):
        if key not in rec:
            raise DataError(f"{path}:{lineno}: the record has no {key!r} field",
                            fix='every line needs "id" and "text", e.g. {"id": "q1", "text": "..."}')
    if not isinstance(rec["text"], str):
        raise DataError(f"{path}:{lineno}: 'text' is {type(rec['text']).__name__}, not a string",
                        fix="make 'text' a JSON string")
    return rec


def _read_chunks(path: Path, chunk: int = _CHUNK_LINES) -> Iterator[tuple[int, list[bytes]]]:
    """(first line number, raw lines) in chunks; a missing file raises DataError."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder, not a JSONL file", fix="give the path of a .jsonl file")
    if not path.is_file():
        raise DataError(f"{path}: no such file", fix="check the path given to --train/--test")
    with open(path, "rb") as fh:
        first, lines = 1, []
        for raw in fh:
            lines.append(raw)
            if len(lines) >= chunk:
                yield first, lines
                first, lines = first + len(lines), []
        if lines:
            yield first, lines


def _fingerprint_lines(task: tuple[str, int, list[bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """Parse and fingerprint a chunk of lines: (line offsets of the records, fingerprints).

    Runs in the main process or in a worker; only fingerprints travel back.
    """
    path_s, first, lines = task
    path = Path(path_s)
    rows, texts = [], []
    for i, raw in enumerate(lines):
        rec = _parse_record(path, first + i, raw)
        if rec is not None:
            rows.append(i)
            texts.append(rec["text"])
    return np.asarray(rows, dtype=np.int64), fingerprints(texts)


def load_tests(specs: list[tuple[str, Path]]) -> IndexedTests:
    """Read every test set; records whose formatted text is empty are skipped (tDRO)."""
    tests = IndexedTests()
    for name, path in specs:
        n = skipped = 0
        for first, lines in _read_chunks(path):
            for i, raw in enumerate(lines):
                rec = _parse_record(path, first + i, raw)
                if rec is None:
                    continue
                n += 1
                if not format_query(rec["text"]):
                    skipped += 1
                    continue
                tests.names.append(name)
                tests.ids.append(rec["id"])
                tests.texts.append(rec["text"])
        tests.info[name] = {"path": str(path), "records": n, "skipped_empty": skipped, "indexed": n - skipped}
    return tests


@contextlib.contextmanager
def _worker_pool(workers: int) -> Iterator[Any]:
    """A pool of ``workers`` processes that parse and fingerprint (None for one worker), closed
    and joined on success, terminated on any error."""
    if workers <= 1:
        yield None
        return
    import multiprocessing as mp

    pool = mp.get_context(pool_start_method()).Pool(workers)  # not fork: see pool_start_method
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()


def run(
    train_specs: list[tuple[str, Path]],
    test_specs: list[tuple[str, Path]],
    out_dir: Path,
    *,
    k: int = 2,
    table7_per_set: int = 5,
    workers: int = 1,
    chunk: int = _CHUNK_LINES,
    identity: dict[str, Any] | None = None,
    costed: bool = False,
) -> dict[str, Any]:
    """Decontaminate the training sets against the test sets; returns the meta record (with
    ``identity``, the plan job's config hash, values and input hashes, where the plan runs it; with
    ``costed``, its ``cost`` per 1,000 queries hashed, training and test sets together, which
    ``python -m harness estimate`` projects)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ConfigError(f"--k must be an integer >= 0, got {k!r}", fix="tDRO/LightRetriever use --k 2")
    if table7_per_set < 0:
        raise ConfigError(f"--table7-per-set must be >= 0, got {table7_per_set}", fix="0 keeps every pair")
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    for flag, specs in (("--train", train_specs), ("--test", test_specs)):
        if not specs:
            raise ConfigError(f"give at least one {flag} NAME=PATH")
        names = [n for n, _ in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{flag} names repeated: {', '.join(dup)}", fix="give every set its own name")

    t0 = time.perf_counter()
    tests = load_tests(test_specs)
    t_load = time.perf_counter() - t0
    test_fps = fingerprints(tests.texts)
    index = FingerprintIndex(test_fps, k)
    t_index = time.perf_counter() - t0 - t_load

    with atomic_path(out_dir) as tmp:   # the folder appears whole, meta.json and all, or not at all
        (tmp / "train").mkdir(parents=True)
        with _worker_pool(workers) as pool:
            stats, table7 = _scan(train_specs, tests, test_fps, index, tmp, pool, workers, chunk, table7_per_set)
        written = ["duplicates.jsonl", *(f"train/{name}.jsonl" for name, _ in train_specs), "table6.csv", "table7.csv"]
        with open(tmp / "table6.csv", "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["dataset", "original", "deduped", "duplicates"])
            for name, st in stats.items():
                w.writerow([name, st.original, st.deduped, st.duplicates])
        with open(tmp / "table7.csv", "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["train_set", "train_id", "train_query", "test_set", "test_id", "test_query"])
            w.writerows(table7)
        meta = _meta(k, stats, tests, table7, table7_per_set, workers,
                     {"load_tests": round(t_load, 3), "index_tests": round(t_index, 3),
                      "total": round(time.perf_counter() - t0, 3)})
        meta["bytes"] = {rel: (tmp / rel).stat().st_size for rel in written}
        meta.update(identity or {})
        if costed:
            from harness import cost

            queries = meta["totals"]["original"] + sum(int(t.get("records", 0)) for t in tests.info.values())
            meta["queries"] = queries
            meta["cost"] = cost.record("decontam", {"queries": queries}, time.perf_counter() - t0)
        with open(tmp / "meta.json", "w", encoding="utf-8") as fh:
            fh.write(json.dumps(meta, indent=2, ensure_ascii=False, default=str) + "\n")
    return meta


def _scan(train_specs: list[tuple[str, Path]], tests: Any, test_fps: np.ndarray, index: FingerprintIndex,
          tmp: Path, pool: Any, workers: int, chunk: int,
          table7_per_set: int) -> tuple[dict[str, TrainStats], list[list[Any]]]:
    """Each training set streamed in chunks against the test index: the kept lines to
    ``tmp/train/<name>.jsonl``, every duplicate with its matches to ``tmp/duplicates.jsonl``;
    returns the counts per set and Table 7's sample pairs."""
    stats: dict[str, TrainStats] = {}
    table7: list[list[Any]] = []
    with open(tmp / "duplicates.jsonl", "w", encoding="utf-8") as dup_fh:
        for name, path in train_specs:
            st = stats[name] = TrainStats(path=str(path))
            sampled = 0
            with open(tmp / "train" / f"{name}.jsonl", "wb") as keep_fh:
                for first, lines, rows, fps in _fingerprinted_chunks(path, chunk, pool, workers):
                    st.blank_lines += len(lines) - len(rows)
                    st.original += len(rows)
                    qi, tj = index.query(fps)
                    is_dup = np.zeros(len(rows), dtype=bool)
                    is_dup[qi] = True
                    keep_fh.writelines(_with_newline(lines[r]) for r in rows[~is_dup].tolist())
                    if not len(qi):
                        continue
                    st.duplicates += int(is_dup.sum())
                    st.pairs += len(qi)
                    bounds = np.flatnonzero(np.diff(qi)) + 1
                    for s, e in zip(np.concatenate(([0], bounds)).tolist(),
                                    np.concatenate((bounds, [len(qi)])).tolist()):
                        q = int(qi[s])
                        r = int(rows[q])
                        rec = json.loads(lines[r])
                        matches = []
                        for j in tj[s:e].tolist():
                            matches.append({
                                "test_set": tests.names[j], "test_id": tests.ids[j],
                                "test_text": tests.texts[j],
                                "distance": int(np.bitwise_count(fps[q] ^ test_fps[j])),
                            })
                            if table7_per_set == 0 or sampled < table7_per_set:
                                table7.append([name, rec["id"], rec["text"], tests.names[j],
                                               tests.ids[j], tests.texts[j]])
                                sampled += 1
                        dup_fh.write(json.dumps({
                            "train_set": name, "train_id": rec["id"], "train_text": rec["text"],
                            "line": first + r, "duplicates": matches,
                        }, ensure_ascii=False) + "\n")
    return stats, table7


def _meta(k: int, stats: dict[str, TrainStats], tests: Any, table7: list[list[Any]], table7_per_set: int,
          workers: int, seconds: dict[str, float]) -> dict[str, Any]:
    """The decontamination's meta.json record (provenance from harness.meta)."""
    return {
        "kind": "decontam",
        "method": "SimHash 64-bit (PyPI simhash defaults, tDRO format_query), near-duplicate = "
                  "Hamming distance <= k to any indexed test query",
        "k": k,
        "train": {n: {"path": s.path, "original": s.original, "deduped": s.deduped,
                      "duplicates": s.duplicates, "pairs": s.pairs, "blank_lines": s.blank_lines}
                  for n, s in stats.items()},
        "test": tests.info,
        "notes": [
            "test records whose text is empty after format_query (e.g. only '_') are not indexed, as in tDRO",
            ("texts without word characters (e.g. '???', '!!') all hash the empty feature: a training query "
             "without word characters matches every such test query (distance 0), as in tDRO"),
        ],
        "totals": {"original": sum(s.original for s in stats.values()),
                   "deduped": sum(s.deduped for s in stats.values()),
                   "duplicates": sum(s.duplicates for s in stats.values()),
                   "pairs": sum(s.pairs for s in stats.values()),
                   "test_indexed": len(tests.texts)},
        "table7": {"per_train_set": table7_per_set or "all", "rows": len(table7),
                   "selection": "all pairs" if table7_per_set == 0
                   else f"first {table7_per_set} pairs of each training set, in file order"},
        "seconds": seconds,
        "workers": workers,
        "versions": versions(("simhash", "ir-repro-harness")),
        "git_commit": git_commit(),
        "hardware": hardware(),
    }


def _fingerprinted_chunks(
    path: Path, chunk: int, pool: Any, workers: int
) -> Iterator[tuple[int, list[bytes], np.ndarray, np.ndarray]]:
    """(first line number, raw lines, record rows, fingerprints) per chunk, in file order.

    With a pool, at most ``2 * workers`` chunks are in flight, so memory stays bounded.
    """
    if pool is None:
        for first, lines in _read_chunks(path, chunk):
            yield (first, lines, *_fingerprint_lines((str(path), first, lines)))
        return
    inflight: deque = deque()
    for first, lines in _read_chunks(path, chunk):
        inflight.append((first, lines, pool.apply_async(_fingerprint_lines, ((str(path), first, lines),))))
        if len(inflight) >= 2 * workers:
            f, ls, res = inflight.popleft()
            yield (f, ls, *res.get())
    while inflight:
        f, ls, res = inflight.popleft()
        yield (f, ls, *res.get())


def _with_newline(raw: bytes) -> bytes:
    return raw if raw.endswith(b"\n") else raw + b"\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness decontam", description=__doc__.split("\n")[0])
    ap.add_argument("--train", action="append", default=[], metavar="NAME=PATH", help="a training set (repeat)")
    ap.add_argument("--test", action="append", default=[], metavar="NAME=PATH", help="a test set (repeat)")
    ap.add_argument("--k", type=int, default=2, help="Hamming distance threshold (tDRO: 2)")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--table7-per-set", type=int, default=5,
                    help="pairs per training set in table7.csv, first in file order (0 = all; default 5)")
    ap.add_argument("--workers", type=int, default=1, help="processes that parse and fingerprint (default 1)")
    args = ap.parse_args(argv)
    train = [_parse_spec(s, "--train") for s in args.train]
    test = [_parse_spec(s, "--test") for s in args.test]
    meta = run(train, test, args.out_dir, k=args.k, table7_per_set=args.table7_per_set, workers=args.workers)
    summary(meta, args.out_dir)
    return 0


def summary(meta: dict[str, Any], out_dir: Path) -> None:
    """One line: what the decontamination dropped, and where it wrote."""
    tot = meta["totals"]
    print(f"decontam: {tot['original']} training queries, {tot['duplicates']} dropped "
          f"({tot['pairs']} pairs) against {tot['test_indexed']} test queries, k={meta['k']}, "
          f"{meta['seconds']['total']:.1f}s -> {out_dir}")
