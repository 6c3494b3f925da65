"""Table 5 (paper App. D, in-training retrieval simulation): beta search over a synthetic binary
token index with Zipf-like document frequencies, and the generators of that index and its queries
(also used by ``python -m harness bench beta-search``, harness/bench/beta_search.py).

Synthetic index: passage i contains token t independently with probability ``p_t`` (so posting
lengths are binomial), where the token of frequency rank r has ``p = min(1, c * r ** -a)``, ``c``
set so that a passage has ``doc_tokens`` distinct tokens on average; ranks are assigned to token
ids by a random permutation. Queries have ``active`` non-zero dims with Exp(1) float32 weights.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from harness.datasets.synthetic import df_curve
from harness.errors import ConfigError
from harness.methods.base import Context
from harness.methods.vdr.measure import _protocol, _timed, _token_memory, _trimmed, _v, _write
from harness.methods.vdr.settings import synthetic_defaults


def zipf_df(vocab: int, doc_tokens: float, a: float) -> np.ndarray:
    """Document frequency by rank: min(1, c * r**-a), c chosen so that the sum is doc_tokens."""
    if not 0 < doc_tokens < vocab:
        raise ConfigError(f"--doc-tokens must be in (0, {vocab}), got {doc_tokens}")
    return df_curve(vocab, doc_tokens, a)


def synthetic_postings(
    n_docs: int, vocab: int, doc_tokens: float, a: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token-major postings (indptr, sorted int32 doc ids) and each token id's df probability."""
    p = np.empty(vocab)
    p[rng.permutation(vocab)] = zipf_df(vocab, doc_tokens, a)
    lists = []
    for t in range(vocab):
        pt = p[t]
        if pt >= 1.0:
            lists.append(np.arange(n_docs, dtype=np.int32))
            continue
        m = int(n_docs * pt + 6 * np.sqrt(n_docs * pt) + 16)
        pos = np.cumsum(rng.geometric(pt, m)) - 1  # Bernoulli(pt) sample via geometric gaps
        while pos[-1] < n_docs:
            pos = np.concatenate([pos, pos[-1] + np.cumsum(rng.geometric(pt, m))])
        lists.append(pos[pos < n_docs].astype(np.int32))
    indptr = np.zeros(vocab + 1, np.int64)
    np.cumsum([x.size for x in lists], out=indptr[1:])
    return indptr, np.concatenate(lists), p


def synthetic_queries(
    batch: int, vocab: int, active: int, dims: str, p: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Dense float32 [batch, vocab] with `active` non-zeros per row, Exp(1) weights."""
    if not 0 < active <= vocab:
        raise ConfigError(f"--query-active must be in [1, {vocab}], got {active}")
    q = np.zeros((batch, vocab), np.float32)
    prob = None if dims == "uniform" else p / p.sum()
    for i in range(batch):
        q[i, rng.choice(vocab, active, replace=False, p=prob)] = rng.exponential(1.0, active)
    return q


def synthetic(ctx: Context, out_dir: Path) -> list[Path]:
    """Table 5 rows ``svdr.synth-a<a>`` (index density) and ``svdr.synth-bs<b>`` (query batch size)."""
    from harness.indexes.token_csr import BinaryTokenIndex

    syn = {**synthetic_defaults(), **(ctx.mcfg.get("synthetic") or {})}
    protocol, repeats, deviation = _protocol(ctx.cfg)
    n, vocab, k = int(syn["passages"]), int(syn["vocab"]), int(syn["k"])
    rng = np.random.default_rng(ctx.cfg["seed"])
    common = {"protocol": protocol.name, "repeats": repeats, "deviation": deviation, "passages": n, "vocab": vocab,
              "query_active": syn["query_active"], "zipf_a": syn["zipf_a"], "k": k,
              "note": "synthetic index (no dataset): passages with a distinct tokens each, Zipf-like document "
                      "frequencies; latency of one batch of beta search (numba kernel, CPU), trimmed mean; "
                      "memory: index bytes in host memory"}
    out = []
    base = None
    tmp = Path(tempfile.mkdtemp(prefix="svdr-synth-"))
    try:
        densities = sorted(set(syn["densities"]) | {syn["base_density"]})
        for a in densities:
            indptr, ids, p = synthetic_postings(n, vocab, float(a), float(syn["zipf_a"]), rng)
            index = BinaryTokenIndex.from_postings(indptr, ids, n, vocab)
            del indptr, ids
            path = index.save(tmp / f"a{a}.tcsr")
            disk = path.stat().st_size
            path.unlink()
            q = synthetic_queries(int(syn["base_batch"]), vocab, int(syn["query_active"]), "uniform", p, rng)
            samples = _timed(lambda q=q, index=index: index.search(q, k), repeats, warmup=1)
            per_batch = _trimmed(samples, protocol.trim)
            if a == syn["base_density"]:
                base = (index, p)
            if a in syn["densities"]:
                out.append(_write(Path(out_dir) / f"svdr.synth-a{a}.json", f"svdr.synth-a{a}", ctx.dataset, {
                    "latency_per_batch": _v(per_batch, "s", "cpu"),
                    "latency_per_query": _v(per_batch / syn["base_batch"], "s", "cpu"),
                    "storage_bytes": _v(disk, "B"), "memory_bytes": _v(_token_memory(index), "B", "cpu"),
                    "nnz": _v(index.nnz, "count")}, {}, density=a, batch=syn["base_batch"],
                    raw_samples_seconds=samples, **common))
        index, p = base
        for b in syn["batch_sizes"]:
            q = synthetic_queries(int(b), vocab, int(syn["query_active"]), "uniform", p, rng)
            samples = _timed(lambda q=q: index.search(q, k), repeats, warmup=1)
            per_batch = _trimmed(samples, protocol.trim)
            out.append(_write(Path(out_dir) / f"svdr.synth-bs{b}.json", f"svdr.synth-bs{b}", ctx.dataset, {
                "latency_per_batch": _v(per_batch, "s", "cpu"),
                "latency_per_query": _v(per_batch / b, "s", "cpu")}, {}, density=syn["base_density"], batch=b,
                raw_samples_seconds=samples, **common))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
