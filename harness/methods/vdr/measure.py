"""Efficiency figures of the measure jobs on a dataset (metrics JSON): the index facts, Table 2
(latency per stage, SVDR's timing protocol) and Table 3 (in-training retrieval); the helpers the
synthetic (Table 5) and scale jobs share.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import store
from harness.indexes.sparse_csr import SparseEmbeddingIndex
from harness.io import read_json
from harness.meta import folder_bytes, read_meta, resolve_device, timing_gpu
from harness.methods.base import Context
from harness.methods.vdr.index import build_token_index, load_token_index
from harness.methods.vdr.model import VDRModel, passage_text
from harness.methods.vdr.settings import settings
from harness.job import Job
from harness.timing import PROTOCOLS, run, summarize, time_calls
from harness.figures import value, write

# SVDR efficiency figures as metrics JSON (``results/<profile>/metrics/<dataset>/<system>.json``).
#
# Every file is ``{"values": {name: {"value", "unit", "device"}}, "not_run": {name: why}, ...}``
# with the protocol, the hardware and the package versions. Times are in seconds, sizes in bytes;
# the tables convert them to the published units (harness/units.py).
#
# * Index facts (system ``<m>.index``): bytes on disk (the index folder, docids included), bytes in
#   memory, and the build time of each index as its index rule measured it (one build, I/O excluded).
# * Table 2 (systems ``<m>.lat-full``, ``-alpha``, ``-beta``, ``-beta-m<k>``; ``svdr.lat-bm25`` and
#   ``svdr.lat-dpr`` from the generic timing rule): the SVDR timing protocol of Appendix B
#   (``timing.protocol``: runs repeated, max and min dropped, mean; batch 32; max length 256).
#   Indexing stages (T(D), E_θ(D)) are timed over the whole corpus (``latency.index_repeats`` runs;
#   with ``latency.corpus_sample`` on the first n passages, scaled to the corpus). Search stages
#   (E_θ(q), T(q), f(q,D), E_θ(p)) are timed per batch of 32 test questions on ``latency.batches``
#   batches (``latency.rerank_batches`` for E_θ(p)); the figure is the trimmed mean per batch times
#   the number of batches of the dataset's test set (the paper reports totals over NQ test).
#   Reading files and converting formats happen outside the timer; f(q,D) includes the top-k sort
#   (k = evaluate.depth); E_θ(p) embeds the unique passages of the batch's beta top k and re-scores.
#   Numba-compiled searches get one untimed warm-up call. The encoder stages run on the timing
#   device (``timing.device: cuda`` with a visible GPU, else the CPU); f(q,D) is measured on the
#   CPU (scipy, the numba kernel) and, with a GPU, also the authors' way (fp16 torch.sparse); E_θ(q)
#   also on the CPU. A figure that could not be measured is listed under ``not_run`` with the reason;
#   every value carries its device.
# * Table 3 (``svdr.intrain-bm25``, ``-dpr``, ``-beta``): retrieval of the top ``retrieval_top_m``
#   for a batch of ``batch_size`` training questions over the training corpus's index, as the
#   in-training negative retrieval does: query encoding outside the timer for the neural indexes
#   (it happens in the training forward pass anyway), BM25 timed whole (Lucene analyses the
#   query); storage = index bytes on disk; memory = the index's bytes held in host memory.
# * Table 5 (``svdr.synth-a<a>``, ``svdr.synth-bs<b>``): a synthetic binary token index of
#   ``synthetic.passages`` passages with ``a`` distinct tokens each (Zipf-like document frequencies,
#   synthetic.py), queries with ``query_active`` weighted dimensions; latency per
#   batch and per query of the top-``k`` beta search, bytes on disk and in memory.
def _v(v: float, unit: str, device: str | None = None, projected: bool = False) -> dict[str, Any]:
    """A figure (:func:`harness.figures.value`); ``projected``: scaled from a measured fraction
    (timed batches x the test set's batches, a corpus sample x the corpus)."""
    return value(float(v), unit, device=device, projected=projected)


def _write(path: Path, system: str, dataset: str | None, values: Mapping[str, Any], not_run: Mapping[str, str],
           **extra: Any) -> Path:
    return write(path, system, dataset, values, not_run=not_run, **extra)


def _protocol(cfg: Mapping[str, Any]):
    protocol = PROTOCOLS.get(cfg["timing"].get("protocol") or "svdr-appendix-b")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    deviation = None if repeats == protocol.repeats else f"{repeats} repeats instead of {protocol.repeats}"
    return protocol, repeats, deviation


def _trimmed(samples: Sequence[float], trim: str) -> float:
    return summarize(samples, trim)["mean"]


def _timed(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> list[float]:
    return time_calls(fn, repeats, warmup)


# --------------------------------------------------------------------------------------------
# index facts (claims: bytes and build time of the two indexes)
# --------------------------------------------------------------------------------------------
def write_index_metrics(ctx: Context, token_dir: Path, emb_dir: Path, out: Path) -> Path:
    tm, em = read_meta(token_dir), read_meta(emb_dir)
    values = {}
    for prefix, m in (("token_index", tm), ("emb_index", em)):
        values[f"{prefix}_bytes"] = _v(m["bytes"], "B")
        values[f"{prefix}_memory_bytes"] = _v(m["memory_bytes"], "B", "cpu")
        values[f"{prefix}_build_seconds"] = _v(m["build_seconds"], "s", m.get("device", "cpu"))
        values[f"{prefix}_density"] = _v(m["density"], "ratio")
    values["token_to_emb_bytes"] = _v(tm["bytes"] / em["bytes"], "ratio")
    values["bytes_reduction"] = _v(1.0 - tm["bytes"] / em["bytes"], "ratio")
    values["token_to_emb_build_seconds"] = _v(tm["build_seconds"] / em["build_seconds"], "ratio")
    note = ("bytes: the index folder on disk (docids.txt included); build seconds: one build by the index "
            "rule, reading the corpus and writing files excluded")
    out = Path(out)
    # one file per index too, with the same names (the text table's rows)
    for kind, prefix in (("token", "token_index"), ("emb", "emb_index")):
        part = {name.removeprefix(prefix + "_") if name != f"{prefix}_bytes" else "index_bytes": v
                for name, v in values.items() if name.startswith(prefix + "_")}
        part = {("index_" + k if not k.startswith("index_") else k): v for k, v in part.items()}
        _write(out.with_name(f"{ctx.method}.index-{kind}.json"), f"{ctx.method}.index-{kind}", ctx.dataset, part,
               {}, index=str(token_dir if kind == "token" else emb_dir), note=note)
    return _write(out, f"{ctx.method}.index", ctx.dataset, values, {}, token_index=str(token_dir),
                  emb_index=str(emb_dir), note=note)


# --------------------------------------------------------------------------------------------
# Table 2: latency per stage
# --------------------------------------------------------------------------------------------
def _cuda_ok(cfg: Mapping[str, Any]) -> bool:
    """timing.device is cuda and torch sees a GPU here (harness.meta.timing_gpu)."""
    return timing_gpu(cfg)[0]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _torch_sparse(matrix, device: str):
    """A scipy CSR as a torch sparse CSR on ``device`` (fp16 on the GPU, as the authors)."""
    import torch

    m = matrix.tocsr()
    dtype = torch.float16 if device == "cuda" else torch.float32
    return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                   torch.from_numpy(m.indices.astype(np.int64)),
                                   torch.from_numpy(m.data.astype(np.float32)).to(dtype),
                                   size=m.shape, device=device)


def _torch_search(index_t, queries, k: int, device: str):
    """The authors' f(q, D): sparse index [N, V] x dense queries [V, B], then top-k per query."""
    import torch

    dtype = torch.float16 if device == "cuda" else torch.float32
    q = torch.from_numpy(queries.toarray().T.copy()).to(device=device, dtype=dtype)
    scores = index_t @ q
    out = torch.topk(scores, min(k, scores.shape[0]), dim=0)
    _sync(device)
    return out


def _latency_setup(ctx: Context, model_dir: Path):
    cfg = ctx.cfg
    lat = ctx.mcfg.get("latency") or {}
    protocol, repeats, deviation = _protocol(cfg)
    enc = VDRModel.load(model_dir, ctx.mcfg.get("torch_threads"))
    bs = protocol.batch_size
    n_sample = lat.get("corpus_sample")
    if n_sample:   # the sample is kept and the rest only counted (NQ's 21M passages are ~24 GiB in memory)
        docs, n_corpus = [], 0
        for n_corpus, d in enumerate(store.iter_corpus(ctx.data_dir()), 1):
            if n_corpus <= int(n_sample):
                docs.append(d)
    else:
        docs = store.corpus_list(ctx.data_dir())
        n_corpus = len(docs)
    queries = store.read_queries(ctx.data_dir(), "test")
    qbatches = [[enc.question(q.text) for q in queries[i:i + bs]] for i in range(0, len(queries), bs)]
    gpu = _cuda_ok(cfg)
    if gpu:
        enc.to("cuda")
    return {
        "enc": enc, "docs": docs, "texts": [passage_text(d) for d in docs], "protocol": protocol,
        "repeats": repeats, "index_repeats": int(lat.get("index_repeats") or repeats), "deviation": deviation,
        "bs": bs, "max_len": protocol.max_length or enc.s["p_max_len"], "trim": protocol.trim,
        "k": cfg["evaluate"]["depth"], "total_batches": len(qbatches), "qbatches": qbatches,
        "n_batches": int(lat.get("batches", 2)), "n_rerank": int(lat.get("rerank_batches", 1)),
        "n_queries": len(queries), "scale": n_corpus / max(1, len(docs)), "corpus_passages": n_corpus,
        "dev": "cuda" if gpu else "cpu",
    }


def _common(ctx: Context, st: Mapping[str, Any], model_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "protocol": st["protocol"].name, "repeats": st["repeats"], "index_repeats": st["index_repeats"],
        "deviation": st["deviation"], "trim": st["trim"], "batch_size": st["bs"], "max_length": st["max_len"],
        "query_max_length": st["enc"].s["q_max_len"], "k": st["k"], "corpus_passages": st["corpus_passages"],
        "timed_passages": len(st["docs"]), "corpus_scale": st["scale"], "test_questions": st["n_queries"],
        "test_batches": st["total_batches"], "device": st["dev"], "model": str(model_dir),
        "note": "search-stage figures = trimmed mean per batch of 32 x test batches; indexing = whole corpus "
                "(timed on the first timed_passages and scaled by corpus_scale when latency.corpus_sample is set)",
        **extra,
    }


def _index_stages(st: Mapping[str, Any]) -> tuple[list[float], list[float], Any, SparseEmbeddingIndex]:
    """T(D) (tokenises on the CPU) and E_θ(D) (the timing device) over the corpus: their samples and
    the last build of each."""
    enc, docs, texts, bs, max_len, dev = st["enc"], st["docs"], st["texts"], st["bs"], st["max_len"], st["dev"]
    built: dict[str, Any] = {}

    def t_d():
        built["T"] = build_token_index(enc.tok, docs, max_len, enc.skip)

    def e_d():
        built["E"] = enc.embed_passages(texts, max_len, batch_size=bs)
        _sync(dev)

    t_d_s = _timed(t_d, st["index_repeats"])
    e_d_s = _timed(e_d, st["index_repeats"])
    emb = SparseEmbeddingIndex(built["E"], [d.id for d in docs])
    emb.by_dim  # noqa: B018 - the search layout is built before the timed searches
    return t_d_s, e_d_s, built["T"], emb


def _search_stages(st: Mapping[str, Any], qbatches: Sequence[Sequence[str]], emb: SparseEmbeddingIndex,
                   tindex: Any) -> tuple[dict[str, list[float]], list[tuple[Any, Any]]]:
    """E_θ(q), T(q) and f(q,D) per batch of questions, f(q,D) on the CPU (scipy / numba kernel): the
    samples, and each batch's (E_θ(q), T(q))."""
    enc, bs, k, repeats, dev = st["enc"], st["bs"], st["k"], st["repeats"], st["dev"]
    samples: dict[str, list[float]] = {x: [] for x in ("E_q", "T_q", "f_full", "f_alpha", "f_beta")}
    encoded = []
    for qb in qbatches:
        def eq_fn(qb=qb):
            r = enc.embed_questions(qb, batch_size=bs)
            _sync(dev)
            return r

        eq, tq = eq_fn(), enc.binary_questions(qb)
        encoded.append((eq, tq))
        samples["E_q"] += _timed(eq_fn, repeats)
        samples["T_q"] += _timed(lambda qb=qb: enc.binary_questions(qb), repeats)
        samples["f_full"] += _timed(lambda eq=eq: emb.search(eq, k), repeats)
        samples["f_alpha"] += _timed(lambda tq=tq: emb.search(tq, k), repeats)
        samples["f_beta"] += _timed(lambda eq=eq: tindex.search(eq, k), repeats, warmup=1)
    return samples, encoded


def _by_device(cfg: Mapping[str, Any], st: Mapping[str, Any], qbatches: Sequence[Sequence[str]], emb, tindex,
               encoded, tot: Mapping[str, float]) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """E_θ(q) and f(q,D) totals per device: the other device's columns too (E_θ(q) on the CPU as well
    when the GPU is primary, f(q,D) on the GPU), or why they were not run."""
    enc, bs, k, repeats, trim, dev = st["enc"], st["bs"], st["k"], st["repeats"], st["trim"], st["dev"]
    total_batches = st["total_batches"]
    by_dev: dict[str, dict[str, float]] = {"cpu": {}, "cuda": {}}
    not_run: dict[str, str] = {}
    if dev == "cuda":
        by_dev["cuda"] = {"E_q": tot["E_q"],
                          **_gpu_search(emb, tindex, encoded, k, repeats, trim, total_batches * st["scale"])}
        enc.to("cpu")
        cpu_eq = [x for qb in qbatches for x in _timed(lambda qb=qb: enc.embed_questions(qb, batch_size=bs), repeats)]
        by_dev["cpu"] = {"E_q": _trimmed(cpu_eq, trim) * total_batches}
    else:
        why = resolve_device("cuda")[1] or "timing.device is cpu (set timing.device: cuda on a GPU machine)"
        if cfg["timing"]["device"] != "cuda":
            why = f"timing.device is {cfg['timing']['device']}: the GPU columns are timed with timing.device: cuda"
        not_run = {"E_q_cuda": why, "f_cuda": why}
        by_dev["cpu"] = {"E_q": tot["E_q"]}
    by_dev["cpu"].update({x: tot[x] for x in ("f_full", "f_alpha", "f_beta")})
    return by_dev, not_run


def _latency_rows(st: Mapping[str, Any], n_timed: int, per_batch: Mapping[str, float],
                  tot: Mapping[str, float], by_dev: Mapping[str, Mapping[str, float]], T_D: float,
                  E_D: float) -> dict[str, dict[str, Any]]:
    """The rows full, alpha and beta. Totals are per-batch means times the test set's batches (and a
    corpus sample scaled to the corpus): projected whenever fewer batches, or fewer passages, were
    timed than they stand for."""
    total_batches, scale, dev = st["total_batches"], st["scale"], st["dev"]
    p_search = n_timed < total_batches or scale != 1.0
    p_index = scale != 1.0

    def row(f_key: str, q_key: str, index_key: str) -> dict[str, Any]:
        index_s = T_D if index_key == "T_D" else E_D
        vals: dict[str, Any] = {index_key: _v(index_s, "s", "cpu" if index_key == "T_D" else dev, p_index)}
        for d, figures in by_dev.items():
            if q_key == "E_q" and "E_q" in figures:
                vals[f"E_q_{d}"] = _v(figures["E_q"], "s", d, n_timed < total_batches)
            if f_key in figures:
                vals[f"f_{d}"] = _v(figures[f_key], "s", d, p_search)
        if q_key == "T_q":
            vals["T_q"] = _v(tot["T_q"], "s", "cpu", n_timed < total_batches)
        q_s = tot["T_q"] if q_key == "T_q" else by_dev[dev]["E_q"]
        search_total = q_s + by_dev[dev][f_key]
        vals["search_total"] = _v(search_total, "s", dev, p_search)
        vals["total"] = _v(search_total + index_s, "s", dev, p_search or p_index)
        vals[f"{q_key}_per_batch"] = _v(per_batch[q_key], "s", dev if q_key == "E_q" else "cpu")
        vals["f_per_batch_cpu"] = _v(per_batch[f_key], "s", "cpu")
        return vals

    return {"lat-full": row("f_full", "E_q", "E_D"), "lat-alpha": row("f_alpha", "T_q", "E_D"),
            "lat-beta": row("f_beta", "E_q", "T_D")}


def latency(ctx: Context, model_dir: Path, out_dir: Path) -> list[Path]:
    """Table 2 rows full, alpha and beta of ``ctx.method`` (``<m>.lat-full|alpha|beta``)."""
    st = _latency_setup(ctx, model_dir)
    trim, total_batches, scale = st["trim"], st["total_batches"], st["scale"]
    qbatches = st["qbatches"][: st["n_batches"]]
    t_d_s, e_d_s, tindex, emb = _index_stages(st)
    samples, encoded = _search_stages(st, qbatches, emb, tindex)
    per_batch = {x: _trimmed(v, trim) for x, v in samples.items()}
    T_D, E_D = _trimmed(t_d_s, trim) * scale, _trimmed(e_d_s, trim) * scale
    tot = {x: v * total_batches * (scale if x.startswith("f_") else 1.0) for x, v in per_batch.items()}
    by_dev, not_run = _by_device(ctx.cfg, st, qbatches, emb, tindex, encoded, tot)
    rows = _latency_rows(st, len(qbatches), per_batch, tot, by_dev, T_D, E_D)
    common = _common(ctx, st, model_dir, timed_batches=len(qbatches),
                     raw_samples_seconds={"T_D": t_d_s, "E_D": e_d_s, **samples})
    return [_write(Path(out_dir) / f"{ctx.method}.{name}.json", f"{ctx.method}.{name}", ctx.dataset, vals, not_run,
                   **common) for name, vals in rows.items()]


def latency_rerank(ctx: Context, model_dir: Path, base: Path, depths: Sequence[int], out_dir: Path) -> list[Path]:
    """Table 2 rows SVDR_β (k=m): the beta row (``base``, its T(D), E_θ(q), f(q,D)) plus E_θ(p),
    embedding the unique passages of each batch's beta top m and re-scoring them."""
    st = _latency_setup(ctx, model_dir)
    enc, docs, texts, bs, max_len, dev = st["enc"], st["docs"], st["texts"], st["bs"], st["max_len"], st["dev"]
    qbatches = st["qbatches"][: st["n_rerank"]]
    b = read_json(base)
    tindex = build_token_index(enc.tok, docs, max_len, enc.skip)
    e_p: dict[int, list[float]] = {m: [] for m in depths}
    for qb in qbatches:
        eq = enc.embed_questions(qb, batch_size=bs)
        _, rows = tindex.search(eq, max(depths))
        for m in depths:
            ptexts = [texts[i] for i in sorted({int(r) for r in rows[:, :m].ravel() if r >= 0})]

            def embed_and_score(ptexts=ptexts, eq=eq):
                pv = enc.embed_passages(ptexts, max_len, batch_size=bs)
                _sync(dev)
                return (eq @ pv.T).toarray()

            e_p[m] += _timed(embed_and_score, st["repeats"])
    out = []
    for m in depths:
        per_batch = _trimmed(e_p[m], st["trim"])
        vals = {key: dict(b["values"][key]) for key in ("T_D", "E_q_cpu", "E_q_cuda", "f_cpu", "f_cuda")
                if key in b["values"]}
        proj = len(qbatches) < st["total_batches"]
        vals["E_p"] = _v(per_batch * st["total_batches"], "s", dev, proj)
        vals["E_p_per_batch"] = _v(per_batch, "s", dev)
        search_total = b["values"]["search_total"]["value"] + vals["E_p"]["value"]
        proj = proj or b["values"]["search_total"].get("kind") == "projected"
        vals["search_total"] = _v(search_total, "s", dev, proj)
        vals["total"] = _v(search_total + b["values"]["T_D"]["value"], "s", dev, proj)
        name = f"{ctx.method}.lat-beta-m{m}"
        out.append(_write(Path(out_dir) / f"{name}.json", name, ctx.dataset, vals, b.get("not_run", {}),
                          **_common(ctx, st, model_dir, base=Path(base).name, rerank_depth=m,
                                    timed_rerank_batches=len(qbatches), raw_samples_seconds={"E_p": e_p[m]})))
    return out


def _gpu_search(emb, tindex, encoded, k, repeats, trim, factor) -> dict[str, float]:
    """f(q, D) on the GPU, the authors' way: fp16 torch.sparse CSR index x dense query batch, then
    top-k (not exercised on the CPU-only CI machines). Returns totals (per batch x ``factor``)."""
    e_t = _torch_sparse(emb.matrix, "cuda")
    t_t = _torch_sparse(tindex.to_scipy_csr(), "cuda")
    out: dict[str, list[float]] = {"f_full": [], "f_alpha": [], "f_beta": []}
    for eq, tq in encoded:
        out["f_full"] += _timed(lambda eq=eq: _torch_search(e_t, eq, k, "cuda"), repeats, warmup=1)
        out["f_alpha"] += _timed(lambda tq=tq: _torch_search(e_t, tq, k, "cuda"), repeats, warmup=1)
        out["f_beta"] += _timed(lambda eq=eq: _torch_search(t_t, eq, k, "cuda"), repeats, warmup=1)
    return {x: _trimmed(v, trim) * factor for x, v in out.items()}


def _baseline_timing(ctx: Context, name: str, inputs: Mapping[str, Path], corpus: Path,
                     queries: Sequence[str]) -> dict[str, Any]:
    """Index build over ``corpus`` (a dataset folder: the corpus or its sample), E(q) and f(q,D) over
    ``queries`` of BM25 or DPR timed with the profile's protocol (harness.timing), the index built
    ``latency.index_repeats`` times as the SVDR rows' T(D) and E(D) are."""
    from harness.methods import bm25, dpr  # other methods: imported when this figure is timed

    cfg = ctx.cfg
    protocol = PROTOCOLS.get(cfg["timing"].get("protocol") or "svdr-appendix-b")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    index_repeats = int((ctx.mcfg.get("latency") or {}).get("index_repeats") or repeats)
    bctx = Context(cfg, name, ctx.dataset)
    if name == "bm25":
        job = Job("index", "bm25", "bm25", "build", ctx.dataset)
        searcher = bm25.Searcher(bctx, inputs["bm25_index"])
        build = lambda out: bm25.build(bctx, job, {"data": corpus}, out)
    else:
        job = Job("index", "dpr", "dpr", "build", ctx.dataset)
        searcher = dpr.Searcher(bctx, inputs["dpr_index"], inputs["dpr_model"])
        build = lambda out: dpr.build(bctx, job, {"data": corpus, "model": inputs["dpr_model"]}, out)
    return run(cfg, name, str(ctx.dataset), queries, build_index=build, searcher=searcher, protocol=protocol,
               repeats=repeats, max_queries=cfg["timing"].get("search_queries"), index_repeats=index_repeats)


def _corpus_sample(data: Path, n_sample: int | None, folder: Path) -> tuple[Path, int, int]:
    """(the dataset folder the baselines' indexes are built from, its passages, the corpus's): with
    ``latency.corpus_sample`` set below the corpus, its first n passages written to ``folder`` (as the
    SVDR rows time T(D) and E(D) on them), else ``data`` itself."""
    n_corpus = store.corpus_size(data)
    if not n_sample or int(n_sample) >= n_corpus:
        return data, n_corpus, n_corpus
    from itertools import islice

    folder.mkdir(parents=True, exist_ok=True)
    return folder, store.write_corpus(folder, islice(store.iter_corpus(data), int(n_sample))), n_corpus


def latency_baselines(ctx: Context, inputs: Mapping[str, Path], out_dir: Path) -> list[Path]:
    """Table 2 rows of BM25 and DPR, timed here with the same protocol as the SVDR rows: the index
    built ``latency.index_repeats`` times over ``latency.corpus_sample``'s first passages and scaled to
    the corpus (projected), the queries searched against the whole corpus's index."""
    import shutil
    import tempfile

    queries = [q.text for q in store.read_queries(inputs["data"], "test")]
    lat = ctx.mcfg.get("latency") or {}
    tmp = Path(tempfile.mkdtemp(prefix="baseline-sample-"))
    try:
        corpus, timed, n_corpus = _corpus_sample(inputs["data"], lat.get("corpus_sample"), tmp / "data")
        return [_baseline_row(ctx, name, inputs, corpus, timed, n_corpus, queries, out_dir)
                for name in lat.get("baselines") or []]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _baseline_row(ctx: Context, name: str, inputs: Mapping[str, Path], corpus: Path, timed: int, n_corpus: int,
                  queries: Sequence[str], out_dir: Path) -> Path:
    """One baseline's Table 2 row: its index time over ``timed`` passages scaled to ``n_corpus``
    (projected where they differ), its E(q) and f(q,D) per batch times the test batches."""
    t = _baseline_timing(ctx, name, inputs, corpus, queries)
    dev = t.get("device", "cpu")
    bs = t["protocol"]["batch_size"]
    batches = math.ceil(len(queries) / bs)
    s = t["summary"]
    scale = n_corpus / max(1, timed)
    index_s = s["index_seconds"]["mean"] * scale
    enc = s["encode_ms_per_batch"]["mean"] / 1000 * batches
    f = s["search_ms_per_batch"]["mean"] / 1000 * batches
    projected = t["batches"] < batches  # per-batch means times the test set's batches
    p_index = scale != 1.0
    suffix = "cuda" if dev == "cuda" else "cpu"
    other = "cpu" if suffix == "cuda" else "cuda"
    vals: dict[str, Any] = {}
    why_other = f"the baseline timing ran on {dev} only"
    if other == "cuda":
        why_other = resolve_device("cuda")[1] or f"timing.device is {ctx.cfg['timing']['device']}"
    not_run = {f"f_{other}": why_other}
    if name == "bm25":
        vals["T_D"] = _v(index_s, "s", dev, p_index)
        vals[f"f_{suffix}"] = _v(f, "s", dev, projected)
        total = f
    else:
        vals["E_D"] = _v(index_s, "s", dev, p_index)
        vals[f"E_q_{suffix}"] = _v(enc, "s", dev, projected)
        vals[f"f_{suffix}"] = _v(f, "s", dev, projected)
        not_run[f"E_q_{other}"] = why_other
        total = enc + f
    vals["search_total"] = _v(total, "s", dev, projected)
    vals["total"] = _v(total + index_s, "s", dev, projected or p_index)
    return _write(Path(out_dir) / f"{ctx.method}.lat-{name}.json", f"{ctx.method}.lat-{name}", ctx.dataset,
                  vals, not_run, timing=t, protocol=t["protocol"]["name"], repeats=t.get("repeats"),
                  index_repeats=t.get("index_repeats"), deviation=t.get("deviation"), test_batches=batches,
                  corpus_passages=n_corpus, timed_passages=timed, corpus_scale=scale,
                  note="index build (timed on the first timed_passages, scaled by corpus_scale), E(q) and f(q,D) per "
                       "batch (protocol) x test batches")


# --------------------------------------------------------------------------------------------
# Table 3: in-training retrieval
# --------------------------------------------------------------------------------------------
def _token_memory(index: Any) -> int:
    """Bytes beta search holds in memory: the binary token index and the passage-major frequent-token
    lists its compiled kernel builds on first use (``BinaryTokenIndex.prepare``; none without numba)."""
    return int(index.nbytes + index.prepare())


def _faiss_memory(index) -> int:
    import faiss

    if isinstance(index, faiss.IndexFlat):
        return int(index.ntotal) * int(index.d) * 4
    return int(faiss.serialize_index(index).size)


def intrain(ctx: Context, model_dir: Path, token_dir: Path, bm25_dir: Path, dpr_model: Path, dpr_index: Path,
            out_dir: Path) -> list[Path]:
    from harness.methods import bm25, dpr  # other methods: imported when this figure is timed

    cfg = ctx.cfg
    s = settings(ctx.mcfg, method=ctx.method)
    protocol, repeats, deviation = _protocol(cfg)
    B, m = int(s["batch_size"]), int(s["retrieval_top_m"])
    n = int((ctx.mcfg.get("intrain") or {}).get("batches", 3))
    queries = store.read_queries(ctx.data_dir(), "train")
    batches = [[q.text for q in queries[i:i + B]] for i in range(0, len(queries), B)][:n]
    common = {"protocol": protocol.name, "repeats": repeats, "deviation": deviation, "batch_size": B, "top_m": m,
              "timed_batches": len(batches), "corpus": ctx.dataset,
              "note": "latency: retrieval of the top m for one batch of training questions; neural query "
                      "encoding outside the timer; memory: index bytes held in host memory (the CPU index; GPU memory is not measured)"}
    enc = VDRModel.load(model_dir, s["torch_threads"])
    tindex, _ = load_token_index(token_dir)
    ds = dpr.Searcher(Context(cfg, "dpr", ctx.dataset), dpr_index, dpr_model)
    bs_ = bm25.Searcher(Context(cfg, "bm25", ctx.dataset), bm25_dir)
    lucene_memory = "Lucene reads its index through the JVM and the OS page cache: no index-sized allocation to measure"
    # name -> (query encoding outside the timer, the timed retrieval, index folder, bytes in memory or why not)
    rows = {"beta": (enc.encode_questions, lambda qv: tindex.search(qv, m), token_dir, _token_memory(tindex)),
            "dpr": (ds.encode, lambda qv: ds.search(qv, m), dpr_index, _faiss_memory(ds.index.index)),
            "bm25": (list, lambda texts: bs_.search(bs_.encode(texts), m), bm25_dir, lucene_memory)}
    out = []
    for name, (encode, retrieve, folder, memory) in rows.items():
        samples: list[float] = []
        for texts in batches:
            qv = encode(texts)
            samples += _timed(lambda qv=qv, retrieve=retrieve: retrieve(qv), repeats, warmup=1)
        values = {"latency_per_batch": _v(_trimmed(samples, protocol.trim), "s", "cpu"),
                  "storage_bytes": _v(folder_bytes(folder), "B")}
        not_run = {"memory_bytes": memory} if isinstance(memory, str) else {}
        if not not_run:
            values["memory_bytes"] = _v(memory, "B", "cpu")
        out.append(_write(Path(out_dir) / f"svdr.intrain-{name}.json", f"svdr.intrain-{name}", ctx.dataset, values,
                          not_run, index=str(folder), raw_samples_seconds=samples, **common))
    return out
