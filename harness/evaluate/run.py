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


def evaluate_run(cfg, dataset: str, run_path: Path, split: str = "test",
                 per_query: dict[str, dict[str, float]] | None = None) -> dict:
    """The run's measures on ``dataset`` (aggregates); with ``per_query`` (a dict), also every
    query's value of every measure, ``{qid: {measure: value}}``, whose mean is the aggregate."""
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
        if per_query is not None:
            for q, vals in qa.per_query_success(hits, cfg["evaluate"]["qa_cutoffs"]).items():
                per_query.setdefault(q, {}).update(vals)
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
            out["measures"].update(ir.evaluate(qrels, run_scores, wanted, per_query))
        if len(wanted) < len(cfg["evaluate"]["ir_measures"]):
            out["qrels_measures_left_out"] = sorted(set(cfg["evaluate"]["ir_measures"]) - set(wanted))
    missing = [q.id for q in queries if q.id not in run]
    out["queries_without_results"] = len(missing)
    return out


PER_QUERY_SUFFIX = ".perquery.tsv.gz"


def write_per_query(path: Path, per_query: dict[str, dict[str, float]]) -> None:
    """``qid<TAB>measure<TAB>value`` lines (header first), gzip without a timestamp (the same
    values give the same bytes), written atomically."""
    import gzip

    from harness.io import atomic_path

    lines = ["qid\tmeasure\tvalue"] + [f"{q}\t{m}\t{v!r}" for q in sorted(per_query)
                                       for m, v in sorted(per_query[q].items())]
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(("\n".join(lines) + "\n").encode("utf-8"))


def read_per_query(path: Path) -> dict[str, dict[str, float]]:
    """What :func:`write_per_query` wrote."""
    import gzip

    out: dict[str, dict[str, float]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        next(fh, None)
        for lineno, line in enumerate(fh, 2):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise DataError(f"{path}:{lineno}: expected qid<TAB>measure<TAB>value, got {len(parts)} columns",
                                fix="delete it and re-run the evaluate rule")
            out.setdefault(parts[0], {})[parts[1]] = float(parts[2])
    return out
