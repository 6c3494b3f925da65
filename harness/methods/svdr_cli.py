"""`python -m harness.methods.svdr_cli <command> ...`: the SVDR/VDR steps the generic commands do
not cover (ablation training, the embedding index, search variants, re-ranking, efficiency figures).

Commands (each writes its output atomically, with meta.json beside models and indexes):
  train          train methods.<m> (or one of its ablations) with the training corpus's token index
  emb-index      E_θ(D): the embedding-based index (sparse top-k vectors, scipy CSR)
  search         one search variant: full, alpha or beta -> TREC run + <run>.meta.json
  rerank         SVDR_β (m): re-rank a beta run at several depths m
  rerank-dpr     BM25 + DPR (m): re-rank a BM25 run with the trained DPR encoders
  index-metrics  bytes / memory / build time of both indexes -> <m>.index.json (+ -token, -emb)
  latency        Table 2 per-stage latency (SVDR App. B protocol): rows full, alpha, beta
  latency-rerank Table 2 rows SVDR_β (k=m): the beta row plus E_θ(p)
  latency-baselines  Table 2 rows of BM25 and DPR from their generic timing JSON
  intrain        Table 3 in-training retrieval latency, storage, memory (BM25, DPR, SVDR_β)
  synthetic      Table 5 synthetic binary token index (density, query batch size)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.datasets import store
from harness.errors import HarnessError
from harness.io import atomic_path, write_json
from harness.meta import git_commit, hardware, versions, write_meta
from harness.methods.base import Context
from harness.runs import read_run, write_run


def _ctx(args, dataset: str | None = None) -> Context:
    cfg = load_config(args.config)
    return Context(cfg, args.method, dataset if dataset is not None else getattr(args, "dataset", None))


def _run_meta(path: Path, ctx: Context, system: str, queries: int, k: int, seconds: float, **extra) -> None:
    write_json(Path(f"{path}.meta.json"), {
        "kind": "run", "method": ctx.method, "system": system, "dataset": ctx.dataset, "split": "test", "depth": k,
        "queries": queries, "seconds": round(seconds, 3), "config_hash": ctx.config_hash(), "git_commit": git_commit(),
        "versions": versions(), "hardware": hardware(), **extra,
    })


def cmd_train(args) -> int:
    from harness.methods import vdr

    ctx = _ctx(args)
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        info = vdr.train(ctx, tmp, args.negatives, token_index_dir=args.token_index, ablation=args.ablation)
        spec = args.method if args.ablation is None else f"{args.method}.abl-{args.ablation}"
        write_meta(tmp, "model", spec=spec, config_hash=ctx.config_hash(), seconds=time.perf_counter() - t0, extra=info)
    print(f"trained {spec}: {info['steps']} steps in {time.perf_counter() - t0:.1f}s")
    return 0


def cmd_emb_index(args) -> int:
    from harness.methods import vdr

    ctx = _ctx(args)
    t0 = time.perf_counter()
    with atomic_path(args.out) as tmp:
        tmp.mkdir()
        info = vdr.build_emb_index(ctx, tmp, args.model)
        write_meta(tmp, "index", spec=info.pop("spec"), config_hash=ctx.config_hash(),
                   seconds=time.perf_counter() - t0,
                   extra={"method": args.method, "dataset": args.dataset, "model": str(args.model), **info})
    print(f"embedding index {args.method}/{args.dataset}: {info['documents']} passages, {info['nnz']} non-zeros, "
          f"build {info['build_seconds']:.1f}s")
    return 0


def cmd_search(args) -> int:
    from harness.methods import vdr

    ctx = _ctx(args)
    queries = store.read_queries(ctx.data_dir(), "test")
    k = ctx.cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    hits = vdr.search_variant(args.variant, queries, k, args.model, args.index, ctx.mcfg.get("torch_threads"))
    seconds = time.perf_counter() - t0
    write_run(args.out, hits, tag=args.system)
    _run_meta(args.out, ctx, args.system, len(queries), k, seconds, variant=args.variant, index=str(args.index),
              model=str(args.model), note="wall time of the whole call (loading, encoding, search); "
                                          "protocol timings are in metrics/")
    print(f"search {args.system}/{args.dataset}: {len(queries)} queries in {seconds:.1f}s")
    return 0


def _check_outs(outs: list[Path], depths: list[int]) -> None:
    if len(outs) != len(depths):
        raise HarnessError(f"--out names {len(outs)} files for {len(depths)} depths; give one run file per depth")


def cmd_rerank(args) -> int:
    from harness.methods import vdr
    from harness.methods.rerank import rerank

    ctx = _ctx(args)
    _check_outs(args.out, args.depths)
    queries = store.read_queries(ctx.data_dir(), "test")
    run = read_run(args.run)
    docs = {d.id: d for d in store.iter_corpus(ctx.data_dir())}
    enc = vdr.VDRModel.load(args.model, ctx.mcfg.get("torch_threads"))
    t0 = time.perf_counter()
    res = rerank(run, queries, args.depths, docs, enc.encode_questions, enc.encode_passages)
    seconds = time.perf_counter() - t0
    for m, out in zip(args.depths, args.out):
        system = f"{args.method}.beta-m{m}"
        write_run(out, res[m], tag=system)
        _run_meta(out, ctx, system, len(queries), ctx.cfg["evaluate"]["depth"], seconds, first_stage=str(args.run),
                  rerank_depth=m, note="passages of the first-stage top m embedded on the fly (no embedding index); "
                                       "seconds cover all depths together")
    print(f"rerank {args.method}/{args.dataset}: depths {args.depths} in {seconds:.1f}s")
    return 0


def cmd_rerank_dpr(args) -> int:
    from harness.methods import dpr
    from harness.methods.rerank import rerank

    cfg = load_config(args.config)
    ctx = Context(cfg, "dpr", args.dataset)
    _check_outs(args.out, args.depths)
    queries = store.read_queries(ctx.data_dir(), "test")
    run = read_run(args.run)
    docs = {d.id: d for d in store.iter_corpus(ctx.data_dir())}
    model = dpr.BiEncoder.load(ctx, args.model)
    t0 = time.perf_counter()
    res = rerank(run, queries, args.depths, docs, model.encode_questions,
                 lambda ds: model.encode_passages([d.title for d in ds], [d.text for d in ds]))
    seconds = time.perf_counter() - t0
    for m, out in zip(args.depths, args.out):
        system = f"dpr.bm25-m{m}"
        write_run(out, res[m], tag=system)
        _run_meta(out, ctx, system, len(queries), cfg["evaluate"]["depth"], seconds, first_stage=str(args.run),
                  rerank_depth=m, note="BM25 top m re-scored by the trained DPR encoders; seconds cover all depths")
    print(f"rerank BM25+DPR/{args.dataset}: depths {args.depths} in {seconds:.1f}s")
    return 0


def cmd_index_metrics(args) -> int:
    from harness.methods import svdr_efficiency as eff

    ctx = _ctx(args)
    eff.write_index_metrics(ctx, args.token_index, args.emb_index, args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_latency(args) -> int:
    from harness.methods import svdr_efficiency as eff

    ctx = _ctx(args)
    for path in eff.latency(ctx, args.model, args.out_dir):
        print(f"wrote {path}")
    return 0


def cmd_latency_rerank(args) -> int:
    from harness.methods import svdr_efficiency as eff

    ctx = _ctx(args)
    for path in eff.latency_rerank(ctx, args.model, args.base, args.depths, args.out_dir):
        print(f"wrote {path}")
    return 0


def cmd_latency_baselines(args) -> int:
    from harness.methods import svdr_efficiency as eff

    ctx = _ctx(args)
    for path in eff.latency_baselines(ctx, args.bm25_timing, args.dpr_timing, args.out_dir):
        print(f"wrote {path}")
    return 0


def cmd_intrain(args) -> int:
    from harness.methods import svdr_efficiency as eff

    ctx = _ctx(args)
    for path in eff.intrain(ctx, args.model, args.token_index, args.bm25_index, args.dpr_model, args.dpr_index,
                            args.out_dir):
        print(f"wrote {path}")
    return 0


def cmd_synthetic(args) -> int:
    from harness.methods import svdr_efficiency as eff

    ctx = _ctx(args)
    for path in eff.synthetic(ctx, args.out_dir):
        print(f"wrote {path}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.methods.svdr_cli", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def add(name, fn, *, dataset=True, method=True):
        p = sub.add_parser(name)
        add_config_argument(p)
        if method:
            p.add_argument("--method", default="svdr", help="svdr or vdr")
        if dataset:
            p.add_argument("--dataset", required=True)
        p.set_defaults(fn=fn)
        return p

    p = add("train", cmd_train, dataset=False)
    p.add_argument("--negatives", type=Path, help="BM25 hard negatives (JSONL) of the training questions")
    p.add_argument("--token-index", type=Path, help="binary token index of the training corpus (else built once in memory)")
    p.add_argument("--ablation", help="train the ablation methods.<m>.ablations.<name> instead of the main model")
    p.add_argument("--out", type=Path, required=True)
    p = add("emb-index", cmd_emb_index)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = add("search", cmd_search)
    p.add_argument("--variant", required=True, choices=["full", "alpha", "beta"])
    p.add_argument("--system", required=True, help="system id written into the run (e.g. svdr.full)")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--index", type=Path, required=True, help="embedding index (full, alpha) or token index (beta)")
    p.add_argument("--out", type=Path, required=True)
    p = add("rerank", cmd_rerank)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--run", type=Path, required=True, help="the beta-search run")
    p.add_argument("--depths", type=int, nargs="+", required=True)
    p.add_argument("--out", type=Path, nargs="+", required=True, help="one run file per depth, same order")
    p = add("rerank-dpr", cmd_rerank_dpr, method=False)
    p.add_argument("--model", type=Path, required=True, help="trained DPR model folder")
    p.add_argument("--run", type=Path, required=True, help="the BM25 run")
    p.add_argument("--depths", type=int, nargs="+", required=True)
    p.add_argument("--out", type=Path, nargs="+", required=True)
    p = add("index-metrics", cmd_index_metrics)
    p.add_argument("--token-index", type=Path, required=True)
    p.add_argument("--emb-index", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = add("latency", cmd_latency)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p = add("latency-rerank", cmd_latency_rerank)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--base", type=Path, required=True, help="the <m>.lat-beta.json of the same model and dataset")
    p.add_argument("--depths", type=int, nargs="+", required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p = add("latency-baselines", cmd_latency_baselines)
    p.add_argument("--bm25-timing", type=Path, required=True)
    p.add_argument("--dpr-timing", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p = add("intrain", cmd_intrain)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--token-index", type=Path, required=True)
    p.add_argument("--bm25-index", type=Path, required=True)
    p.add_argument("--dpr-model", type=Path, required=True)
    p.add_argument("--dpr-index", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p = add("synthetic", cmd_synthetic)
    p.add_argument("--out-dir", type=Path, required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.fn(args) or 0)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
