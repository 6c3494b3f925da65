"""harness.api: load_retriever/load_encoder on artifacts the stage commands built (no config),
`python -m harness search --index ...` and `python -m harness evaluate QRELS RUN MEASURE...`.

The artifacts are the suite's smoke DAG's (tests/conftest.py smoke_run), trained and indexed by the
stage commands themselves (subprocesses, as the workflow runs them): DPR and BM25 (copied into a tree
of their own), BPR, SVDR and QCR (read in place). Every test that reads them is slow: the DAG runs
once per session, in CI and `make test`."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.api import Encoder, Retriever, artifact_config, load_encoder, load_retriever, read_topics
from harness.datasets import store
from harness.errors import ConfigError, DataError
from harness.runs import read_run

REPO = Path(__file__).resolve().parent.parent
DEPTH = 100  # evaluate.depth of the default (smoke) profile: the stage runs' depth


def harness(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    if check:
        assert done.returncode == 0, f"harness {' '.join(map(str, args))}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


class Tree:
    """DPR's and BM25's artifacts as the smoke DAG built them (the stage commands under Snakemake),
    copied into a results tree of their own (a test adds an index there; the DAG's tree stays as it
    was), with a config that names it: the smoke profile as the DAG ran it."""

    PARTS = ("data/smoke", "models/dpr", "indexes/dpr/smoke", "indexes/bm25/smoke", "runs/smoke/dpr",
             "runs/smoke/bm25")

    def __init__(self, base: Path, dag_root: Path) -> None:
        self.cfg = base / "config.yaml"
        self.cfg.write_text(json.dumps({"results_dir": str(base / "results")}))  # JSON is YAML
        self.root = base / "results" / "smoke"
        for part in self.PARTS:
            shutil.copytree(dag_root / part, self.root / part)

    def path(self, stage: str, job: str, dataset: str | None = None) -> Path:
        return {"train": self.root / "models" / job, "index": self.root / "indexes" / job / str(dataset),
                "search": self.root / "runs" / str(dataset) / job}[stage]

    def queries(self, key: str = "smoke"):
        return store.read_queries(self.root / "data" / key, "test")


@pytest.fixture(scope="module")
def tree(smoke_run, tmp_path_factory) -> Tree:
    """DPR and BM25 on the smoke fixture, trained, indexed and searched by `python -m harness
    train|index|search --job ...` (the stage form of the commands) in the suite's smoke DAG
    (tests/conftest.py smoke_run)."""
    out, done = smoke_run
    assert done.returncode == 0, done.stderr[-3000:]
    return Tree(tmp_path_factory.mktemp("api"), out / "smoke")


def same_run(got: dict, want: dict) -> None:
    """Same queries, scores equal to 1e-5 (relative 1e-6: DPR's inner products are ~100, float32
    carries ~7 digits; this process runs numpy/torch without the stage's portable kernels) and at
    every rank the same doc, or a doc of the stage's run whose score ties with it to that precision
    (two scores 1e-5 apart may come out in the other order)."""
    assert set(got) == set(want)
    for qid, hits in want.items():
        assert [s for _, s in got[qid]] == pytest.approx([s for _, s in hits], rel=1e-6, abs=1e-5), qid
        scores = dict(hits)
        for (d, _), (e, s) in zip(got[qid], hits):
            if d != e:
                assert d in scores and scores[d] == pytest.approx(s, rel=1e-6, abs=1e-5), (qid, d, e)


@pytest.mark.parametrize("method", ["dpr", "bm25"])
def test_load_retriever_gives_the_stage_run(tree, method):
    r = load_retriever(index_dir=tree.path("index", method, "smoke"))
    assert isinstance(r, Retriever) and r.system == method
    queries = tree.queries()
    run = r.search(queries, DEPTH)
    same_run(run, read_run(tree.path("search", method, "smoke") / f"{method}.trec"))
    # a mapping qid -> text is the same query set (batches of another size: scores to float32 precision)
    sub = {q.id: q.text for q in queries[:5]}
    same_run(r.search(sub, 10), {q: run[q][:10] for q in sub})


def test_model_dir_alone_uses_the_one_index_built_from_it(tree):
    r = load_retriever(tree.path("train", "dpr"))
    assert r.system == "dpr"
    assert r.search({"q": "Who founded the works?"}, 3)["q"] == \
        load_retriever(index_dir=tree.path("index", "dpr", "smoke")).search({"q": "Who founded the works?"}, 3)["q"]
    copy = tree.root / "indexes" / "dpr" / "smoke-copy"
    shutil.copytree(tree.path("index", "dpr", "smoke"), copy)
    try:  # two indexes built from the model: the error names both and what to pass
        with pytest.raises(ConfigError, match="pass index_dir") as err:
            load_retriever(tree.path("train", "dpr"))
        assert "smoke-copy" in str(err.value) and str(tree.path("index", "dpr", "smoke")) in str(err.value)
    finally:
        shutil.rmtree(copy)


def test_wrong_folders_fail_with_what_to_pass(tree, tmp_path):
    with pytest.raises(ConfigError, match="needs model_dir or index_dir"):
        load_retriever()
    with pytest.raises(DataError, match="no meta.json"):
        load_retriever(index_dir=tmp_path)
    with pytest.raises(ConfigError, match="not a model"):
        load_retriever(model_dir=tree.path("index", "dpr", "smoke"))
    with pytest.raises(ConfigError, match="not an index"):
        load_retriever(index_dir=tree.path("train", "dpr"))
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "model", "method": "reader", "job": "reader"}))
    with pytest.raises(ConfigError, match="not a retrieval method"):
        load_encoder(tmp_path)


def test_artifact_config_rebuilds_the_section_from_meta_json(tree):
    meta = json.loads((tree.path("train", "dpr") / "meta.json").read_text())
    cfg = artifact_config(meta["config_values"], "dpr", {"encode_batch_size": 7, "device": "cpu"})
    dpr = cfg["methods"]["dpr"]
    assert dpr["epochs"] == meta["config_values"]["methods.dpr.epochs"] > 1                # recorded
    assert dpr["p_max_len"] == 128 and dpr["pooling"] == "cls"
    assert dpr["index"] == "faiss:Flat" and dpr["encode_batch_size"] == 7                 # default, override
    assert "splade-tiny" in cfg["backbones"] and cfg["seed"] == meta["config_values"]["seed"]
    nested = artifact_config({"methods.lightretriever.instructions.a": "x"}, "lightretriever",
                             {"instructions.b": "y"})
    assert nested["methods"]["lightretriever"]["instructions"] == {"a": "x", "b": "y"}


def test_encoder_protocol_matches_the_index(tree):
    import numpy as np

    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.methods import dpr

    enc = load_encoder(tree.path("train", "dpr"))
    assert isinstance(enc, Encoder)
    q = enc.encode_queries(["Who founded the works?", "What year?"])
    assert q.shape == (2, 128) and q.dtype == np.float32
    again = dpr.Encoder.load(tree.path("train", "dpr")).encode_queries(["Who founded the works?", "What year?"])
    np.testing.assert_allclose(q, again, rtol=1e-6, atol=1e-6)   # no config either way: the same settings
    docs = list(store.iter_corpus(tree.root / "data" / "smoke"))[:3]
    index = DenseFaissIndex.load(tree.path("index", "dpr", "smoke"), "Flat")
    np.testing.assert_allclose(enc.encode_docs(docs), index.index.reconstruct_n(0, 3), rtol=1e-4, atol=1e-4)


def test_search_command_writes_the_stage_run(tree, tmp_path):
    """`search --index` applies the index's numerics before numpy loads: the stage's run, byte for byte."""
    out = tmp_path / "dpr.trec"
    harness("search", "--index", tree.path("index", "dpr", "smoke"), "--topics",
            tree.root / "data" / "smoke" / "queries-test.jsonl", "--output", out, "--k", DEPTH)
    assert out.read_text() == (tree.path("search", "dpr", "smoke") / "dpr.trec").read_text()
    topics = tmp_path / "topics.tsv"   # pyserini's topic format; --hits as pyserini spells it
    topics.write_text("".join(f"{q.id}\t{q.text}\n" for q in tree.queries()))
    harness("search", "--index", tree.path("index", "bm25", "smoke"), "--topics", topics, "--output",
            tmp_path / "bm25.trec", "--hits", 10, "--tag", "mine")
    lines = [ln.split() for ln in (tmp_path / "bm25.trec").read_text().splitlines()]
    assert {ln[0] for ln in lines} == {q.id for q in tree.queries()} and all(len(ln) == 6 for ln in lines)
    assert all(ln[5] == "mine" and 1 <= int(ln[3]) <= 10 for ln in lines)
    stage = read_run(tree.path("search", "bm25", "smoke") / "bm25.trec")
    assert {q: [d for d, _ in h] for q, h in read_run(tmp_path / "bm25.trec").items()} == \
        {q: [d for d, _ in h[:10]] for q, h in stage.items()}


def test_search_command_errors(tree, tmp_path):
    r = harness("search", "--index", tree.path("index", "dpr", "smoke"), "--topics", tmp_path / "none.tsv",
                "--output", tmp_path / "x.trec", check=False)
    assert r.returncode == 2 and "topics file" in r.stderr
    assert "search --job ID --dataset KEY --out DIR" in " ".join(harness("search", "--help").stdout.split())


def gold_qrels(tree: Tree, path: Path) -> Path:
    path.write_text("".join(f"{q.id} 0 {d} 1\n" for q in tree.queries() for d in q.gold or []))
    return path


def test_evaluate_command_is_ir_measures(tree, tmp_path):
    import ir_measures

    qrels, run = gold_qrels(tree, tmp_path / "qrels.txt"), tree.path("search", "dpr", "smoke") / "dpr.trec"
    out = harness("evaluate", qrels, run, "nDCG@10", "RR@10 R@100", "-p", 6).stdout
    got = dict(line.split("\t") for line in out.splitlines())
    measures = [ir_measures.parse_measure(m) for m in ("nDCG@10", "RR@10", "R@100")]
    want = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(str(qrels)),
                                      ir_measures.read_trec_run(str(run)))
    assert list(got) == ["nDCG@10", "RR@10", "R@100"]
    assert {m: float(v) for m, v in got.items()} == pytest.approx({str(m): v for m, v in want.items()}, abs=1e-6)
    # the stage form of the same command still evaluates a search job's runs
    harness("evaluate", "--config", tree.cfg, "--job", "dpr", "--dataset", "smoke", "--out", tmp_path / "eval")
    assert "Success@20" in json.loads((tmp_path / "eval" / "dpr.json").read_text())["measures"]


def test_evaluate_hand_checked(tmp_path, capsys):
    """q1: the one relevant doc at rank 2; q2: relevant d3, d4 at ranks 1 and 3."""
    from harness.cli import main

    (tmp_path / "qrels").write_text("q1 0 d1 1\nq2 0 d3 1\nq2 0 d4 1\n")
    (tmp_path / "run").write_text("q1 Q0 d2 1 9 x\nq1 Q0 d1 2 8 x\nq2 Q0 d3 1 9 x\nq2 Q0 d5 2 8 x\nq2 Q0 d4 3 7 x\n")
    assert main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / "run"), "nDCG@10", "RR@10", "-q", "-p", "5"]) == 0
    lines = [ln.split("\t") for ln in capsys.readouterr().out.splitlines()]
    ndcg1 = 1 / 1.5849625007          # 1/log2(3) over an ideal 1
    ndcg2 = 1.5 / (1 + 1 / 1.5849625007)  # (1 + 1/log2(4)) / (1 + 1/log2(3))
    values = {(q, m): float(v) for q, m, v in lines}
    assert values == pytest.approx({("q1", "nDCG@10"): ndcg1, ("q2", "nDCG@10"): ndcg2, ("q1", "RR@10"): 0.5,
                                    ("q2", "RR@10"): 1.0, ("all", "nDCG@10"): (ndcg1 + ndcg2) / 2,
                                    ("all", "RR@10"): 0.75}, abs=1e-5)
    assert main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / "run"), "nDCG@x"]) == 2
    assert "not an ir_measures measure" in capsys.readouterr().err


def test_a_copied_tree_finds_the_index_built_from_its_model(tmp_path):
    """meta.json names absolute input paths where the tree was built (the suite's DAG does); a copy
    of the tree still finds, for its model, the one index built from the model at that place."""
    from harness.api import _index_candidates

    root = tmp_path / "copy" / "smoke"
    for rel, meta in (("models/dpr", {"kind": "model", "method": "dpr", "job": "dpr"}),
                      ("indexes/dpr/smoke", {"kind": "index", "inputs": {"model": "/built/at/smoke/models/dpr"}}),
                      ("indexes/bpr/smoke", {"kind": "index", "inputs": {"model": "/built/at/smoke/models/bpr"}}),
                      ("indexes/dpr2/smoke", {"kind": "index", "inputs": {"model": "results/smoke/models/dpr"}})):
        (root / rel).mkdir(parents=True)
        (root / rel / "meta.json").write_text(json.dumps(meta))
    assert _index_candidates(root / "models" / "dpr") == [root / "indexes" / "dpr" / "smoke"]


def test_read_topics(tmp_path):
    (tmp_path / "t.tsv").write_text("1\tfirst query\n\n2\tsecond\twith tab\n")
    assert read_topics(tmp_path / "t.tsv") == {"1": "first query", "2": "second\twith tab"}
    (tmp_path / "t.jsonl").write_text('{"id": "a", "text": "x", "answers": ["y"]}\n{"qid": 7, "query": "z"}\n')
    assert read_topics(tmp_path / "t.jsonl") == {"a": "x", "7": "z"}
    (tmp_path / "bad.tsv").write_text("1 no tab\n")
    with pytest.raises(DataError, match="bad.tsv:1"):
        read_topics(tmp_path / "bad.tsv")


# ---- the other methods: the models, indexes and runs of the suite's own smoke DAG ----------------


@pytest.mark.slow
@pytest.mark.parametrize("index, model, dataset, search_job, system", [
    ("bpr", None, "smoke", "bpr", "bpr.bflat"),
    ("bpr.hash", None, "smoke", "bpr", "bpr.bhash"),
    ("svdr.emb", None, "smoke", "svdr", "svdr.full"),
    ("svdr.token", "svdr", "smoke", "svdr", "svdr.beta"),
    ("qcr", None, "smoke-ir", "qcr", "qcr.rescore"),
])
def test_load_retriever_other_methods(smoke_run, index, model, dataset, search_job, system):
    """What the DAG trained and indexed (tests/conftest.py smoke_run: `snakemake reproduce_all` on smoke),
    loaded by `load_retriever` from its folders alone, gives the DAG's run of the system."""
    out, done = smoke_run
    assert done.returncode == 0, done.stderr[-3000:]
    root = out / "smoke"
    r = load_retriever(root / "models" / model if model else None, root / "indexes" / index / dataset)
    assert r.system == system
    queries = store.read_queries(root / "data" / dataset, "test")
    same_run(r.search(queries, DEPTH), read_run(root / "runs" / dataset / search_job / f"{system}.trec"))
    if model is None and index != "bpr.hash":
        enc = load_encoder(root / "models" / search_job)
        assert isinstance(enc, Encoder) and enc.encode_queries(["a question"]).shape[0] == 1
