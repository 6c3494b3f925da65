"""BM25 hard negatives for training questions, as DPR mines them.

For each training question: the BM25 top passages (title + text) that are not gold and do not
contain any answer by DPR's string rule (passage text only), in BM25 order.
Output: JSONL ``{"id": qid, "negatives": [doc ids]}``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.config import add_config_argument, load_config
from harness.datasets import store
from harness.evaluate.qa import ANSWER_RULES
from harness.io import write_jsonl
from harness.methods import bm25
from harness.methods.base import Context


def mine(ctx: Context, index_dir: Path, depth: int, keep: int, rule: str = "dpr-string") -> list[dict]:
    queries = store.read_queries(ctx.data_dir(), "train")
    texts = {d.id: d.text for d in store.iter_corpus(ctx.data_dir())}
    hits = bm25.search(Context(ctx.cfg, "bm25", ctx.dataset), index_dir, queries, depth)
    match = ANSWER_RULES.get(rule)
    out = []
    for q in queries:
        gold = set(q.gold or [])
        negs = [d for d, _ in hits.get(q.id, []) if d not in gold and not match(q.answers or [], texts[d])]
        out.append({"id": q.id, "negatives": negs[:keep]})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness bm25-negatives", description=__doc__)
    add_config_argument(ap)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--index", type=Path, required=True, help="BM25 index folder of the dataset")
    ap.add_argument("--method", default="dpr", help="method whose config gives negatives_depth")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    ctx = Context(cfg, args.method, args.dataset)
    rule = cfg["datasets"][args.dataset].get("answer_rule", "dpr-string")
    records = mine(ctx, args.index, ctx.mcfg.get("negatives_depth", 100), keep=5, rule=rule)
    write_jsonl(args.out, records)
    n_empty = sum(1 for r in records if not r["negatives"])
    print(f"{len(records)} training questions, {n_empty} without a BM25 negative")
    return 0
