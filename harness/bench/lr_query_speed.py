"""`python -m harness bench lr-query-speed`: LightRetriever's query-encoding speed (paper Table 1).

The timers, the memory-bandwidth bound and the random paper-shaped models are the method's
(harness/methods/lightretriever/speed.py, whose docstring says what is inside each timer; the
LightRetriever method's Table-1 job calls them with the trained model and its table). This module is
the standalone benchmark on random weights, and its two targets.

The standalone benchmark (``main``) builds a random-weight model of a paper backbone's shape (or
loads the harness's splade-tiny backbone) and a random table of ``vocab x hidden``: speed does
not depend on the values. Random shapes are tokenised with the splade-tiny (bert-base-uncased
WordPiece) tokenizer, its ids taken modulo the model's vocabulary: right for speed only (the
query lengths are WordPiece lengths, close to but not the LLM tokenizer's).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import ConfigError, DataError
# the timers; eos_pool, light_inputs, param_count, time_full and time_tokenize are not used here but
# read through this module by its tests (tests/test_lr_query_speed.py)
from harness.methods.lightretriever.ops import eos_pool  # noqa: F401
from harness.methods.lightretriever.speed import (  # noqa: F401
    PAPER_BATCH_SIZES,
    PAPER_N_QUERIES,
    PAPER_SHAPES,
    copy_bandwidth,
    cycle_queries,
    dtype_size,
    fits_in_memory,
    gather_bound_seconds,
    light_inputs,
    light_token_ids,
    param_count,
    random_model,
    random_table,
    speed_table,
    time_full,
    time_light,
    time_tokenize,
)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_QUERY_FILES = (REPO / "results" / "small" / "data" / "msmarco-dev" / "queries-test.jsonl",)
SMOKE_QUESTIONS = REPO / "harness" / "datasets" / "smoke" / "questions.jsonl"
RANDOM_SHAPE_BUDGET_S = 60.0  # default --full-budget for random shapes (s per batch size)
SPEEDUP_TARGET = 100.0  # target (a): lookup >= 100x faster than the full-size encoder, same CPU
BOUND_TARGET = 2.0  # target (b): lookup seconds <= 2 x the memory-bandwidth bound
SHAPES = ("splade-tiny", *PAPER_SHAPES)


def uniform_ids_like(token_ids: Sequence[Sequence[int]], vocab: int, seed: int = 0) -> list[list[int]]:
    """Token ids drawn uniformly from ``vocab`` with the same per-query lengths as ``token_ids``:
    a cache-cold lookup (rows spread over the whole table), the case the bandwidth bound is for."""
    gen = torch.Generator().manual_seed(seed)
    flat = torch.randint(0, vocab, (sum(len(ids) for ids in token_ids),), generator=gen).tolist()
    out, start = [], 0
    for ids in token_ids:
        out.append(flat[start:start + len(ids)])
        start += len(ids)
    return out




def targets(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The two targets: (a) speedup_cpu >= 100 at every batch size (projected full-size figures
    count, and are flagged); (b) light_cpu_s <= 2 x bound_s at the largest batch size."""
    out: dict[str, dict[str, Any]] = {}
    with_full = [r for r in rows if r.get("speedup_cpu") is not None]
    if with_full:
        failing = [r["batch_size"] for r in with_full if r["speedup_cpu"] < SPEEDUP_TARGET]
        out["a"] = {
            "pass": not failing and len(with_full) == len(rows),
            "what": f"cached lookup >= {SPEEDUP_TARGET:g}x faster than the full-size encoder on the same CPU, every batch size",
            "min_speedup": min(r["speedup_cpu"] for r in with_full),
            "failing_batch_sizes": failing,
            "uses_projected": any(r.get("full_cpu_kind") == "projected" for r in with_full),
        }
    else:
        out["a"] = {"pass": None, "what": "full-size encoder not run", "min_speedup": None,
                    "failing_batch_sizes": [], "uses_projected": False}
    if rows:
        last = max(rows, key=lambda r: r["batch_size"])
        out["b"] = {
            "pass": last["light_cpu_s"] <= BOUND_TARGET * last["bound_s"],
            "what": f"lookup within {BOUND_TARGET:g}x of the memory-bandwidth bound at the largest batch size",
            "batch_size": last["batch_size"],
            "light_over_bound": last["light_over_bound"],
        }
    return out


# ---------------------------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------------------------

def _log(msg: str) -> None:
    print(f"[lr-query-speed] {msg}", file=sys.stderr, flush=True)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m harness bench lr-query-speed",
                                description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="splade-tiny", help=f"backbone shape: {', '.join(SHAPES)} (default splade-tiny)")
    p.add_argument("--queries", type=int, default=PAPER_N_QUERIES, help="queries encoded (default 65,536, as Table 1)")
    p.add_argument("--batch-sizes", default=",".join(map(str, PAPER_BATCH_SIZES)),
                   help="comma-separated (default 16,64,256,1024,4096,8192; big shapes on a few CPU cores "
                        "take a long time per large batch: a budget cannot stop inside the first one)")
    p.add_argument("--queries-file", type=Path, default=None, help='JSONL, one {"text": ...} per line')
    p.add_argument("--full-budget", type=float, default=None,
                   help=f"seconds of full-size encoding per batch size before projecting linearly "
                        f"(default: none for splade-tiny, {RANDOM_SHAPE_BUDGET_S:g} for random shapes)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="dtype of the random model and the table (default float32)")
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads for every timer (default: torch's, one per core); with 2+ "
                        "threads each small op pays an OpenMP fork/join, which dominates small-batch lookups")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args(argv)
    if a.shape not in SHAPES:
        import difflib

        close = difflib.get_close_matches(a.shape, SHAPES, n=1)
        raise ConfigError(f"--shape {a.shape!r} unknown" + (f" (did you mean {close[0]!r}?)" if close else "")
                          + f"; one of: {', '.join(SHAPES)}")
    if a.queries < 1:
        raise ConfigError(f"--queries must be >= 1 (got {a.queries})")
    if a.max_len < 2:
        raise ConfigError(f"--max-len must be >= 2 (got {a.max_len})")
    try:
        a.batch_sizes = [int(s) for s in a.batch_sizes.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--batch-sizes {a.batch_sizes!r}: comma-separated positive integers expected") from None
    if not a.batch_sizes or any(b < 1 for b in a.batch_sizes):
        raise ConfigError(f"--batch-sizes {a.batch_sizes}: positive integers expected")
    if a.full_budget is not None and a.full_budget < 0:
        raise ConfigError(f"--full-budget must be >= 0 (got {a.full_budget})")
    if a.queries_file is not None and not a.queries_file.is_file():
        raise ConfigError(f"--queries-file {a.queries_file}: no such file")
    if a.threads is not None and a.threads < 1:
        raise ConfigError(f"--threads must be >= 1 (got {a.threads})")
    a.dtype = getattr(torch, a.dtype)
    return a


def load_query_texts(queries_file: Path | None = None) -> tuple[list[str], str]:
    """(texts, where from): ``queries_file`` ("text" field), else the first existing default
    query file (MS MARCO dev of the small profile), else the smoke fixture's questions (both splits)."""
    from harness.io import iter_jsonl

    if queries_file is not None:
        texts = [str(r["text"]) for r in iter_jsonl(queries_file) if "text" in r]
        if not texts:
            raise DataError(f"{queries_file}: no line with a \"text\" field")
        return texts, str(queries_file)
    for path in DEFAULT_QUERY_FILES:
        if path.is_file():
            texts = [str(r["text"]) for r in iter_jsonl(path) if "text" in r]
            if texts:
                return texts, str(path.relative_to(REPO))
    texts = [str(r["question"]) for r in iter_jsonl(SMOKE_QUESTIONS) if "question" in r]
    if not texts:
        raise DataError(f"{SMOKE_QUESTIONS}: no questions")
    return texts, f"{SMOKE_QUESTIONS.relative_to(REPO)} (smoke fixture questions, train+test)"


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Table 1's layout, plus the bandwidth bound; projected full-size figures carry a 'p'."""
    head = ["batch", "tok s", "full CPU s", "light CPU s", "speedup", "full GPU s", "light GPU s",
            "speedup", "GPU/lightCPU", "bytes read", "bound s", "light/bound"]
    lines = []
    def full(r: Mapping[str, Any], key: str, kind: str) -> str:
        mark = {"projected": " p", "OOM": " OOM"}.get(r.get(kind) or "", "")
        return _fmt(r[key], 3) + mark

    for r in rows:
        lines.append([
            str(r["batch_size"]), _fmt(r["tokenize_s"]), full(r, "full_cpu_s", "full_cpu_kind"),
            _fmt(r["light_cpu_s"]), _fmt(r["speedup_cpu"], 0), full(r, "full_gpu_s", "full_gpu_kind"),
            _fmt(r["light_gpu_s"]),
            _fmt(r["speedup_gpu"], 0), _fmt(r["speedup_gpu_vs_light_cpu"], 0),
            f"{r['bytes_read'] / 2**20:,.1f} MiB", _fmt(r["bound_s"]), _fmt(r["light_over_bound"], 2),
        ])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)



def _full_model(a: argparse.Namespace, cfg: Mapping[str, Any], elsize: int):
    """(full-size encoder or None, vocab, hidden, why it was not run or None) of ``--shape``, said."""
    from harness.models.backbones import load_encoder

    not_run: str | None = None
    full_model: nn.Module | None = None
    if a.shape == "splade-tiny":
        full_model = load_encoder(cfg, "splade-tiny").eval()
        vocab, hidden = full_model.config.vocab_size, full_model.config.hidden_size
        print("full-size encoder: harness backbone splade-tiny (trained weights), EOS pooling; "
              "tokenizer: its own")
    else:
        config = PAPER_SHAPES[a.shape]
        vocab, hidden = config.vocab_size, config.hidden_size
        ok, why = fits_in_memory(config, a.dtype, extra_bytes=vocab * hidden * elsize)
        print(f"full-size encoder: {a.shape} shape, RANDOM weights ({str(a.dtype).removeprefix('torch.')}), "
              f"EOS pooling; {why}")
        print("tokenizer: splade-tiny WordPiece, ids modulo the model's vocabulary (speed only)")
        if ok:
            _log(f"building random {a.shape}")
            t = time.perf_counter()
            full_model = random_model(a.shape, a.dtype)
            _log(f"built in {time.perf_counter() - t:.1f} s")
        else:
            not_run = why
            print(f"full-size encoder not run: {why}")
    return full_model, vocab, hidden, not_run


def _print_rows(rows: Sequence[Mapping[str, Any]], hidden: int, elsize: int) -> None:
    print()
    print(format_table(rows))
    print("(seconds for all queries; 'p' = projected from a measured fraction; speedup = full / light; "
          "bound = bytes read / CPU copy bandwidth)")
    if rows:
        r0 = rows[0]
        touched = r0["distinct_tokens"] * hidden * elsize
        print(f"the lookup reads {r0['tokens']:,} token rows, of {r0['distinct_tokens']:,} distinct ids "
              f"({touched / 2**20:,.2f} MiB touched): rows read again come from cache, so a lookup can beat the bound")
    for r in rows:
        if r["full_cpu_kind"] == "projected":
            print(f"  batch {r['batch_size']}: full-size CPU figure projected from {r['full_cpu_queries_timed']:,} "
                  f"of {r['queries']:,} queries")


def _cache_cold(a: argparse.Namespace, tokenizer: Any, texts: Sequence[str], vocab: int, table: nn.EmbeddingBag,
                bandwidth: float) -> dict[str, Any]:
    """Cache-cold check (information, not a target): the smoke questions touch few distinct rows."""
    largest = max(a.batch_sizes)
    ids = light_token_ids(tokenizer, cycle_queries(texts, a.queries), vocab)
    cold = time_light(table, uniform_ids_like(ids, vocab), largest)
    cold_bound = gather_bound_seconds(cold["bytes_read"], bandwidth)
    cold_row = {"batch_size": largest, "light_cpu_s": cold["seconds"], "tokens": cold["tokens"],
                "distinct_tokens": cold["distinct_tokens"], "bound_s": cold_bound,
                "light_over_bound": cold["seconds"] / cold_bound}
    print(f"cache-cold check (uniform random ids, same query lengths, batch {largest}): "
          f"{cold['seconds']:.4f} s for {cold['distinct_tokens']:,} distinct rows = "
          f"{cold_row['light_over_bound']:.2f}x the bound {cold_bound:.4f} s")
    return cold_row


def _print_targets(res: Mapping[str, Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                   not_run: str | None) -> None:
    print()
    ta = res["a"]
    if ta["pass"] is None:
        print(f"target (a) >= {SPEEDUP_TARGET:g}x vs the full-size encoder on CPU: not run ({not_run or ta['what']})")
    else:
        print(f"target (a) cached lookup >= {SPEEDUP_TARGET:g}x faster than the full-size encoder, same CPU, "
              f"every batch size: {'PASS' if ta['pass'] else 'FAIL'} (min {ta['min_speedup']:,.0f}x"
              + (f"; failing at {ta['failing_batch_sizes']}" if ta["failing_batch_sizes"] else "")
              + ("; uses projected full-size figures" if ta["uses_projected"] else "") + ")")
    tb = res["b"]
    print(f"target (b) lookup <= {BOUND_TARGET:g}x the memory-bandwidth bound at batch {tb['batch_size']}: "
          f"{'PASS' if tb['pass'] else 'FAIL'} ({tb['light_over_bound']:.2f}x); all batch sizes: "
          + ", ".join(f"{r['batch_size']}: {r['light_over_bound']:.2f}x" for r in rows))


def main(argv: list[str]) -> int:
    try:
        a = _parse(argv)
        texts, source = load_query_texts(a.queries_file)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from harness.config import load_config
    from harness.models.backbones import load_tokenizer

    if a.threads is not None:
        torch.set_num_threads(a.threads)
    cfg = load_config()
    tokenizer = load_tokenizer(cfg, "splade-tiny")
    budget = a.full_budget if a.full_budget is not None else (None if a.shape == "splade-tiny" else RANDOM_SHAPE_BUDGET_S)
    gpu = torch.cuda.is_available()
    print(f"LightRetriever query-encoding speed (paper Table 1), shape {a.shape}")
    print(f"queries: {len(texts)} texts from {source}, cycled in order to {a.queries:,}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch threads {torch.get_num_threads()} (all timers), "
          f"GPU: {torch.cuda.get_device_name(0) if gpu else 'none'}")

    elsize = dtype_size(a.dtype)
    full_model, vocab, hidden, not_run = _full_model(a, cfg, elsize)
    print(f"cached table: EmbeddingBag({vocab:,} x {hidden}, mean), random values "
          f"({vocab * hidden * elsize / 2**20:,.0f} MiB; speed does not depend on values)")
    if budget is not None:
        print(f"full-size budget: {budget:g} s per batch size, then projected linearly "
              "(measured s / queries timed x all queries; marked 'p')")
    table = random_table(vocab, hidden, a.dtype)
    bandwidth = copy_bandwidth()
    print(f"CPU copy bandwidth (bytes read by dst.copy_(src), 256 MiB, best of 5): {bandwidth / 1e9:.2f} GB/s")
    rows = speed_table(texts, tokenizer=tokenizer, full_model=full_model, table=table, batch_sizes=a.batch_sizes,
                       n_queries=a.queries, max_len=a.max_len, full_budget_s=budget, gpu=gpu,
                       bandwidth=bandwidth, log=_log)
    _print_rows(rows, hidden, elsize)
    res = targets(rows)
    cold_row = _cache_cold(a, tokenizer, texts, vocab, table, bandwidth)
    _print_targets(res, rows, not_run)
    if a.json:
        from harness.io import write_json

        write_json(a.json, {
            "benchmark": "lr-query-speed", "shape": a.shape, "dtype": str(a.dtype).removeprefix("torch."),
            "random_weights": a.shape != "splade-tiny", "queries": a.queries, "query_source": source,
            "distinct_texts": len(texts), "full_budget_s": budget, "full_not_run": not_run,
            "torch_threads": torch.get_num_threads(), "cpu_cores": os.cpu_count(),
            "gpu": torch.cuda.get_device_name(0) if gpu else None,
            "copy_bandwidth": bandwidth, "rows": rows, "targets": res, "cache_cold_lookup": cold_row,
        })
        print(f"wrote {a.json}")
    return 0
