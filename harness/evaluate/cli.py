"""Evaluation of runs: :func:`evaluate_run` (the stage ``python -m harness evaluate --job ...``, via
harness.stages) and :func:`main`, the command ``python -m harness evaluate QRELS RUN MEASURE...``.

:func:`evaluate_run`: QA datasets (questions with answers): DPR-style top-k accuracy, reported as ``Success@k`` with
the dataset's answer rule (config key ``datasets.<key>.answer_rule``, default dpr-string),
passage text only. qrels datasets: the ir_measures of ``evaluate.ir_measures``.
With ``datasets.<key>.relevance: gold`` the answer rule is skipped: only the ir_measures over the
gold-passage qrels are computed (so ``Success@k`` there is ir_measures' Success, never the answer
rule; the output says ``"relevance": "gold"``). Values are fractions in [0, 1].
"""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.datasets import relevance, store
from harness.errors import ConfigError, DataError
from harness.evaluate import ir, qa
from harness.methods.base import Context
from harness.runs import read_run


def evaluate_run(cfg, dataset: str, run_path: Path, split: str = "test") -> dict:
    ctx = Context(cfg, "bm25", dataset)
    folder = ctx.data_dir()
    run = read_run(run_path)
    queries = store.read_queries(folder, split)
    out: dict = {"dataset": dataset, "dataset_id": cfg["datasets"][dataset]["id"], "split": split,
                 "queries": len(queries), "measures": {}}
    gold = relevance(dataset, cfg["datasets"][dataset]) == "gold"
    answered = {} if gold else {q.id: q.answers for q in queries if q.answers}
    if answered:
        rule = cfg["datasets"][dataset].get("answer_rule", "dpr-string")
        needed = {d for q in answered for d, _ in run.get(q, [])}
        texts = {d.id: d.text for d in store.iter_corpus(folder) if d.id in needed}
        ranked = {q: [d for d, _ in run.get(q, [])] for q in answered}
        hits = qa.first_hit_ranks(ranked, answered, texts.__getitem__, rule)
        out["measures"].update(qa.topk_accuracy(hits, cfg["evaluate"]["qa_cutoffs"]))
        out["answer_rule"] = rule
    qrels_path = folder / store.QRELS
    if gold:
        out["relevance"] = "gold"
        if not qrels_path.exists():
            raise DataError(f"{qrels_path} does not exist, but datasets.{dataset}.relevance is gold",
                            fix=f"prepare dataset {dataset} again (python -m harness data) to write the gold qrels")
    if qrels_path.exists() and cfg["evaluate"]["ir_measures"]:
        qrels = store.read_qrels(qrels_path)
        qids = {q.id for q in queries}
        qrels = {q: r for q, r in qrels.items() if q in qids}
        run_scores = {q: {d: s for d, s in hits} for q, hits in run.items() if q in qids}
        # on a QA dataset judged by its answers, Success@k is the answer-string accuracy: an ir_measures
        # measure of the same name over the qrels would overwrite it with another quantity, so it is left out
        wanted = [m for m in cfg["evaluate"]["ir_measures"] if m not in out["measures"]]
        if wanted:
            out["measures"].update(ir.evaluate(qrels, run_scores, wanted))
        if len(wanted) < len(cfg["evaluate"]["ir_measures"]):
            out["qrels_measures_left_out"] = sorted(set(cfg["evaluate"]["ir_measures"]) - set(wanted))
    missing = [q.id for q in queries if q.id not in run]
    out["queries_without_results"] = len(missing)
    return out


def _measures(names: list[str]) -> list:
    """ir_measures' measures of the arguments (one or several per argument, space-separated), once each."""
    import ir_measures

    out = []
    for name in (m for arg in names for m in arg.split()):
        try:
            m = ir_measures.parse_measure(name)
        except Exception as exc:  # ir_measures raises NameError/ValueError/SyntaxError
            raise ConfigError(f"{name!r} is not an ir_measures measure ({exc})",
                              fix='write e.g. "nDCG@10" "RR@10" "R@100" "AP" "P@5"') from None
        if m not in out:
            out.append(m)
    if not out:
        raise ConfigError("no measure given", fix='name one, e.g. "nDCG@10"')
    return out


def main(argv: list[str]) -> int:
    """`python -m harness evaluate QRELS RUN MEASURE... [--per-query]`: as ``ir_measures qrels run
    measures`` (the same library, readers and output): ``measure<TAB>value`` per measure; with
    ``--per-query`` (``-q``) ``qid<TAB>measure<TAB>value`` per query, then the ``all`` lines."""
    import ir_measures

    ap = argparse.ArgumentParser(
        prog="python -m harness evaluate",
        description="Score a TREC run against TREC qrels with ir_measures, as `ir_measures QRELS RUN MEASURE...` "
                    "does: one 'measure<TAB>value' line per measure.",
        epilog="The stage form, every run of a search job of the plan (QA top-k accuracy, the profile's "
               "ir_measures): python -m harness evaluate --job ID --dataset KEY --out DIR [--config YAML ...].")
    ap.add_argument("qrels", type=Path, help="TREC qrels file: 'qid 0 docid relevance' lines")
    ap.add_argument("run", type=Path, help="TREC run file: 'qid Q0 docid rank score tag' lines")
    ap.add_argument("measures", nargs="+", help='ir_measures names, e.g. "nDCG@10" "RR@10" R@100')
    ap.add_argument("--per-query", "-q", "--by_query", dest="per_query", action="store_true",
                    help="one line per query and measure, then the aggregates (qid 'all')")
    ap.add_argument("--places", "-p", type=int, default=4, help="decimal places (default 4)")
    args = ap.parse_args(argv)
    for what, path in (("qrels", args.qrels), ("run", args.run)):
        if not path.is_file():
            raise DataError(f"{what} file {path} does not exist")
    measures = _measures(args.measures)
    qrels = list(ir_measures.read_trec_qrels(str(args.qrels)))
    run = list(ir_measures.read_trec_run(str(args.run)))
    fmt = f".{args.places}f" if args.places >= 0 else ""
    if args.per_query:
        aggs = {m: m.aggregator() for m in measures}
        for res in ir_measures.iter_calc(measures, qrels, run):
            print(f"{res.query_id}\t{res.measure}\t{res.value:{fmt}}")
            aggs[res.measure].add(res.value)
        for m in measures:
            print(f"all\t{m}\t{aggs[m].result():{fmt}}")
        return 0
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    for m in measures:
        print(f"{m}\t{agg[m]:{fmt}}")
    return 0
