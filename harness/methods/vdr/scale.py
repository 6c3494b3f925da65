"""Paper scale from a synthetic payload (methods.<m>.scale; the scale overlay): SVDR's cells of
Tables 2, 3 and the text at the synthetic dataset's passage count, each through the method's own
backend and timing protocol, printed beside the paper's figures (configs/published/svdr.yaml)."""
from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import synthetic as syn
from harness.errors import ConfigError
from harness.io import read_json
from harness.meta import device_info, timing_gpu
from harness.methods.base import Context
from harness.methods.vdr.index import TOKEN_INDEX_FILE
from harness.indexes.sparse_csr import SparseEmbeddingIndex
from harness.methods.vdr.measure import (_protocol, _timed, _token_memory, _torch_search, _torch_sparse,
                                         _trimmed, _v, _write)
from harness.methods.vdr.settings import scale_settings, settings
from harness.published import DEFAULT_ROOT, format_value, load_published, records_of
from harness.units import convert

SYNTHETIC_NOTE = ("synthetic payload (harness/datasets/synthetic.py): random token ids / vectors shaped like the "
                  "paper's, seeded; speed and size only, never effectiveness")

#: the published cell (table, row, column of configs/published/svdr.yaml) each scale cell is printed
#: beside, and the device of the paper's figure: "cuda" for Table 2's cells marked † and Table 3's
#: in-training retrieval (§7.2: "neural retrieval techniques leveraging GPU resources"; its column
#: GPU is GPU allocation), "cpu" for Table 2's unmarked cells, None for sizes and ratios. A cell is
#: judged against the paper only on the same device (or when the figure has none).
PAPER_CELLS: dict[tuple[str, str], tuple[str, str, str, str | None]] = {
    ("lat-beta", "T_D"): ("2", "SVDR_β", "T(D)", "cpu"),
    ("lat-beta", "f_cpu"): ("2", "SVDR_β", "f(q,D) CPU", "cpu"),
    ("lat-beta", "f_per_batch_cpu"): ("2", "SVDR_β", "f(q,D)", "cuda"),
    ("lat-beta", "f_per_batch_cuda"): ("2", "SVDR_β", "f(q,D)", "cuda"),
    ("lat-dpr", "f_cpu"): ("2", "DPR", "f(q,D) CPU", "cpu"),
    ("lat-full", "f_cpu"): ("2", "SVDR_full", "f(q,D) CPU", "cpu"),
    ("intrain-beta", "latency_per_batch"): ("3", "SVDR_β", "Latency", "cuda"),
    ("intrain-beta", "storage_bytes"): ("3", "SVDR_β", "Storage", None),
    ("intrain-beta", "memory_bytes"): ("3", "SVDR_β", "GPU", "cuda"),
    ("intrain-dpr", "latency_per_batch"): ("3", "DPR", "Latency", "cuda"),
    ("intrain-dpr", "storage_bytes"): ("3", "DPR", "Storage", None),
    ("intrain-dpr", "memory_bytes"): ("3", "DPR", "GPU", "cuda"),
    ("index-token", "index_bytes"): ("text", "Binary token index (SVDR_β), Wikipedia", "Storage", None),
    ("index-emb", "index_bytes"): ("text", "Embedding-based index, Wikipedia", "Storage", None),
    ("index", "bytes_reduction"): ("text", "Binary token index vs embedding-based index", "Reduction", None),
}
DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU"}


def paper_figures(root: Path | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """The paper's figure of every :data:`PAPER_CELLS` cell, read from configs/published/svdr.yaml
    (``root``: another folder of published files): value and unit as printed, device, description."""
    doc = load_published("svdr", root)
    records = {(r["table"], r["row"], r["column"]): r for r in records_of(doc)}
    out = {}
    for cell, (table, row, column, device) in PAPER_CELLS.items():
        rec = records.get((table, row, column))
        if rec is None or rec["value"] is None:
            path = Path(root or DEFAULT_ROOT) / "svdr.yaml"
            raise ConfigError(f"{path} has no number for table {table!r}, row {row!r}, column {column!r}, "
                              f"which the scale job prints beside {'.'.join(cell)}",
                              fix="restore the record, or change PAPER_CELLS in harness/methods/vdr/scale.py")
        where = f" on the {DEVICE_NAMES[device]}" if device else ""
        printed = f"{format_value(rec['value'])} {rec['unit']}"
        out[cell] = {"value": float(rec["value"]), "unit": rec["unit"], "device": device,
                     "text": f"Table {table} {row} {column} {printed}{where}"}
    return out


def _say(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _faiss_flat(n: int, dim: int, rng: np.random.Generator):
    """The harness's ``faiss:Flat`` (a faiss IndexFlatIP, searched by its exact BLAS scan: the one DPR's
    own index takes) over ``n`` synthetic DPR vectors added block by block, and its build seconds."""
    import faiss

    from harness.indexes.faiss_dense import DenseFaissIndex

    index = faiss.IndexFlatIP(dim)
    t = 0.0
    for block in syn.dense_blocks(n, dim, rng):
        t0 = time.perf_counter()
        index.add(block)
        t += time.perf_counter() - t0
    return DenseFaissIndex(index, "Flat"), t


def _faiss_gpu_ms(index, queries: np.ndarray, k: int, repeats: int, trim: str) -> float:
    """Per-call seconds of a faiss GPU copy of ``index`` (faiss-gpu; not exercised on CPU-only machines)."""
    import faiss

    res = faiss.StandardGpuResources()
    gindex = faiss.index_cpu_to_gpu(res, 0, index)
    return _trimmed(_timed(lambda: gindex.search(queries, k), repeats, warmup=1), trim)


def _setup(ctx: Context) -> dict[str, Any]:
    """Settings, protocol, the payload's token probabilities and query batches, the files' common part."""
    cfg = ctx.cfg
    sc = scale_settings(ctx.mcfg)
    s = settings(ctx.mcfg, method=ctx.method)
    protocol, repeats, deviation = _protocol(cfg)
    trim, bs, k = protocol.trim, protocol.batch_size, cfg["evaluate"]["depth"]
    n = syn.passages(cfg["datasets"][ctx.dataset])
    vocab, dim = int(sc["vocab"]), int(sc["dim"])
    fit = syn.load_fit()
    slope = float(sc["zipf_slope"] or fit["slope"])
    test_batches = -(-int(sc["test_questions"]) // bs)
    n_batches = int(sc["batches"])
    B, top_m = int(s["batch_size"]), int(s["retrieval_top_m"])
    gpu, gpu_why = timing_gpu(cfg)
    rng = np.random.default_rng(cfg["seed"])
    p = syn.token_probabilities(vocab, float(sc["density"]), slope, rng)
    qbatches = [syn.sparse_queries(bs, vocab, int(sc["query_active"]), p, rng) for _ in range(n_batches)]
    train_q = syn.sparse_queries(B, vocab, int(sc["query_active"]), p, rng)
    common = {"payload": SYNTHETIC_NOTE, "passages": n, "vocab": vocab, "density_target": sc["density"],
              "zipf_slope": slope, "zipf_fit": fit.get("source"), "query_active": sc["query_active"],
              "protocol": protocol.name, "repeats": repeats, "deviation": deviation, "trim": trim, "batch_size": bs,
              "timed_batches": n_batches, "test_questions": sc["test_questions"], "test_batches": test_batches,
              "k": k, "seed": cfg["seed"], "device_info": device_info("cpu")}
    return {"m": ctx.method, "dataset": ctx.dataset, "sc": sc, "repeats": repeats, "trim": trim, "bs": bs,
            "k": k, "n": n, "vocab": vocab, "dim": dim, "slope": slope, "test_batches": test_batches,
            "n_batches": n_batches, "B": B, "top_m": top_m, "gpu": gpu, "gpu_why": gpu_why, "rng": rng,
            "p": p, "qbatches": qbatches, "train_q": train_q, "common": common}


def _dpr(st: Mapping[str, Any], tmp: Path, out_dir: Path) -> tuple[list[Path], float, dict[str, str]]:
    """Table 2 row DPR, Table 3 rows DPR and BM25: faiss Flat on a fraction, projected. Returns the
    files, DPR's projected storage and the encoder's not-run reasons (shared by the other rows)."""
    import faiss

    m, n, dim, bs, k, rng, common = st["m"], st["n"], st["dim"], st["bs"], st["k"], st["rng"], st["common"]
    repeats, trim, n_batches, B, top_m = st["repeats"], st["trim"], st["n_batches"], st["B"], st["top_m"]
    nd = min(n, int(st["sc"]["dense_fraction"]))
    f = n / nd
    _say(f"DPR Flat on {nd:,} synthetic {dim}-d vectors (projected x{f:.2f} to {n:,})")
    flat, flat_build = _faiss_flat(nd, dim, rng)
    faiss.write_index(flat.index, str(tmp / "dpr.faiss"))
    flat_disk = (tmp / "dpr.faiss").stat().st_size
    (tmp / "dpr.faiss").unlink()
    qd = rng.standard_normal((bs * n_batches, dim), dtype=np.float32)
    qt = rng.standard_normal((B, dim), dtype=np.float32)
    dpr_batch = [x for i in range(n_batches) for x in
                 _timed(lambda i=i: flat.search(qd[i * bs:(i + 1) * bs], k), repeats, warmup=1)]
    dpr_train = _timed(lambda: flat.search(qt, top_m), repeats, warmup=1)
    dpr_gpu = _faiss_gpu_ms(flat.index, qd[:bs], k, repeats, trim) if st["gpu"] else None
    flat.index.reset()
    flat = None
    per_batch = _trimmed(dpr_batch, trim)
    vals = {"f_cpu": _v(per_batch * f * st["test_batches"], "s", "cpu", True),
            "f_per_batch_cpu": _v(per_batch * f, "s", "cpu", True),
            "E_D_fraction_add_seconds": _v(flat_build, "s", "cpu")}
    nr = {"E_D": "not run: E_θ(D) is the encoder's time; a synthetic payload has no encoder "
                 "(speed and size only)",
          "E_q_cuda": "not run: E_θ(q) needs the encoder; a synthetic payload times the index only",
          "E_q_cpu": "not run: E_θ(q) needs the encoder; a synthetic payload times the index only",
          "search_total": "not run: needs E_θ(q) (the encoder)",
          "total": "not run: needs E_θ(D) (the encoder)"}
    if dpr_gpu is not None:
        vals["f_cuda"] = _v(dpr_gpu * f * st["test_batches"], "s", "cuda", True)
    else:
        nr["f_cuda"] = st["gpu_why"]
    how = (f"faiss:Flat (IndexFlatIP, scanned as an exact BLAS product: harness/indexes/blas.py) over {nd:,} of "
           f"{n:,} vectors; per-batch time x {f:.3f} (Flat search is linear "
           "in the corpus) x test batches: projected")
    out = [_write(Path(out_dir) / f"{m}.lat-dpr.json", f"{m}.lat-dpr", st["dataset"], vals, nr,
                  fraction=nd, projection=how, raw_samples_seconds=dpr_batch, **common)]
    storage = flat_disk * f
    out.append(_write(Path(out_dir) / f"{m}.intrain-dpr.json", f"{m}.intrain-dpr", st["dataset"], {
        "latency_per_batch": _v(_trimmed(dpr_train, trim) * f, "s", "cpu", True),
        "storage_bytes": _v(storage, "B", None, True),
        "memory_bytes": _v(nd * dim * 4 * f, "B", "cpu", True)},
        {}, fraction=nd, projection=how.replace("test batches", "1 batch"), train_batch=B, top_m=top_m,
        raw_samples_seconds=dpr_train, **common))
    out.append(_write(Path(out_dir) / f"{m}.intrain-bm25.json", f"{m}.intrain-bm25", st["dataset"], {}, {
        x: "not run: BM25 (Lucene) needs passage text; a synthetic payload has none"
        for x in ("latency_per_batch", "storage_bytes", "memory_bytes")}, **common))
    return out, storage, nr


def _full(st: Mapping[str, Any], tmp: Path, out_dir: Path,
          nr: Mapping[str, str]) -> tuple[list[Path], dict[str, Any]]:
    """Table 2 row SVDR_full: the embedding index E_θ(D) on a fraction, projected. Returns the file and
    the index's projected facts (for the index rows)."""
    m, n, vocab, k, sc, trim = st["m"], st["n"], st["vocab"], st["k"], st["sc"], st["trim"]
    ne = min(n, int(sc["emb_fraction"]))
    fe = n / ne
    _say(f"embedding index on {ne:,} passages x {sc['emb_active']} active dims (projected x{fe:.2f})")
    emb = SparseEmbeddingIndex(syn.sparse_queries(ne, vocab, int(sc["emb_active"]), st["p"], st["rng"]),
                               [str(i) for i in range(ne)])
    emb.save(tmp)
    emb_disk = sum(x.stat().st_size for x in tmp.iterdir() if x.is_file())
    emb_mem = emb.nbytes
    emb.by_dim  # noqa: B018 - the search layout is built before the timed searches
    full = [x for qb in st["qbatches"]
            for x in _timed(lambda qb=qb: emb.search(qb, k), st["repeats"], warmup=1)]
    emb = None
    for x in list(tmp.iterdir()):
        x.unlink()
    per_full = _trimmed(full, trim)
    how_e = (f"sparse-csr embedding index over {ne:,} of {n:,} passages ({sc['emb_active']} active dims "
             f"each, float32 + int32 ids); bytes and per-batch time x {fe:.3f}: projected")
    vals = {"f_cpu": _v(per_full * fe * st["test_batches"], "s", "cpu", True),
            "f_per_batch_cpu": _v(per_full * fe, "s", "cpu", True)}
    nr_full = {**nr, "f_cuda": st["gpu_why"]
               or "not run: the GPU path of the scale job times beta search and DPR Flat only"}
    path = _write(Path(out_dir) / f"{m}.lat-full.json", f"{m}.lat-full", st["dataset"], vals, nr_full,
                  fraction=ne, projection=how_e, raw_samples_seconds=full, **st["common"])
    return [path], {"disk": emb_disk, "memory": emb_mem, "fraction": ne, "factor": fe, "how": how_e}


def _beta(st: Mapping[str, Any], tmp: Path, out_dir: Path, nr: Mapping[str, str]) -> tuple[list[Path], int]:
    """Table 2 row SVDR_β, Table 3 row SVDR_β and the token index's facts: the binary token index T(D)
    at full scale. Returns the files and the index's bytes on disk."""
    m, n, vocab, k, trim, repeats = st["m"], st["n"], st["vocab"], st["k"], st["trim"], st["repeats"]
    bs, n_batches, test_batches = st["bs"], st["n_batches"], st["test_batches"]
    B, top_m, common = st["B"], st["top_m"], st["common"]
    _say(f"binary token index: {n:,} passages, {vocab:,} dims, density {st['sc']['density']}, "
         f"slope {st['slope']}")
    tindex, secs = token_index(n, vocab, st["p"], st["rng"], log=_say)
    path = tindex.save(tmp / TOKEN_INDEX_FILE)
    t_disk = path.stat().st_size
    path.unlink()
    density = tindex.nnz / (n * vocab)
    _say(f"token index: {tindex.nnz:,} postings ({density:.5f} density), {t_disk / 1e9:.2f} GB on disk, "
         f"build {secs['build']:.1f} s (+{secs['generate']:.1f} s drawing the payload)")
    _say(f"beta search: {n_batches} batch(es) of {bs} x {repeats} repeats (+1 warm-up)")
    beta = [x for qb in st["qbatches"] for x in _timed(lambda qb=qb: tindex.search(qb, k), repeats, warmup=1)]
    _say(f"in-training beta search: batch of {B}, top {top_m}")
    beta_train = _timed(lambda: tindex.search(st["train_q"], top_m), repeats, warmup=1)
    per_beta = _trimmed(beta, trim)
    vals = {"T_D": _v(secs["build"], "s", "cpu"),
            "f_cpu": _v(per_beta * test_batches, "s", "cpu", n_batches < test_batches),
            "f_per_batch_cpu": _v(per_beta, "s", "cpu")}
    nr_beta = {k_: v for k_, v in nr.items() if k_ != "E_D"}
    nr_beta["E_D"] = "/ (beta search builds no embedding index)"
    nr_beta["total"] = "not run: needs E_θ(q) (the encoder)"
    if st["gpu"]:
        t_t = _torch_sparse(tindex.to_scipy_csr(), "cuda")
        g = [x for qb in st["qbatches"]
             for x in _timed(lambda qb=qb: _torch_search(t_t, qb, k, "cuda"), repeats, warmup=1)]
        del t_t
        vals["f_cuda"] = _v(_trimmed(g, trim) * test_batches, "s", "cuda", n_batches < test_batches)
        vals["f_per_batch_cuda"] = _v(_trimmed(g, trim), "s", "cuda")
    else:
        nr_beta["f_cuda"] = st["gpu_why"]
    out = [_write(Path(out_dir) / f"{m}.lat-beta.json", f"{m}.lat-beta", st["dataset"], vals, nr_beta,
                  T_D_what="building the blocked index from the passages' token ids (dedupe, sort, counts, "
                           "offsets); tokenisation excluded (a synthetic payload has no text); drawing the "
                           "random payload excluded",
                  generate_seconds=secs["generate"], raw_samples_seconds=beta,
                  f_what=f"per batch of {bs} (trimmed mean) x {test_batches} test batches", **common)]
    out.append(_write(Path(out_dir) / f"{m}.intrain-beta.json", f"{m}.intrain-beta", st["dataset"], {
        "latency_per_batch": _v(_trimmed(beta_train, trim), "s", "cpu"),
        "storage_bytes": _v(t_disk, "B"), "memory_bytes": _v(_token_memory(tindex), "B", "cpu")}, {},
        train_batch=B, top_m=top_m, raw_samples_seconds=beta_train, **common))
    token_vals = {"index_bytes": _v(t_disk, "B"), "index_memory_bytes": _v(_token_memory(tindex), "B", "cpu"),
                  "index_build_seconds": _v(secs["build"], "s", "cpu"), "index_density": _v(density, "ratio")}
    out.append(_write(Path(out_dir) / f"{m}.index-token.json", f"{m}.index-token", st["dataset"], token_vals,
                      {}, nnz=tindex.nnz, **common))
    return out, t_disk


def _index_rows(st: Mapping[str, Any], out_dir: Path, emb: Mapping[str, Any], t_disk: int,
                storage: float) -> list[Path]:
    """The text's rows: the embedding index (projected from its fraction) and the two indexes' ratio."""
    m, vocab, sc, common = st["m"], st["vocab"], st["sc"], st["common"]
    fe = emb["factor"]
    emb_vals = {"index_bytes": _v(emb["disk"] * fe, "B", None, True),
                "index_memory_bytes": _v(emb["memory"] * fe, "B", "cpu", True),
                "index_density": _v(int(sc["emb_active"]) / vocab, "ratio")}
    out = [_write(Path(out_dir) / f"{m}.index-emb.json", f"{m}.index-emb", st["dataset"], emb_vals,
                  {"index_build_seconds": "not run: E_θ(D) is the encoder's time; a synthetic payload has no "
                                          "encoder"},
                  fraction=emb["fraction"], projection=emb["how"], **common)]
    ratio = t_disk / (emb["disk"] * fe)
    out.append(_write(Path(out_dir) / f"{m}.index.json", f"{m}.index", st["dataset"], {
        "token_index_bytes": _v(t_disk, "B"), "emb_index_bytes": _v(emb["disk"] * fe, "B", None, True),
        "token_to_emb_bytes": _v(ratio, "ratio", None, True),
        "bytes_reduction": _v(1.0 - ratio, "ratio", None, True),
        "dpr_flat_bytes": _v(storage, "B", None, True),
        "token_to_dpr_bytes": _v(t_disk / storage, "ratio", None, True)},
        {"token_to_emb_build_seconds": "not run: E_θ(D) needs the encoder"}, **common))
    return out


def scale_measure(ctx: Context, out_dir: Path) -> list[Path]:
    """SVDR's efficiency cells at the synthetic dataset's passage count (21,015,324 in the scale
    profile), each through the method's own backend and timing protocol (svdr-appendix-b):

    * ``<m>.lat-beta`` (Table 2): T(D) = building the binary token index from the passages' token
      ids (tokenisation excluded: the payload has no text), f(q,D) = beta search (numba kernel,
      CPU; torch sparse CSR in fp16 on a GPU) per batch of 32, times the test set's batches;
    * ``<m>.lat-full`` / ``<m>.lat-dpr`` (Table 2): f(q,D) over the embedding index / a faiss Flat
      DPR index built on a fraction and projected linearly to the corpus;
    * ``<m>.intrain-beta|dpr|bm25`` (Table 3): one batch of training questions, top retrieval_top_m;
      storage and host memory of the index (DPR projected from the fraction);
    * ``<m>.index``, ``<m>.index-token``, ``<m>.index-emb`` (text): bytes, build time, density.
    """
    paper = paper_figures()  # read first: a broken published file fails before hours of timing
    st = _setup(ctx)
    out: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="svdr-scale-", dir=Path(out_dir).parent))
    try:
        paths, storage, nr = _dpr(st, tmp, out_dir)
        out += paths
        paths, emb = _full(st, tmp, out_dir, nr)
        out += paths
        paths, t_disk = _beta(st, tmp, out_dir, nr)
        out += paths
        out += _index_rows(st, out_dir, emb, t_disk, storage)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _print_scale(out, paper)
    return out


def _print_scale(paths: Sequence[Path], paper: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Each figure beside the paper's (the benchmark's printout; speed never fails a test). A figure
    is judged only against a paper figure of the same device (or one without a device)."""
    for path in paths:
        doc = read_json(path)
        row = doc["system"].split(".", 1)[1]
        for name, v in doc["values"].items():
            pub = paper.get((row, name))
            mark = "projected" if v.get("kind") == "projected" else "measured"
            text = f"{doc['system']:>20} {name:<22} {v['value']:>14.6g} {v['unit']:<5} ({mark}, {v.get('device', '-')})"
            if pub and pub["device"] not in (None, v.get("device")):
                here = DEVICE_NAMES.get(v.get("device"))
                why = f"this figure is on the {here}; the paper has no {here} figure for it" if here else \
                    "this figure has no device, the paper's has one"
                text += f"  paper {pub['text']}: not compared ({why})"
            elif pub:
                target = convert(pub["value"], pub["unit"], v["unit"])
                verdict = "meets" if v["value"] <= target else "misses"
                if v["unit"] == "ratio":
                    verdict = "meets" if v["value"] >= target else "misses"
                text += f"  paper {pub['text']}: {verdict}"
            print(text, flush=True)


def token_index(n_docs: int, vocab: int, p: np.ndarray, rng: np.random.Generator,
                log: Any = None) -> tuple[Any, dict[str, float]]:
    """A BinaryTokenIndex of ``n_docs`` synthetic passages (harness.datasets.synthetic's draws), built block by block into one
    preallocated uint16 postings array. Returns the index and seconds: ``generate`` (random draws,
    not part of T(D)) and ``build`` (dedupe, sort, counts, offsets: T(D) without tokenisation)."""
    import math

    from harness.indexes.token_csr import BinaryTokenIndex

    n_blocks = -(-n_docs // syn.BLOCK)
    expect = float(p.sum()) * n_docs
    cap = int(expect + 8 * math.sqrt(expect) + 1024)
    postings = np.empty(cap, np.uint16)
    indptr = np.empty((n_blocks, vocab + 1), np.int64)
    pos = 0
    t_gen = t_build = 0.0
    for b in range(n_blocks):
        nb = min(syn.BLOCK, n_docs - b * syn.BLOCK)
        t0 = time.perf_counter()
        keys = syn.token_block(nb, p, rng)
        t1 = time.perf_counter()
        counts, local = syn.block_postings(keys, vocab)
        del keys
        if pos + local.size > postings.size:  # beyond 8 sigma: grow (never expected)
            postings = np.concatenate([postings, np.empty(max(local.size, cap // 16), np.uint16)])
        postings[pos:pos + local.size] = local
        indptr[b, 0] = pos
        np.cumsum(counts, out=indptr[b, 1:])
        indptr[b, 1:] += pos
        pos += local.size
        t_gen += t1 - t0
        t_build += time.perf_counter() - t1
        if log and (b % 32 == 0 or b == n_blocks - 1):
            log(f"token index: block {b + 1}/{n_blocks}, {pos:,} postings")
    index = BinaryTokenIndex(indptr, postings[:pos], n_docs, vocab)
    return index, {"generate": t_gen, "build": t_build}
