"""`python -m harness bench phrase-search`: DensePhrases' index speed on CPU (Table A.1, fn. 8, App. E).

What the paper says: 770M token vectors (d = 768) in an IVF index with 1,048,576 lists and 4-bit
scalar quantisation (SQ4, inner product), nprobe 256; 13.6 questions/s on CPU (batch 64, App. B:
Xeon E5-2630 v4, 128 GB RAM; the figure includes the two question encoders, run on the CPU).

What is measured here, on synthetic vectors (speed, not accuracy), with faiss's own threads:

1. The measured index: a real faiss ``IVF<nlist>,SQ4`` (inner product) over ``--vectors`` 768-d
   vectors with the paper's list length, ``nlist = vectors / 734`` (770M / 1,048,576 = 734), built
   without k-means: random Gaussian centroids go into the coarse quantiser, the SQ4 ranges are
   trained on a sample, and each vector = its (uniformly drawn) centroid + noise rows drawn from a
   fixed Gaussian pool is added to its list (``add_preassigned``). Lists are balanced (Poisson,
   ~734 +- 27); scanning cost depends on how many codes are scanned, not on their values.
   Timed: ``index.search`` with nprobe 256 on batches of questions. A batch of 64 questions is 128
   MIPS query vectors: Eq. 10 needs a start and an end search per question, and the authors' code
   sends both halves in one faiss call; the benchmark times that call (and, for reference, a
   64-vector batch: one half only).
2. The coarse step at paper scale: 1,048,576 random 768-d centroids (3.2 GB), timed on its own over
   the same batches as the phrase index runs it (``harness.indexes.phrase.coarse_assign``: numpy's
   BLAS product + top-256 selection; faiss-cpu's bundled OpenBLAS is several times slower for this
   product here) and, for information, as faiss's IndexFlatIP ``search(q, 256)`` (both costs depend
   on the number of centroids, not their values).
3. Projection to 770M vectors: ``Q/s = 64 / (t_coarse_1M + t_scan)`` per batch of 64 questions,
   where ``t_scan`` is the measured index's list scan alone (``search_preassigned`` with the
   measured coarse assignment: nprobe 256 lists of paper-scale length; run with faiss's
   ``parallel_mode`` 3 so it splits the queries over the threads as ``search`` does — called
   directly in mode 0 it runs on one thread; ``search - coarse`` is printed as a cross-check) and
   ``t_coarse_1M`` item 2. Also given: the same with one half only (64 vectors per batch), with
   Eq. 10's span step (exact re-scoring of the candidates' partners on the dump, measured in item
   4) added, and, for information, with faiss's IndexFlatIP search as the coarse step.
4. Accuracy of the compressed indexes, on a clustered synthetic subset (``--recall-vectors``, the
   generator of ``bench bpr-index``), written as a real phrase dump (float16) and indexed through
   the ``phrase`` backend: ``IVF<n/734>,SQ4`` and ``OPQ<m>,IVF<n/734>,PQ<m>x8`` (the authors'
   release; ``--opq-niter`` OPQ iterations, fewer than faiss's 50 to keep the run short), trained on
   20% (seed 29). Recall@1/10/100 of the MIPS top-k against exact (Flat) search at nprobe 16, 64
   and 256, and Eq. 10 top-1 phrase agreement with the Flat index. The probe fraction here (256 of
   a few hundred lists) is far above the paper's (256 of 1,048,576), so these recalls mostly
   measure the code loss (SQ4 / PQ), not IVF misses at scale.
5. Bytes per vector (faiss's in-memory index: codes + 8-byte ids) and the index size projected to
   770M vectors, beside the paper's 320 GB storage (Table A.1, which also holds metadata).

Not inside any timer: the question encoders (the paper's figure includes them; ours does not, so
meeting 13.6 Q/s here is necessary, not sufficient), data generation, index building. Each timed
figure is the mean over ``--batches`` batches after one untimed warm-up batch (the paper drops
its first five batches). The target printed: "at least 13.6 Q/s on CPU, projected to 770M vectors".
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.indexes.phrase import coarse_assign

PAPER_VECTORS = 770_000_000
PAPER_NLIST = 1_048_576
PAPER_NPROBE = 256
PAPER_QPS_CPU = 13.6
PAPER_STORAGE_GB = 320.0
LIST_LEN = PAPER_VECTORS / PAPER_NLIST  # ~734
TARGET = f"at least {PAPER_QPS_CPU} Q/s on CPU, projected to 770M vectors"
LABEL = "synthetic vectors: speed, not accuracy"


def _log(msg: str) -> None:
    print(f"[phrase-search {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m harness bench phrase-search", description=__doc__.split("\n")[0])
    p.add_argument("--vectors", type=int, default=None,
                   help="vectors in the measured IVF-SQ4 index (default 8,000,000; --quick 1,000,000)")
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--list-len", type=float, default=LIST_LEN, help="vectors per IVF list (paper: 770M/1,048,576)")
    p.add_argument("--nprobe", type=int, default=PAPER_NPROBE)
    p.add_argument("--coarse-lists", type=int, default=PAPER_NLIST,
                   help="centroids of the stand-alone coarse quantiser (paper 1,048,576; a smaller value is "
                        "timed and scaled linearly to 1,048,576)")
    p.add_argument("--batch", type=int, default=64, help="questions per batch (paper 64)")
    p.add_argument("--batches", type=int, default=None, help="timed batches per figure (default 5; --quick 1)")
    p.add_argument("--k", type=int, default=100, help="MIPS top-k per half (start / end)")
    p.add_argument("--max-phrase-len", type=int, default=10, help="L of Eq. 10 (authors: 10)")
    p.add_argument("--recall-vectors", type=int, default=None,
                   help="token vectors of the accuracy subset (default 300,000; --quick 50,000)")
    p.add_argument("--recall-queries", type=int, default=256)
    p.add_argument("--passage-len", type=int, default=100, help="tokens per synthetic passage of the subset")
    p.add_argument("--opq-m", type=int, default=None, help="OPQ/PQ sub-quantizers (default dim / 8 = 96)")
    p.add_argument("--opq-niter", type=int, default=None,
                   help="OPQ training iterations (default 10; --quick 3; faiss's default 50)")
    p.add_argument("--no-opq", action="store_true", help="skip the OPQ/IVF-PQ variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smaller sizes, one timed batch (a few minutes)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--workdir", type=Path, default=None, help="where the subset's phrase dump is written")
    a = p.parse_args(argv)
    a.vectors = a.vectors or (1_000_000 if a.quick else 8_000_000)
    a.batches = a.batches or (1 if a.quick else 5)
    a.recall_vectors = a.recall_vectors or (50_000 if a.quick else 300_000)
    a.opq_m = a.opq_m or max(1, a.dim // 8)
    a.opq_niter = a.opq_niter or (3 if a.quick else 10)
    for name in ("vectors", "dim", "nprobe", "coarse_lists", "batch", "batches", "k", "max_phrase_len",
                 "recall_vectors", "recall_queries", "passage_len", "opq_m", "opq_niter"):
        if getattr(a, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.list_len < 1:
        raise ConfigError(f"--list-len must be >= 1, got {a.list_len}")
    if a.dim % a.opq_m:
        raise ConfigError(f"--opq-m {a.opq_m} must divide --dim {a.dim}")
    return a


def _mean_time(fn: Any, batches: list[np.ndarray]) -> float:
    """Mean seconds of ``fn(batch)`` over ``batches`` after one untimed warm-up call."""
    fn(batches[0])
    times = []
    for b in batches:
        t = time.perf_counter()
        fn(b)
        times.append(time.perf_counter() - t)
    return float(np.mean(times))


def _recall(ids: np.ndarray, truth: np.ndarray, k: int) -> float:
    k = min(k, ids.shape[1], truth.shape[1])
    return float(np.mean([np.intersect1d(a[:k][a[:k] >= 0], t[:k]).size for a, t in zip(ids, truth)]) / k)


# --- 1 + 3: the measured index and the projection ----------------------------------------------------


def speed_index(a: argparse.Namespace, rng: np.random.Generator) -> tuple[Any, np.ndarray, dict[str, Any]]:
    """The IVF-SQ4 index of paper-scale list length, lists filled without k-means (see module doc)."""
    import faiss
    from faiss.contrib.ivf_tools import add_preassigned

    d = a.dim
    nlist = max(1, round(a.vectors / a.list_len))
    t0 = time.perf_counter()
    centroids = rng.standard_normal((nlist, d), dtype=np.float32)
    index = faiss.index_factory(d, f"IVF{nlist},SQ4", faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.extract_index_ivf(index)
    faiss.downcast_index(ivf.quantizer).add(centroids)
    sample_n = min(a.vectors, 20_000)
    sample = centroids[rng.integers(0, nlist, sample_n)] + rng.standard_normal((sample_n, d), dtype=np.float32)
    index.train(sample)  # the quantiser holds nlist centroids already: only the SQ4 ranges are trained
    pool = rng.standard_normal((min(65_536, a.vectors), d), dtype=np.float32)
    chunk = 1 << 18
    for s in range(0, a.vectors, chunk):
        c = min(chunk, a.vectors - s)
        assign = rng.integers(0, nlist, c)
        x = centroids[assign]
        x += pool[rng.integers(0, len(pool), c)]
        add_preassigned(ivf, x, assign)
        if s and s % (chunk * 8) == 0:
            _log(f"  added {s + c:,} / {a.vectors:,}")
    sizes = np.array([ivf.invlists.list_size(i) for i in range(nlist)])
    ivf.nprobe = min(a.nprobe, nlist)
    info = {"vectors": int(index.ntotal), "nlist": nlist, "nprobe": int(ivf.nprobe), "build_s": time.perf_counter() - t0,
            "list_len_mean": float(sizes.mean()), "list_len_max": int(sizes.max()),
            "imbalance": float(ivf.invlists.imbalance_factor()), "sq_train_vectors": sample_n,
            "noise_pool_rows": len(pool)}
    return index, centroids, info


def time_speed(a: argparse.Namespace, index: Any, centroids: np.ndarray, rng: np.random.Generator
               ) -> dict[str, Any]:
    import faiss

    ivf = faiss.extract_index_ivf(index)
    quant = ivf.quantizer
    nq = 2 * a.batch * (a.batches + 1)
    queries = centroids[rng.integers(0, len(centroids), nq)] + rng.standard_normal((nq, a.dim), dtype=np.float32)
    both = [queries[i * 2 * a.batch:(i + 1) * 2 * a.batch] for i in range(a.batches)]  # 64 questions x 2 halves
    half = [b[:a.batch] for b in both]
    out: dict[str, Any] = {}
    for name, batches in (("questions", both), ("half", half)):
        out[f"search_s_{name}"] = _mean_time(lambda q: index.search(q, a.k), batches)
        out[f"coarse_s_{name}"] = _mean_time(lambda q: quant.search(q, ivf.nprobe), batches)
        assigned = [quant.search(q, ivf.nprobe) for q in batches]
        # faiss's search splits the queries over its threads and calls search_preassigned on each part
        # (parallel_mode 0); called directly that runs on one thread, so parallel_mode 3 (split over
        # queries inside) gives the scan the same threads as the full search
        scan = []
        mode = ivf.parallel_mode
        ivf.parallel_mode = 3
        try:
            ivf.search_preassigned(batches[0], a.k, assigned[0][1], assigned[0][0])  # warm-up
            faiss.cvar.indexIVF_stats.reset()
            for q, (Dq, Iq) in zip(batches, assigned):
                t = time.perf_counter()
                ivf.search_preassigned(q, a.k, Iq, Dq)
                scan.append(time.perf_counter() - t)
        finally:
            ivf.parallel_mode = mode
        out[f"scan_s_{name}"] = float(np.mean(scan))
        out[f"scan_s_by_difference_{name}"] = out[f"search_s_{name}"] - out[f"coarse_s_{name}"]
        out[f"codes_scanned_per_query_{name}"] = faiss.cvar.indexIVF_stats.ndis / (len(batches) * len(batches[0]))
    out["qps_measured"] = a.batch / out["search_s_questions"]
    out["qps_measured_half"] = a.batch / out["search_s_half"]
    return out


def time_coarse_1m(a: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    """The stand-alone coarse step over --coarse-lists random centroids (coarse_assign; faiss's IndexFlatIP)."""
    import faiss

    t0 = time.perf_counter()
    quant = faiss.IndexFlatIP(a.dim)
    chunk = 1 << 17
    for s in range(0, a.coarse_lists, chunk):
        quant.add(rng.standard_normal((min(chunk, a.coarse_lists - s), a.dim), dtype=np.float32))
    build = time.perf_counter() - t0
    nq = 2 * a.batch * a.batches
    queries = rng.standard_normal((nq, a.dim), dtype=np.float32)
    both = [queries[i * 2 * a.batch:(i + 1) * 2 * a.batch] for i in range(a.batches)]
    nprobe = min(a.nprobe, a.coarse_lists)
    scale = PAPER_NLIST / a.coarse_lists
    out = {"lists": a.coarse_lists, "bytes": int(a.coarse_lists) * a.dim * 4, "build_s": build,
           "scaled_to_1m": scale != 1.0, "scale": scale}
    # the coarse step as the phrase index runs it (harness.indexes.phrase.coarse_assign: numpy's BLAS
    # product + top-nprobe), and, for information, faiss's own IndexFlatIP search of the same lists
    xb = faiss.rev_swig_ptr(quant.get_xb(), quant.ntotal * a.dim).reshape(quant.ntotal, a.dim)
    out["coarse_s_questions"] = scale * _mean_time(lambda q: coarse_assign(xb, q, nprobe), both)
    out["coarse_s_half"] = scale * _mean_time(lambda q: coarse_assign(xb, q, nprobe), [b[:a.batch] for b in both])
    out["faiss_coarse_s_questions"] = scale * _mean_time(lambda q: quant.search(q, nprobe), both)
    return out


# --- 4: accuracy on a subset, through the phrase backend ---------------------------------------------


def accuracy(a: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import faiss

    from harness.bench.bpr_index import synthetic_embeddings
    from harness.indexes import build_index
    from harness.indexes.phrase_dump import DumpWriter, PhraseDump

    n, d = a.recall_vectors, a.dim
    X, _, _ = synthetic_embeddings(n, 1, d, seed=a.seed + 1)
    rng = np.random.default_rng(a.seed + 2)
    t0 = time.perf_counter()
    folder = workdir / "dump"
    with DumpWriter(folder, d, codec="float16") as w:
        plen = a.passage_len
        for p, s in enumerate(range(0, n, plen)):
            m = min(plen, n - s)
            offs = np.stack([np.arange(m) * 6, np.arange(m) * 6 + 5], 1).astype(np.int32)
            w.add(f"passage-{p}", X[s:s + m], offs)
    dump = PhraseDump.open(folder)
    H = dump.all_vectors()
    dump_s = time.perf_counter() - t0
    del X
    # start query near a token, end query near the token two rows later (a 3-token phrase)
    nq = a.recall_queries
    t = rng.integers(0, n - 2, nq)
    sigma = float(np.std(H[rng.integers(0, n, 2000)]))
    qs = (H[t] + sigma * rng.standard_normal((nq, d))).astype(np.float32)
    qe = (H[t + 2] + sigma * rng.standard_normal((nq, d))).astype(np.float32)
    kmax = min(100, n)
    _, truth = faiss.knn(qs, H, kmax, metric=faiss.METRIC_INNER_PRODUCT)
    del H
    nlist = max(1, round(n / a.list_len))
    specs = {"flat": "phrase:Flat", "ivf-sq4": f"phrase:IVF{nlist},SQ4"}
    if not a.no_opq:
        specs["opq-ivf-pq"] = f"phrase:OPQ{a.opq_m},IVF{nlist},PQ{a.opq_m}x8"
    opts = {"train_fraction": 0.2, "seed": 29, "max_phrase_len": a.max_phrase_len, "nprobe": a.nprobe}
    out: dict[str, Any] = {"vectors": n, "queries": nq, "nlist": nlist, "dump_codec": "float16",
                           "dump_bytes": dump.nbytes_on_disk, "dump_write_s": dump_s, "indexes": {}}
    flat_top1 = None
    span: dict[str, Any] = {}
    for key, spec in specs.items():
        _log(f"accuracy subset: build {spec} over {n:,} vectors")
        t0 = time.perf_counter()
        index = build_index(spec, dump, **opts, **({"opq_niter": a.opq_niter} if key == "opq-ivf-pq" else {}))
        row: dict[str, Any] = {"spec": index.spec, "build_s": time.perf_counter() - t0, "nbytes": index.nbytes,
                               "bytes_per_vector": index.nbytes / index.ntotal, "recall": {}}
        probes = [None] if key == "flat" else sorted({min(npb, nlist) for npb in (16, 64, a.nprobe)})
        for nprobe in probes:
            if nprobe is not None:
                index.nprobe = nprobe
            _, ids = index.search(qs, kmax)
            row["recall"][str(nprobe or "exact")] = {f"R@{k}": _recall(ids, truth, k) for k in (1, 10, 100) if k <= kmax}
        if key != "flat":
            index.nprobe = a.nprobe
        phrases = index.search_phrases(qs, qe, a.k, 1)
        top1 = [(p[0].start_row, p[0].end_row) if p else None for p in phrases]
        if key == "flat":
            flat_top1 = top1
        row["phrase_top1_agreement_with_flat"] = float(np.mean([x == y for x, y in zip(top1, flat_top1)]))
        if key == "ivf-sq4":  # Eq. 10's span step, timed on batches of --batch questions
            bs = [slice(i, i + a.batch) for i in range(0, nq - a.batch + 1, a.batch)] or [slice(0, nq)]
            mips = [index.mips(qs[s], qe[s], a.k) for s in bs]
            index.rank_spans(qs[bs[0]], qe[bs[0]], *mips[0], 10)  # warm-up
            times, pairs = [], []
            for s, (sr, er) in zip(bs, mips):
                t1 = time.perf_counter()
                index.rank_spans(qs[s], qe[s], sr, er, 10)
                times.append(time.perf_counter() - t1)
                pairs += [index.span_candidates(x, y)[0].size for x, y in zip(sr, er)]
            span = {"span_s_per_batch": float(np.mean(times)), "batch": bs[0].stop - bs[0].start,
                    "k": a.k, "L": a.max_phrase_len, "pairs_per_question": float(np.mean(pairs))}
        out["indexes"][key] = row
        del index
    out["span"] = span
    return out


# --- report ---------------------------------------------------------------------------------------


def run(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures (also printed; see the module doc)."""
    a = _parse(argv)
    # passive OpenMP waiting (see bench bpr-index): must be set before faiss loads libgomp
    if "faiss" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import faiss

    t_start = time.perf_counter()
    rng = np.random.default_rng(a.seed)
    workdir = Path(tempfile.mkdtemp(prefix="phrase-search-", dir=a.workdir))
    try:
        _log(f"measured index: IVF-SQ4 over {a.vectors:,} x {a.dim} ({LABEL})")
        index, centroids, built = speed_index(a, rng)
        _log(f"  built in {built['build_s']:.0f} s: nlist {built['nlist']:,}, lists ~{built['list_len_mean']:.0f}; "
             f"timing {a.batches} batches of {a.batch} questions")
        speed = time_speed(a, index, centroids, rng)
        speed["nbytes"] = _nbytes(index)
        speed["bytes_per_vector"] = speed["nbytes"] / index.ntotal
        del index, centroids
        _log(f"coarse step: {a.coarse_lists:,} random centroids")
        coarse = time_coarse_1m(a, rng)
        _log(f"accuracy subset: {a.recall_vectors:,} vectors, {a.recall_queries} queries")
        acc = accuracy(a, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    t_span = acc.get("span", {}).get("span_s_per_batch", 0.0)
    proj_q = a.batch / (coarse["coarse_s_questions"] + speed["scan_s_questions"])
    proj_h = a.batch / (coarse["coarse_s_half"] + speed["scan_s_half"])
    proj_span = a.batch / (coarse["coarse_s_questions"] + speed["scan_s_questions"] + t_span)
    proj_faiss = a.batch / (coarse["faiss_coarse_s_questions"] + speed["scan_s_questions"])
    projection = {
        "qps_questions": proj_q, "qps_half": proj_h, "qps_questions_with_span": proj_span,
        "qps_questions_faiss_coarse": proj_faiss,
        "formula": "Q/s = batch / (t_coarse over 1,048,576 centroids + t_scan of nprobe lists of ~734 vectors), per "
                   "batch of questions; 'questions' = start+end halves in one call (2 x batch vectors), 'half' = "
                   "one half (batch vectors); 'with_span' adds Eq. 10's span re-scoring",
        "codes_scanned_per_query": speed["codes_scanned_per_query_questions"],
        "codes_scanned_at_paper_scale": PAPER_NPROBE * LIST_LEN,
        "index_gb_at_770m": speed["bytes_per_vector"] * PAPER_VECTORS / 1e9,
        "paper_storage_gb": PAPER_STORAGE_GB,
    }
    met = proj_q >= PAPER_QPS_CPU
    report = {
        "benchmark": "phrase-search", "label": LABEL, "target": TARGET, "target_met": met,
        "paper": {"vectors": PAPER_VECTORS, "nlist": PAPER_NLIST, "nprobe": PAPER_NPROBE, "qps_cpu": PAPER_QPS_CPU,
                  "batch": 64, "storage_gb": PAPER_STORAGE_GB},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "environment": {"faiss": faiss.__version__, "numpy": np.__version__, "omp_threads": faiss.omp_get_max_threads(),
                        "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
                        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")},
        "measured_index": {**built, **speed}, "coarse_1m": coarse, "projection": projection, "accuracy": acc,
        "seconds": time.perf_counter() - t_start,
    }
    _print(a, report)
    return report


def _nbytes(index: Any) -> int:
    from harness.indexes.faiss_dense import faiss_nbytes

    return faiss_nbytes(index)


def _print(a: argparse.Namespace, r: dict[str, Any]) -> None:
    m, c, p, acc = r["measured_index"], r["coarse_1m"], r["projection"], r["accuracy"]
    env = r["environment"]
    print(f"\nDensePhrases phrase-search benchmark — {LABEL}; faiss {env['faiss']}, {env['omp_threads']} threads, "
          f"{env['cpus']} CPUs")
    print(f"paper: {PAPER_VECTORS / 1e6:.0f}M vectors, IVF{PAPER_NLIST},SQ4, nprobe {PAPER_NPROBE}, "
          f"{PAPER_QPS_CPU} Q/s on CPU (batch 64, question encoders included)")
    print(f"timing: mean of {a.batches} batch(es) of {a.batch} questions after 1 warm-up; a question = start + end "
          f"MIPS vectors in one faiss call; top-{a.k}; encoders excluded")
    print(f"\n(a) measured index: IVF{m['nlist']},SQ4 over {m['vectors']:,} x {a.dim}, lists {m['list_len_mean']:.0f} "
          f"(max {m['list_len_max']}, imbalance {m['imbalance']:.3f}), nprobe {m['nprobe']}, built in "
          f"{m['build_s']:.0f} s")
    print(f"    search {m['search_s_questions']:.3f} s/batch = {m['qps_measured']:.1f} Q/s "
          f"(one half only: {m['search_s_half']:.3f} s = {m['qps_measured_half']:.1f} Q/s); "
          f"coarse {m['coarse_s_questions']:.3f} s + scan {m['scan_s_questions']:.3f} s (search - coarse: "
          f"{m['scan_s_by_difference_questions']:.3f} s); {m['codes_scanned_per_query_questions']:,.0f} codes "
          f"scanned per query vector (paper scale: {PAPER_NPROBE} x {LIST_LEN:.0f} = {PAPER_NPROBE * LIST_LEN:,.0f})")
    print(f"    {m['bytes_per_vector']:.0f} bytes/vector in memory (SQ4 codes {a.dim // 2} B + 8 B id + the "
          f"coarse centroids, {4 * a.dim / m['list_len_mean']:.1f} B per vector)")
    sc = " (timed on fewer centroids, scaled linearly)" if c["scaled_to_1m"] else ""
    print(f"(b) coarse step over {PAPER_NLIST:,} centroids ({c['bytes'] * c['scale'] / 2**30:.1f} GiB){sc}, as the "
          f"phrase index runs it (numpy's BLAS product + top-{a.nprobe}, then faiss's search_preassigned): "
          f"{c['coarse_s_questions']:.3f} s per batch of {a.batch} questions ({2 * a.batch} vectors), "
          f"{c['coarse_s_half']:.3f} s for {a.batch} vectors; faiss's IndexFlatIP search for the same "
          f"{2 * a.batch} vectors: {c['faiss_coarse_s_questions']:.3f} s (for information)")
    print(f"    projected to 770M vectors: {p['qps_questions']:.2f} Q/s = {a.batch} / ({c['coarse_s_questions']:.3f} "
          f"coarse over 1,048,576 + {m['scan_s_questions']:.3f} scan of {m['nprobe']} lists of ~"
          f"{m['list_len_mean']:.0f})")
    print(f"    one half only ({a.batch} vectors per batch): {p['qps_half']:.2f} Q/s; with Eq. 10's span step "
          f"(+{acc['span'].get('span_s_per_batch', 0):.3f} s): {p['qps_questions_with_span']:.2f} Q/s")
    print(f"    with faiss's IndexFlatIP as the coarse step (for information): "
          f"{p['qps_questions_faiss_coarse']:.2f} Q/s")
    print(f"    index size at 770M: {p['index_gb_at_770m']:.0f} GB (paper's storage: {PAPER_STORAGE_GB:.0f} GB, "
          f"with metadata)")
    print(f"(c) accuracy subset: {acc['vectors']:,} clustered synthetic vectors, {acc['queries']} queries, "
          f"nlist {acc['nlist']}, trained on 20% (seed 29); recall of MIPS top-k vs exact search")
    for row in acc["indexes"].values():
        rec = "; ".join(f"nprobe {npb}: " + " ".join(f"{k} {v:.3f}" for k, v in vals.items())
                        for npb, vals in row["recall"].items())
        print(f"    {row['spec']:<32} {row['bytes_per_vector']:6.0f} B/vec  build {row['build_s']:5.1f} s  "
              f"{rec}; Eq. 10 top-1 = Flat's: {row['phrase_top1_agreement_with_flat']:.3f}")
    if acc.get("span"):
        s = acc["span"]
        print(f"    Eq. 10 span step (IVF-SQ4, k {s['k']}, L {s['L']}): {s['span_s_per_batch']:.3f} s per batch of "
              f"{s['batch']}, {s['pairs_per_question']:.0f} (start, end) pairs per question")
    verdict = "MET" if r["target_met"] else "NOT MET"
    share = c["coarse_s_questions"] / (c["coarse_s_questions"] + m["scan_s_questions"])
    print(f"\ntarget: {TARGET}: {verdict} (projected {p['qps_questions']:.2f} Q/s, index only, encoders excluded; "
          f"{env['cpus']} CPUs here vs the paper's Xeon E5-2630 v4 server; the coarse quantiser is "
          f"{share:.0%} of the projected time)")
    print(f"total {r['seconds']:.0f} s")


def main(argv: list[str]) -> int:
    report = run(argv)
    out = report["args"].get("json")
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
        tmp.replace(path)
        print(f"\nwrote {path}")
    return 0
