"""Evaluation of one run file against a prepared dataset: :func:`evaluate_run`, what the stage
``python -m harness evaluate --job ...`` (harness.stages) and the methods' measure jobs call.

QA datasets (questions with answers): DPR-style top-k accuracy, reported as ``Success@k`` with
the dataset's answer rule (config key ``datasets.<key>.answer_rule``, default dpr-string),
passage text only. qrels datasets: the ir_measures of ``evaluate.ir_measures``.
With ``datasets.<key>.relevance: gold`` the answer rule is skipped: only the ir_measures over the
gold-passage qrels are computed (so ``Success@k`` there is ir_measures' Success, never the answer
rule; the output says ``"relevance": "gold"``). Values are fractions in [0, 1].
"""
from __future__ import annotations

from pathlib import Path

from harness.datasets import relevance, store
from harness.errors import ConfigError, DataError
from harness.evaluate import ir, qa
from harness.runs import read_run
from harness.settings import results_root


def evaluate_run(cfg, dataset: str, run_path: Path, split: str = "test") -> dict:
    if dataset not in cfg["datasets"]:
        raise ConfigError(f"unknown dataset {dataset!r}; config key datasets defines: {', '.join(cfg['datasets'])}")
    folder = results_root(cfg) / "data" / dataset
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
