"""`python -m harness bench decontam`: our SimHash decontamination vs PyPI ``simhash``.

Both run in the same process, on the same real queries from ``../shared/data`` (BEIR,
MS MARCO, DPR/DrQA open-QA lists, NQ-open, WebQuestions, CuratedTREC, CMRC 2018, DRCD),
with tDRO's pipeline: fingerprint the test queries, build the index (k=2), fingerprint
every training query and look up its near-duplicates. The results must be identical.
Prints queries/s per phase, the end-to-end ratio and a projection to LightRetriever's
~9.2M training queries against ~100k test queries on this machine.
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.errors import ConfigError, DataError

# (relative path, format): queries LightRetriever would treat as test sets
TEST_SOURCES: list[tuple[str, str]] = [
    ("beir/arguana/topics.beir-v1.0.0-arguana.test.tsv.gz", "tsv"),
    ("beir/fiqa/topics.beir-v1.0.0-fiqa.test.tsv.gz", "tsv"),
    ("beir/nfcorpus/topics.beir-v1.0.0-nfcorpus.test.tsv.gz", "tsv"),
    ("beir/nq/topics.beir-v1.0.0-nq.test.tsv.gz", "tsv"),
    ("beir/scidocs/topics.beir-v1.0.0-scidocs.test.tsv.gz", "tsv"),
    ("beir/scifact/topics.beir-v1.0.0-scifact.test.tsv.gz", "tsv"),
    ("beir/trec-covid/topics.beir-v1.0.0-trec-covid.test.tsv.gz", "tsv"),
    ("msmarco_passage/topics.msmarco-passage.dev-subset.txt", "tsv"),
    ("msmarco_passage/topics.dl19-passage.txt", "tsv"),
    ("msmarco_passage/topics.dl20.txt", "tsv"),
    ("open_qa/dpr/topics.dpr.nq.test.txt", "dpr"),
    ("open_qa/dpr/topics.dpr.trivia.test.txt", "dpr"),
    ("open_qa/dpr/topics.dpr.squad.test.txt", "dpr"),
    ("open_qa/dpr/topics.dpr.wq.test.txt", "dpr"),
    ("open_qa/dpr/topics.dpr.curated.test.txt", "dpr"),
    ("zh/cmrc2018/cmrc2018_dev.json", "squad"),
    ("zh/drcd/DRCD_dev.json", "squad"),
    ("zh/drcd/DRCD_test.json", "squad"),
    ("nq_open/NQ-open.efficientqa.test.1.1.jsonl", "jsonl"),
]
# ... and queries playing the training side (some overlap the test side, as in real life)
TRAIN_SOURCES: list[tuple[str, str]] = [
    ("open_qa/dpr/topics.dpr.nq.dev.txt", "dpr"),
    ("open_qa/dpr/topics.dpr.trivia.dev.txt", "dpr"),
    ("open_qa/drqa/CuratedTrec-train.txt", "jsonl"),
    ("open_qa/drqa/WebQuestions-train.txt", "jsonl"),
    ("open_qa/drqa/WikiMovies-test.txt", "jsonl"),
    ("nq_open/NQ-open.dev.jsonl", "jsonl"),
    ("nq_open/NQ-open.efficientqa.dev.1.1.jsonl", "jsonl"),
    ("zh/cmrc2018/cmrc2018_trial.json", "squad"),
    ("webquestions_brmson/main/trainmodel.json", "brmson"),
    ("webquestions_brmson/main/val.json", "brmson"),
    ("webquestions_brmson/main/devtest.json", "brmson"),
    ("curatedtrec_brmson/large2470-train.tsv", "curated"),
]

LIGHTRETRIEVER_TRAIN = 9_200_000  # sum of Table 6's "Original Size" column (~9.2M)
TEST_QUERIES = 100_000  # order of BEIR + C-MTEB + MIRACL test/dev queries


def default_data_dir() -> Path:
    """``<repo>/../shared/data``."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _read_source(path: Path, fmt: str) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    out: list[str] = []
    if fmt in {"squad", "brmson"}:
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
        if fmt == "brmson":
            return [rec["qText"] for rec in data]
        for article in data["data"]:
            for para in article["paragraphs"]:
                out += [qa["question"] for qa in para["qas"]]
        return out
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if fmt == "tsv":  # qid<TAB>text
                out.append(line.split("\t", 1)[1])
            elif fmt == "curated":  # id<TAB>type<TAB>question<TAB>answer
                out.append(line.split("\t")[2])
            elif fmt == "jsonl" or (fmt == "dpr" and line.startswith("{")):
                out.append(json.loads(line)["question"])
            else:  # DPR QA list: question<TAB>answers
                out.append(line.split("\t", 1)[0])
    return out


def load_queries(data_dir: Path, sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(source file, query text) for every query of the given sources that exists."""
    data_dir = Path(data_dir)
    out: list[tuple[str, str]] = []
    for rel, fmt in sources:
        path = data_dir / rel
        if not path.exists():
            continue
        try:
            out += [(rel, q) for q in _read_source(path, fmt)]
        except (ValueError, KeyError, IndexError) as exc:
            raise DataError(f"{path}: cannot read queries ({exc})", fix="re-copy the file from MANIFEST.md") from None
    return out


def _sample(pool: list[str], n: int | None, seed: int) -> tuple[list[str], bool]:
    """n queries in a seeded shuffle of the pool; cycled (flag True) when n exceeds it."""
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    if n is None or n <= len(pool):
        return [pool[i] for i in order[: n if n is not None else len(pool)]], False
    return [pool[order[i % len(pool)]] for i in range(n)], True


# --------------------------------------------------------------------------------------
# the two implementations, timed phase by phase


PHASES = ("fingerprint_test", "build_index", "fingerprint_train", "match")


class _Clock:
    """Wall and CPU seconds (this process) per phase."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def __call__(self, phase: str, fn: Callable[[], object]) -> object:
        c, t = time.process_time(), time.perf_counter()
        out = fn()
        self.wall[phase] = time.perf_counter() - t
        self.cpu[phase] = time.process_time() - c
        return out


def run_ours(train: list[str], test: list[str], k: int, workers: int) -> tuple[_Clock, np.ndarray, np.ndarray, list]:
    """Cold start: the module's caches and tables are reset, so one-time costs are counted."""
    from harness.decontam import simhash as sh

    sh._cache = sh._HashCache()
    sh._bmp_word_table = sh._bmp_char_map = None
    clock = _Clock()
    fp_test = clock("fingerprint_test", lambda: sh.fingerprints(test, workers=workers))
    index = clock("build_index", lambda: sh.FingerprintIndex(fp_test, k))
    fp_train = clock("fingerprint_train", lambda: sh.fingerprints(train, workers=workers))
    qi, tj = clock("match", lambda: index.query(fp_train))
    return clock, fp_test, fp_train, sh.group_pairs(qi, tj, len(train))


def run_package(train: list[str], test: list[str], k: int) -> tuple[_Clock, np.ndarray, np.ndarray, list, int]:
    """tDRO's loop with PyPI simhash. A window repeated > 255 times crashes it under NumPy 2
    (OverflowError); such texts get ``Simhash(list_of_windows)``, the value it defines."""
    from simhash import Simhash, SimhashIndex

    from harness.decontam.simhash import format_query, windows

    logging.getLogger("simhash").setLevel(logging.ERROR)
    overflow = 0

    def make(text: str) -> Simhash:
        nonlocal overflow
        q = format_query(text)
        try:
            return Simhash(q)
        except OverflowError:
            overflow += 1
            return Simhash(windows(q))

    clock = _Clock()
    objs_test = clock("fingerprint_test", lambda: [make(t) for t in test])
    index = clock("build_index", lambda: SimhashIndex([(str(j), s) for j, s in enumerate(objs_test)], k=k))
    objs_train = clock("fingerprint_train", lambda: [make(t) for t in train])
    groups = clock("match", lambda: [sorted(int(x) for x in index.get_near_dups(s)) for s in objs_train])
    fp_test = np.array([s.value for s in objs_test], dtype=np.uint64)
    fp_train = np.array([s.value for s in objs_train], dtype=np.uint64)
    return clock, fp_test, fp_train, groups, overflow


def _parse_rate(train: list[str]) -> float:
    """JSONL lines parsed per second (the stage reads every training line once)."""
    lines = [json.dumps({"id": str(i), "text": t}, ensure_ascii=False) for i, t in enumerate(train)]
    t = time.perf_counter()
    for x in lines:
        json.loads(x)
    dt = time.perf_counter() - t
    return len(lines) / dt if dt > 0 else float("inf")


def project(times: dict, n_train: int, n_test: int, target_train: int, target_test: int) -> float:
    """Seconds for the target sizes: per-query times of each phase times the target counts;
    index build and matching also grow by target_test / n_test (bigger buckets), never shrink."""
    grow = max(1.0, target_test / max(n_test, 1))
    return (
        times["fingerprint_train"] / n_train * target_train
        + times["fingerprint_test"] / n_test * target_test
        + times["build_index"] / n_test * target_test
        + times["match"] / n_train * target_train * grow
    )


def _qps(times: dict, n_train: int, n_test: int) -> dict:
    counts = {"fingerprint_test": n_test, "build_index": n_test, "fingerprint_train": n_train, "match": n_train}
    out = {p: (counts[p] / times[p] if times[p] > 0 else float("inf")) for p in PHASES}
    total = sum(times[p] for p in PHASES)
    out["end_to_end"] = (n_train + n_test) / total if total > 0 else float("inf")
    return out


def main(argv: list[str]) -> int:
    """The benchmark, top to bottom (over 80 lines: a script that loads, times both implementations and
    prints the comparison in that order)."""
    ap = argparse.ArgumentParser(prog="python -m harness bench decontam", description=__doc__.split("\n")[0])
    ap.add_argument("--n-train", type=int, default=None, help="training queries (default: the whole train pool)")
    ap.add_argument("--n-test", type=int, default=None, help="test queries (default: the whole test pool)")
    ap.add_argument("--k", type=int, default=2, help="Hamming distance (tDRO: 2)")
    ap.add_argument("--data", type=Path, default=None, help="shared data folder (default <repo>/../shared/data)")
    ap.add_argument("--workers", type=int, default=1, help="processes for our fingerprinting (default 1)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="cold runs of ours (fresh caches each); the median by wall time is reported (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-train", type=int, default=LIGHTRETRIEVER_TRAIN)
    ap.add_argument("--target-test", type=int, default=TEST_QUERIES)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.k < 0:
        raise ConfigError(f"--k must be >= 0, got {args.k}")
    for name in ("n_train", "n_test", "repeats", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    data_dir = args.data or default_data_dir()
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: no such folder", fix="pass --data DIR pointing at shared/data")

    test_pool = [q for _, q in load_queries(data_dir, TEST_SOURCES)]
    train_pool = [q for _, q in load_queries(data_dir, TRAIN_SOURCES)]
    if not test_pool or not train_pool:
        raise DataError(f"{data_dir}: found no queries", fix="pass --data DIR pointing at shared/data")
    test, test_cycled = _sample(test_pool, args.n_test, args.seed)
    train, train_cycled = _sample(train_pool, args.n_train, args.seed + 1)
    n_train, n_test = len(train), len(test)
    print(f"data: {data_dir}\ntrain {n_train} queries{' (cycled)' if train_cycled else ''}, "
          f"test {n_test}{' (cycled)' if test_cycled else ''}, k={args.k}, our workers={args.workers}, "
          f"our repeats={args.repeats}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start")

    pkg, pfp_test, pfp_train, pgroups, overflow = run_package(train, test, args.k)
    runs = [run_ours(train, test, args.k, args.workers) for _ in range(args.repeats)]
    ours_all = [r[0] for r in runs]
    order = sorted(range(len(runs)), key=lambda i: sum(ours_all[i].wall.values()))
    our, _, _, ogroups = runs[order[len(order) // 2]]
    identical_fp = all(np.array_equal(pfp_test, r[1]) and np.array_equal(pfp_train, r[2]) for r in runs)
    identical_dups = all(pgroups == r[3] for r in runs)
    n_dup_train = sum(1 for g in ogroups if g)
    n_pairs = sum(len(g) for g in ogroups)

    q_pkg, q_our = _qps(pkg.wall, n_train, n_test), _qps(our.wall, n_train, n_test)
    wall_pkg, wall_our = sum(pkg.wall.values()), sum(our.wall.values())
    cpu_pkg, cpu_our = sum(pkg.cpu.values()), sum(our.cpu.values())
    ratio = wall_pkg / wall_our if wall_our > 0 else float("inf")
    ratio_cpu = cpu_pkg / cpu_our if cpu_our > 0 else float("inf")
    parse_qps = _parse_rate(train)
    proj_pkg = project(pkg.wall, n_train, n_test, args.target_train, args.target_test)
    proj_our = project(our.wall, n_train, n_test, args.target_train, args.target_test)
    proj_stage = proj_our + args.target_train / parse_qps

    print(f"\n{'phase (wall clock)':<20}{'package q/s':>14}{'ours q/s':>14}{'speed-up':>10}")
    for phase in (*PHASES, "end_to_end"):
        a, b = q_pkg[phase], q_our[phase]
        print(f"{phase:<20}{a:>14,.0f}{b:>14,.0f}{b / a if a else float('inf'):>9.1f}x")
    print(f"\nend-to-end: package {wall_pkg:.2f} s, ours {wall_our:.2f} s (median of "
          f"{', '.join(f'{sum(c.wall.values()):.2f}' for c in ours_all)}) -> ours/package = {ratio:.1f}x")
    print(f"CPU time of this process: package {cpu_pkg:.2f} s, ours {cpu_our:.2f} s -> {ratio_cpu:.1f}x"
          + ("" if args.workers == 1 else " (ours excludes its worker processes)"))
    print(f"identical fingerprints: {identical_fp}; identical duplicate sets: {identical_dups} "
          f"({n_dup_train} training queries with a near-duplicate, {n_pairs} pairs)"
          + (f"; package OverflowError on {overflow} texts" if overflow else ""))
    print(f"\nprojection to {args.target_train:,} train x {args.target_test:,} test on this machine: the "
          f"per-query wall time of each phase in this run x the target count; index build and "
          f"matching also x {max(1.0, args.target_test / n_test):.2f} for the bigger test side:")
    print(f"  ours    {proj_our / 60:7.1f} min; the stage adds JSONL parsing at {parse_qps:,.0f} lines/s: "
          f"{proj_stage / 60:.1f} min")
    print(f"  package {proj_pkg / 60:7.1f} min ({proj_pkg / 3600:.1f} h)")

    if args.json:
        record = {
            "benchmark": "decontam",
            "command": "python -m harness bench decontam " + " ".join(argv),
            "data": str(data_dir),
            "n_train": n_train,
            "n_test": n_test,
            "train_cycled": train_cycled,
            "test_cycled": test_cycled,
            "k": args.k,
            "workers": args.workers,
            "repeats": args.repeats,
            "load_average_start": os.getloadavg()[0],
            "package": {"wall_seconds": pkg.wall, "cpu_seconds": pkg.cpu, "qps": q_pkg, "overflow_errors": overflow},
            "ours": {"wall_seconds": our.wall, "cpu_seconds": our.cpu, "qps": q_our,
                     "repeat_totals_wall": [sum(c.wall.values()) for c in ours_all]},
            "ratio_end_to_end_wall": ratio,
            "ratio_end_to_end_cpu": ratio_cpu,
            "identical_fingerprints": identical_fp,
            "identical_duplicates": identical_dups,
            "train_with_duplicates": n_dup_train,
            "duplicate_pairs": n_pairs,
            "parse_lines_per_s": parse_qps,
            "projection": {
                "target_train": args.target_train,
                "target_test": args.target_test,
                "method": "per-query wall time per phase x target counts; build and match also x "
                          "max(1, target_test / n_test)",
                "ours_seconds": proj_our,
                "ours_stage_seconds_with_parsing": proj_stage,
                "package_seconds": proj_pkg,
            },
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                        "numpy": np.__version__},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(f".{args.json.name}.tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, args.json)
    return 0 if identical_fp and identical_dups else 1
