"""BEIR's own code on the harness's BEIR data and runs.

* The ``beir`` family reads a corpus in BEIR's layout (the mirror's ``corpus.jsonl.gz``) through
  ``beir.datasets.data_loader.GenericDataLoader`` after its checksum; the dataset folder it writes
  is what the harness's own reader wrote (the SciFact folder's sha256 are pinned below).
* A BM25 run on SciFact made here with the harness (Lucene index, search, TREC run file) scores the
  same nDCG@10 and Recall@100 with ``harness.evaluate.run.evaluate_run`` (ir_measures) as with
  ``beir.retrieval.evaluation.EvaluateRetrieval.evaluate`` (pytrec_eval), to 1e-4.
* Where the two conventions differ, a hand-made run names and checks each difference:
  BEIR drops a document whose id equals the query's (``ignore_identical_ids=True``, its default;
  the harness scores it), BEIR averages over the queries that have results (the harness, as
  ``trec_eval -c``, counts a judged query without results as 0), and BEIR rounds to 5 decimals.
  Ties and zero-relevance judgments are treated alike (both go through pytrec_eval: ties broken by
  document id, descending; relevance 0 is not relevant and has gain 0).
"""
from __future__ import annotations

import copy
import gzip
import hashlib
import json

import pytest

from harness.errors import DataError

# sha256 of the SciFact dataset folder written by the harness's own reader before the corpus went
# through GenericDataLoader (and of results/ci/data/scifact of the finished ci DAG)
SCIFACT_FOLDER = {
    "corpus.jsonl": "6abe1d3c85f69e67be5a45a1d808fa82e9086ab48486b9d04d7c0899019bad0d",
    "queries-test.jsonl": "b3a87da17d18cba4f99921c4a7feaa60837b2027290962b97fe746a829c5b0ef",
    "qrels-test.txt": "8b7315286f8dc823956025a1fc9c9ff0bfe142d7b409458ccd758cfa0713ccba",
}


def beir_evaluate(qrels, run, ignore_identical_ids=True):
    """BEIR's nDCG@10 and Recall@100 of ``run`` ({qid: {docid: score}}); BEIR pops identical ids
    from the results it is given, so it gets a copy."""
    from beir.retrieval.evaluation import EvaluateRetrieval

    ndcg, _map, recall, _p = EvaluateRetrieval.evaluate(qrels, copy.deepcopy(run), [10, 100],
                                                        ignore_identical_ids=ignore_identical_ids)
    return {"nDCG@10": ndcg["NDCG@10"], "R@100": recall["Recall@100"]}


def harness_evaluate(qrels, run):
    from harness.evaluate.ir import evaluate

    return evaluate(qrels, run, ["nDCG@10", "R@100"])


# ---- the loader --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scifact(tmp_path_factory, shared_data):
    """(config, dataset folder) of SciFact prepared from the mirror by the beir family, inside a
    results folder (<results>/data/scifact) as the evaluate stage expects it."""
    from harness.config import load_config
    from harness.datasets import prepare
    from harness.settings import results_root

    root = tmp_path_factory.mktemp("beir-interop")
    cfg = load_config([], overrides={
        "results_dir": str(root / "results"),
        "data": {"cache_dir": str(root / "cache"), "mirror": str(shared_data), "offline": True},
        "datasets": {"scifact": {"id": "beir/scifact/test", "family": "beir", "name": "scifact"}}})
    folder = results_root(cfg) / "data" / "scifact"
    folder.mkdir(parents=True)
    meta = prepare("scifact", cfg["datasets"]["scifact"], cfg, folder)
    assert meta["documents"] == 5183 and meta["queries"] == {"test": 300} and meta["judgments"] == 339
    return cfg, folder


def test_scifact_folder_is_unchanged_by_generic_data_loader(scifact):
    _, folder = scifact
    got = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in SCIFACT_FOLDER}
    assert got == SCIFACT_FOLDER


def test_corpus_is_what_generic_data_loader_reads(scifact, shared_data, tmp_path):
    from beir.datasets.data_loader import GenericDataLoader

    from harness.datasets import store

    _, folder = scifact
    plain = tmp_path / "corpus.jsonl"
    plain.write_bytes(gzip.decompress((shared_data / "beir" / "scifact" / "corpus.jsonl.gz").read_bytes()))
    beir_corpus = GenericDataLoader(corpus_file=str(plain)).load_corpus()
    ours = [(d.id, d.title, d.text) for d in store.iter_corpus(folder)]
    assert ours == [(str(k), v["title"] or "", v["text"]) for k, v in beir_corpus.items()]


def _gz(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(lines)
    return path


def test_loader_keeps_the_harness_rules_where_generic_data_loader_is_lenient(tmp_path):
    """GenericDataLoader keeps the last of two records with one ``_id`` (silently) and stores None
    for a missing ``text``; the harness's reader raised on both, and still does. Blank lines (which
    GenericDataLoader cannot parse) are skipped as before; a missing title is ""; ids become strings."""
    from harness.datasets.beir import _corpus_from_jsonl_gz

    rec = lambda i, t: json.dumps({"_id": i, "title": None, "text": t}) + "\n"  # noqa: E731
    ok = _gz(tmp_path / "ok.jsonl.gz", [rec(1, "one"), "\n", rec("b", "two")])
    assert [tuple(d) for d in _corpus_from_jsonl_gz(ok)] == [("1", "", "one"), ("b", "", "two")]
    dup = _gz(tmp_path / "dup.jsonl.gz", [rec("a", "one"), rec("a", "again")])
    with pytest.raises(DataError, match="1 documents repeat an earlier document's _id"):
        list(_corpus_from_jsonl_gz(dup))
    no_text = _gz(tmp_path / "notext.jsonl.gz", [json.dumps({"_id": "a"}) + "\n"])
    with pytest.raises(DataError, match="needs '_id' and 'text'"):
        list(_corpus_from_jsonl_gz(no_text))


# ---- the cross-check of a harness run ----------------------------------------------------------


@pytest.fixture(scope="module")
def bm25_run(scifact, tmp_path_factory):
    """A harness BM25 run on SciFact's 300 test queries (depth 100, as the ci profile searches), written as the search stage
    writes it (a TREC run file)."""
    from harness.datasets import store
    from harness.indexes import lucene
    from harness.runs import write_run

    _, folder = scifact
    out = tmp_path_factory.mktemp("bm25")
    lucene.build("bm25", store.iter_corpus(folder), out / "lucene", contents="title_text", threads=1)
    queries = store.read_queries(folder, "test")
    hits = lucene.LuceneBM25(out / "lucene", k1=0.9, b=0.4).search([q.text for q in queries],
                                                                    [q.id for q in queries], 100, threads=1)
    write_run(out / "bm25.trec", hits, "bm25")
    return out / "bm25.trec"


def test_harness_and_beir_agree_on_a_bm25_scifact_run(scifact, bm25_run):
    from harness.datasets import store
    from harness.evaluate.run import evaluate_run
    from harness.runs import read_run

    cfg, folder = scifact
    cfg = {**cfg, "evaluate": {**cfg["evaluate"], "ir_measures": ["nDCG@10", "R@100"]}}
    ours = evaluate_run(cfg, "scifact", bm25_run)
    assert ours["queries"] == 300 and ours["queries_without_results"] == 0
    qrels = store.read_qrels(folder / store.QRELS)
    run = {q: dict(hits) for q, hits in read_run(bm25_run).items()}
    # the conventions that could differ do not arise here: every judged query has results, no
    # document id equals its query's id (SciFact's doc ids start at 4983, its query ids end at 1395)
    assert set(run) == set(qrels) and not any(q in docs for q, docs in run.items())
    theirs = beir_evaluate(qrels, run)
    for name in ("nDCG@10", "R@100"):
        assert ours["measures"][name] == pytest.approx(theirs[name], abs=1e-4), name
        # BEIR rounds to 5 decimals: that is the whole difference
        assert abs(ours["measures"][name] - theirs[name]) <= 5e-6 + 1e-12, name
    # a sanity check that the run is BM25 on SciFact (Anserini's BEIR flat BM25: nDCG@10 0.679)
    assert 0.6 < ours["measures"]["nDCG@10"] < 0.75


# ---- the conventions, named ----------------------------------------------------------------------


QRELS = {
    "q1": {"d1": 1, "d2": 0, "d3": 2},   # graded, with a zero-relevance judgment
    "q2": {"d5": 1},
    "q3": {"d7": 0},                     # only a zero-relevance judgment
    "7": {"7": 1, "d1": 1},              # a document whose id equals the query's
}
RUN = {
    "q1": {"d2": 3.0, "d1": 3.0, "d3": 3.0, "d4": 1.0},   # a three-way tie at the top
    "q2": {"d6": 1.0, "d5": 1.0},                          # a tie, relevant document id smaller
    "q3": {"d7": 2.0},
    "7": {"7": 5.0, "d1": 1.0, "d2": 0.5},
}


def test_ties_and_zero_relevance_are_treated_alike():
    """Both break ties by document id, descending (trec_eval's rule, through pytrec_eval), both give
    relevance 0 no gain and no recall, and both score a query with only zero judgments 0."""
    run = {q: d for q, d in RUN.items() if q != "7"}
    qrels = {q: d for q, d in QRELS.items() if q != "7"}
    ours, theirs = harness_evaluate(qrels, run), beir_evaluate(qrels, run)
    for name in ours:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-5), name
    # q2: d6 > d5 by id, so d5 is at rank 2: nDCG 1/log2(3); q3 scores 0, not left out
    assert harness_evaluate({"q2": QRELS["q2"]}, {"q2": RUN["q2"]})["nDCG@10"] == pytest.approx(0.6309298, abs=1e-7)
    assert harness_evaluate({"q3": QRELS["q3"]}, {"q3": RUN["q3"]}) == {"nDCG@10": 0.0, "R@100": 0.0}


def test_beir_drops_documents_whose_id_is_the_query_id():
    """BEIR's default ``ignore_identical_ids=True`` removes doc "7" from query "7"'s results (for
    ArguAna-like sets where the query is itself a corpus document); the harness scores the run as
    it is, which is BEIR with ``ignore_identical_ids=False``."""
    ours = harness_evaluate(QRELS, RUN)
    same = beir_evaluate(QRELS, RUN, ignore_identical_ids=False)
    dropped = beir_evaluate(QRELS, RUN)
    for name in ours:
        assert ours[name] == pytest.approx(same[name], abs=1e-5), name
    assert dropped["nDCG@10"] < same["nDCG@10"] - 0.05 and dropped["R@100"] < same["R@100"]


def test_beir_averages_over_the_queries_with_results():
    """A judged query missing from the run: the harness (ir_measures, like trec_eval -c) counts it
    as 0, BEIR leaves it out of the mean (pytrec_eval scores only the run's queries)."""
    run = {q: d for q, d in RUN.items() if q != "q2"}
    ours = harness_evaluate(QRELS, run)
    theirs = beir_evaluate(QRELS, run, ignore_identical_ids=False)
    n, n_run = len(QRELS), len(run)
    for name in ours:
        assert ours[name] == pytest.approx(theirs[name] * n_run / n, abs=1e-5), name
