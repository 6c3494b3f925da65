"""Table 1 at the paper's scale from a synthetic payload (``methods.bpr.scale``; the scale overlay):
index size and query time of every Table 1 system (and BPR w/o reranking, Table 2) at the synthetic
dataset's passage count, printed beside the published figures of ``configs/published/bpr.yaml``."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.figures import record
from harness.io import write_json
from harness.methods.base import Context
from harness.methods.bpr.settings import scale_settings, settings

# harness.timing, harness.meta, harness.datasets.synthetic and harness.published load inside the
# functions that use them, as before: the plan imports this package (its import time matters).

SYNTHETIC_NOTE = ("synthetic payload (harness/datasets/synthetic.py): random 768-d vectors and 768-bit codes, "
                  "seeded; speed and size only, never effectiveness")
EM_NOT_RUN = "not run: effectiveness is never measured on a synthetic payload (random vectors; speed and size only)"
#: DPR and its baselines at scale: system -> key of methods.bpr.scale.fractions (the vectors it indexes)
FRACTION_KEY = {"dpr": "flat", "dpr.hnsw": "hnsw", "dpr.lsh": "lsh", "dpr.pq": "pq"}
#: where configs/published/bpr.yaml prints a system's index size and query time: system -> (table, row)
PUBLISHED_ROWS = {"dpr": ("1", "DPR"), "dpr.hnsw": ("1", "DPR + HNSW"), "dpr.lsh": ("1", "DPR + Simple LSH"),
                  "dpr.pq": ("1", "DPR + PQ"), "bpr.bflat": ("1", "BPR (linear scan; l=1000)"),
                  "bpr.bhash": ("1", "BPR (hash table lookup; l=1000)"), "bpr.no-rerank": ("2", "BPR w/o reranking")}
#: published column and unit of a figure, and its place in :func:`paper_table1`'s (GB, ms)
PUBLISHED_COLUMNS = {"index_bytes": ("Index size", "GB", 0), "query_ms": ("Query time", "ms", 1)}
#: the paper's efficiency ratios (DPR flat over BPR: size and time; hash over linear scan): name -> (a, b, figure)
#: for a / b, measured beside the same ratio of the published figures
RATIOS = {"dpr_over_bflat_bytes": ("dpr", "bpr.bflat", "index_bytes"),
          "dpr_over_bflat_query_ms": ("dpr", "bpr.bflat", "query_ms"),
          "dpr_over_bhash_query_ms": ("dpr", "bpr.bhash", "query_ms"),
          "bflat_over_bhash_query_ms": ("bpr.bflat", "bpr.bhash", "query_ms"),
          "hnsw_over_bflat_bytes": ("dpr.hnsw", "bpr.bflat", "index_bytes")}

Published = dict[str, tuple[float | None, float | None]]


def paper_table1(doc: Mapping[str, Any] | None = None) -> Published:
    """Table 1 (21M passages) as published: system -> (index size in GB, query time in ms), read from
    configs/published/bpr.yaml (BPR w/o reranking from Table 2, which prints no index size: None)."""
    from harness.published import get_table, load_published

    doc = load_published("bpr") if doc is None else doc
    cells = {(r["table"], r["row"], r["column"]): r for r in doc["records"]}

    def cell(table: str, row: str, figure: str) -> float | None:
        column, unit, _ = PUBLISHED_COLUMNS[figure]
        rec = cells.get((table, row, column))
        if rec is None or rec["value"] is None:
            return None
        if rec["unit"] != unit:
            raise ConfigError(f"configs/published/bpr.yaml: table {table} {row!r} {column!r} is in {rec['unit']}, "
                              f"expected {unit}")
        return float(rec["value"])

    out: Published = {}
    for system, (table, row) in PUBLISHED_ROWS.items():
        if row not in get_table(doc, table)["rows"]:
            raise ConfigError(f"configs/published/bpr.yaml: table {table} has no row {row!r} (system {system})")
        out[system] = (cell(table, row, "index_bytes"), cell(table, row, "query_ms"))
    return out


def _per_question(fn: Any, n_q: int, repeats: int) -> list[float]:
    """Seconds per question, one question per call (protocol bpr-query-time), after one warm-up call."""
    from harness.timing import time_calls

    fn(0)
    return [x for i in range(n_q) for x in time_calls(lambda i=i: fn(i), repeats)]


def _say(msg: str) -> None:
    print(f"[bpr scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class _ScaleRun:
    """What every system's measurement at scale shares, and the figures recorded so far (system -> file)."""

    dataset: str
    n: int                 # passages of the synthetic dataset
    d: int                 # vector dimension = code bits
    k: int                 # evaluate.depth
    l_cand: int            # BPR's candidates
    n_q: int               # timed questions
    repeats: int
    trim: str              # the protocol's trimming of the samples
    gpu: bool
    gpu_why: str | None    # why the cuda cells are not run
    common: dict[str, Any]  # fields of every system's file
    tmp: Path | None = None  # where index files are written to be sized
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def start(cls, cfg: Mapping[str, Any], sc: Mapping[str, Any], dataset: str, faiss_threads: int) -> _ScaleRun:
        from harness.datasets import synthetic as syn
        from harness.meta import device_info, timing_gpu
        from harness.timing import PROTOCOLS

        protocol = PROTOCOLS.get("bpr-query-time")
        repeats = cfg["timing"].get("repeats") or protocol.repeats
        n = syn.passages(cfg["datasets"][dataset])
        d, k, l_cand = int(sc["dim"]), cfg["evaluate"]["depth"], int(sc["n_candidates"] or settings(cfg)["n_candidates"])
        n_q = int(sc["timing_queries"])
        gpu, gpu_why = timing_gpu(cfg)
        common = {"payload": SYNTHETIC_NOTE, "passages": n, "dim": d, "protocol": protocol.name, "repeats": repeats,
                  "inside_timer": protocol.inside_timer["search"], "questions": n_q, "k": k, "n_candidates": l_cand,
                  "seed": cfg["seed"], "faiss_threads": faiss_threads, "device_info": device_info("cpu")}
        return cls(dataset, n, d, k, l_cand, n_q, repeats, protocol.trim, gpu, gpu_why, common)

    def size_of(self, save: Callable[[Path], Any]) -> int:
        """Bytes of the index file ``save`` writes (removed again)."""
        path = save(self.tmp)
        size = Path(path).stat().st_size
        Path(path).unlink()
        return size

    def gpu_time(self, index: Any, queries: np.ndarray, binary: bool) -> float | None:
        """faiss GPU copy (GpuIndexFlat / GpuIndexBinaryFlat), one question per call; faiss-gpu only."""
        if not self.gpu:
            return None
        import faiss

        from harness.timing import summarize

        res = faiss.StandardGpuResources()
        g = faiss.index_binary_cpu_to_gpu(res, 0, index) if binary else faiss.index_cpu_to_gpu(res, 0, index)
        kk = self.l_cand if binary else self.k
        return summarize(_per_question(lambda i: g.search(queries[i:i + 1], kk), len(queries), self.repeats),
                         "none")["mean"]

    def record(self, system: str, spec: str, nf: int, build: float, size: int, samples: list[float],
               scale_time: bool, gpu_s: float | None = None, **extra: Any) -> None:
        """A system's file: measured on ``nf`` of the ``n`` passages; below n, its size (and its query
        time when ``scale_time``: the search scans every code) projected linearly to n."""
        from harness.timing import summarize

        n = self.n
        f = n / nf
        proj = nf < n
        mean = summarize(samples, self.trim)["mean"]
        tf = f if scale_time else 1.0
        vals = {"index_bytes": {"value": size * f, "unit": "B", **({"kind": "projected"} if proj else {}),
                                "what": f"size of the faiss index file over {nf:,} of {n:,} passages" + (f", x {f:.3f}" if proj else "")},
                "query_ms": {"value": mean * 1e3 * tf, "unit": "ms", "device": "cpu",
                             **({"kind": "projected"} if proj else {}),
                             "what": "search only, one question per call, encoding excluded; mean over questions x repeats"
                                     + (f"; measured on {nf:,} passages x {f:.3f} (the search scans every code)" if proj and scale_time
                                        else f"; measured on {nf:,} passages, not scaled (HNSW's search grows ~log n)" if proj else "")},
                ("build_seconds_fraction" if proj else "build_seconds"): {
                    "value": build, "unit": "s", "device": "cpu",
                    "what": f"build over {nf:,} passages (training included), not scaled"}}
        nr = {"em": EM_NOT_RUN}
        if gpu_s is not None:
            vals["query_ms_cuda"] = {"value": gpu_s * 1e3 * tf, "unit": "ms", "device": "cuda",
                                     **({"kind": "projected"} if proj else {})}
        else:
            nr["query_ms_cuda"] = self.gpu_why
        self.figures[system] = record(system, self.dataset, vals, not_run=nr, spec=spec, indexed_passages=nf,
                                              scale_factor=f, raw_samples_seconds=samples, **extra, **self.common)
        _say(f"{system}: {vals['index_bytes']['value'] / 1e9:.2f} GB, {vals['query_ms']['value']:.2f} ms/question"
             + (" (projected)" if proj else ""))


def _measure_dense(run: _ScaleRun, sc: Mapping[str, Any], rng: np.random.Generator, qd: np.ndarray,
                   seed: int) -> None:
    """DPR (Flat) and its baselines (HNSW, LSH, PQ) on fractions of synthetic vectors, projected."""
    from harness.datasets import synthetic as syn
    from harness.indexes.faiss_dense import DenseFaissIndex

    n, d, k = run.n, run.d, run.k
    specs = {"dpr": "Flat", "dpr.hnsw": "HNSW512", "dpr.lsh": "LSH", "dpr.pq": f"PQ{d // 8}x8np"}
    nmax = min(n, max(int(sc["fractions"][FRACTION_KEY[s]]) for s in specs))
    _say(f"DPR: {nmax:,} synthetic {d}-d vectors (fractions {sc['fractions']}) of {n:,}")
    X = np.concatenate(list(syn.dense_blocks(nmax, d, rng)))
    for system, spec in specs.items():
        nf = min(n, int(sc["fractions"][FRACTION_KEY[system]]))
        _say(f"{system} (faiss:{spec}) on {nf:,} vectors: build")
        t0 = time.perf_counter()
        idx = DenseFaissIndex.build(spec, X[:nf], train_size=min(nf, int(sc["pq_train"])), seed=seed)
        build = time.perf_counter() - t0
        samples = _per_question(lambda i, idx=idx: idx.search(qd[i:i + 1], k), run.n_q, run.repeats)
        g = run.gpu_time(idx.index, qd, False) if system == "dpr" else None
        run.record(system, f"faiss:{spec}", nf, build, run.size_of(idx.save), samples, system != "dpr.hnsw", g)
        del idx


def _measure_binary(run: _ScaleRun, rng: np.random.Generator, qd: np.ndarray) -> None:
    """BPR on synthetic codes of every passage: linear scan and hash lookup (Hamming candidates, then
    the rerank with the continuous question), and the hash lookup without the rerank (Table 2)."""
    from harness.datasets import synthetic as syn
    from harness.indexes.faiss_binary import BinaryFaissIndex, rerank_candidates

    n, d, k, l_cand = run.n, run.d, run.k, run.l_cand
    _say(f"BPR: {n:,} synthetic {d}-bit codes ({n * d // 8 / 1e9:.2f} GB)")
    codes = syn.codes(n, d, rng)
    qc = syn.codes(run.n_q, d, rng)
    for system, spec in (("bpr.bflat", "BFlat"), ("bpr.bhash", f"BHash{d}")):
        _say(f"{system} (faiss-binary:{spec}) on {n:,} codes: build")
        t0 = time.perf_counter()
        idx = BinaryFaissIndex.build(spec, codes)
        build = time.perf_counter() - t0
        found: list[int] = []

        def two_stage(i: int, idx: Any = idx, found: list[int] = found) -> None:
            _, cand = idx.search(qc[i:i + 1], l_cand)
            found.append(int((cand >= 0).sum()))
            rerank_candidates(cand, qd[i:i + 1], codes, k)

        samples = _per_question(two_stage, run.n_q, run.repeats)
        size = run.size_of(idx.save)
        extra = {"candidates_found_mean": float(np.mean(found))}
        if idx.is_hash:
            extra["hash_buckets"] = int(idx.index.hashtable_size())
        g = run.gpu_time(idx.index, qc, True) if system == "bpr.bflat" else None
        run.record(system, f"faiss-binary:{spec}", n, build, size, samples, True, g, **extra)
        if system == "bpr.bhash":  # Table 2: w/o reranking = the hash lookup's top k in Hamming order
            nr_samples = _per_question(lambda i, idx=idx: idx.search(qc[i:i + 1], k), run.n_q, run.repeats)
            run.record("bpr.no-rerank", f"faiss-binary:{spec}", n, build, size, nr_samples, True, None, **extra)
        del idx


def _ratios(figures: dict[str, dict[str, Any]], published: Published) -> None:
    """The paper's efficiency ratios (:data:`RATIOS`), measured beside published, added to bpr.bflat's
    file and printed with the targets they meet or miss."""
    def v(system: str, what: str) -> float | None:
        return figures.get(system, {}).get("values", {}).get(what, {}).get("value")

    ratios = {}
    for name, (a, b, what) in RATIOS.items():
        x, y = v(a, what), v(b, what)
        if x is None or not y:
            continue
        i = PUBLISHED_COLUMNS[what][2]
        paper = published[a][i] / published[b][i]
        ratios[name] = {"value": x / y, "unit": "ratio", "paper": round(paper, 3), "kind": "projected"
                        if "projected" in (figures[a]["values"][what].get("kind"), figures[b]["values"][what].get("kind")) else "measured"}
    if "bpr.bflat" in figures:
        figures["bpr.bflat"]["ratios"] = ratios
    _print_beside_paper(figures, ratios, published)


def _print_beside_paper(figures: Mapping[str, dict[str, Any]], ratios: Mapping[str, dict[str, Any]],
                        published: Published) -> None:
    print("\nBPR Table 1 at scale (synthetic payload): measured / projected beside the paper", flush=True)
    for system, doc in figures.items():
        size, ms = doc["values"]["index_bytes"], doc["values"]["query_ms"]
        pub = published.get(system, (None, None))
        mark = lambda e: "projected" if e.get("kind") == "projected" else "measured"
        print(f"  {system:<14} {size['value'] / 1e9:8.2f} GB ({mark(size)}; paper {pub[0]} GB)   "
              f"{ms['value']:9.2f} ms ({mark(ms)}; paper {pub[1]} ms: {'meets' if pub[1] and ms['value'] <= pub[1] else 'misses'})",
              flush=True)
    for name, r in ratios.items():
        verdict = "meets" if r["value"] >= 0.95 * r["paper"] else "misses"   # the paper's factor, within 5 %
        print(f"  ratio {name:<28} {r['value']:8.2f} ({r['kind']}; paper {r['paper']}: {verdict})", flush=True)


def _write_figures(figures: Mapping[str, dict[str, Any]], out_dir: Path) -> list[Path]:
    out = []
    for system, doc in figures.items():
        path = Path(out_dir) / f"{system}.json"
        write_json(path, doc)
        out.append(path)
    return out


def scale_efficiency(ctx: Context, dataset: str, out_dir: Path) -> list[Path]:
    """Index size and query time of every Table 1 system (and BPR w/o reranking, Table 2) at the
    synthetic dataset's passage count. BPR's codes are indexed whole (2.0 GB at 21M); DPR's vectors
    (64.5 GB at 21M) on fractions, projected linearly (Flat, LSH, PQ scan every code) — HNSW's size
    is projected linearly, its query time is measured on its fraction and reported unscaled."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import faiss

    cfg = ctx.cfg
    sc = scale_settings(cfg)
    published = paper_table1()  # read before the measurement: a broken file fails at once
    run = _ScaleRun.start(cfg, sc, dataset, faiss.omp_get_max_threads())
    rng = np.random.default_rng(cfg["seed"])
    qd = rng.standard_normal((run.n_q, run.d), dtype=np.float32)
    run.tmp = Path(tempfile.mkdtemp(prefix="bpr-scale-", dir=Path(out_dir).parent))
    try:
        _measure_dense(run, sc, rng, qd, cfg["seed"])  # DPR's vectors: fractions, projected
        _measure_binary(run, rng, qd)                  # BPR's codes: whole
    finally:
        shutil.rmtree(run.tmp, ignore_errors=True)
    _ratios(run.figures, published)
    return _write_figures(run.figures, out_dir)
