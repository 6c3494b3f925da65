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
    # one buffer of about the postings' size (a token's draw is its mean + 6 sigma), filled in place: a
    # list of arrays and their concatenation held every posting twice (8 bytes each; 80 GB at the paper
    # profile's 10M passages x 1,024 tokens)
    draws = [n_docs if p[t] >= 1.0 else int(n_docs * p[t] + 6 * np.sqrt(n_docs * p[t]) + 16) for t in range(vocab)]
    ids = np.empty(sum(min(m, n_docs) for m in draws), np.int32)
    indptr = np.zeros(vocab + 1, np.int64)
    at = 0
    for t in range(vocab):
        pt, m = p[t], draws[t]
        if pt >= 1.0:
            got = np.arange(n_docs, dtype=np.int32)
        else:
            pos = np.cumsum(rng.geometric(pt, m)) - 1  # Bernoulli(pt) sample via geometric gaps
            while pos[-1] < n_docs:
                pos = np.concatenate([pos, pos[-1] + np.cumsum(rng.geometric(pt, m))])
            got = pos[pos < n_docs]
        if at + got.size > ids.size:  # past its 6 sigma (rare): grow
            ids = np.concatenate([ids, np.empty(max(got.size, ids.size // 8), np.int32)])
        ids[at:at + got.size] = got
        at += got.size
        indptr[t + 1] = at
    return indptr, ids[:at], p


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


def synthetic_bytes(n: int, densities: list[int], base_density: int) -> int:
    """Host memory the Table 5 job needs at its largest density: the postings as drawn (int32) and the
    index built from them (uint16 block-local ids), 6 bytes a posting, beside the base density's index
    kept for the batch-size rows (2 bytes a posting); measured 6.9 bytes a posting at 300,000 passages
    x 1,024 tokens, with the fixed working memory of the build."""
    return max(n * a * 6 + (n * base_density * 2 if a != base_density else 0) for a in densities)


def _check_memory(n: int, densities: list[int], base_density: int) -> None:
    from harness.cost import mem_available
    from harness.errors import ResourceError

    need, avail = synthetic_bytes(n, densities, base_density), mem_available()
    if avail is not None and need > avail:
        raise ResourceError(f"svdr.synthetic (Table 5): {n:,} passages at density {max(densities):,} need about "
                            f"{need / 2**30:.1f} GiB (6 bytes a posting while the index is built, the base density's "
                            f"index kept), this machine has {avail / 2**30:.1f} GiB available",
                            fix="run it where there is more memory (the paper profile books it in scheduler.mem_mb), "
                                "or lower methods.svdr.synthetic.passages")


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
    densities = sorted(set(syn["densities"]) | {syn["base_density"]})
    _check_memory(n, densities, int(syn["base_density"]))
    out = []
    base = None
    tmp = Path(tempfile.mkdtemp(prefix="svdr-synth-"))
    try:
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
