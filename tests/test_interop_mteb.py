"""harness.interop: the harness's retrievers as MTEB models, its dataset folders as MTEB tasks, and
MTEB's own retrieval evaluator cross-checked against the harness's (harness.evaluate.ir).

Fast tests run on a tiny dataset folder built in tmp_path with a toy encoder (bag of words) or the
off-the-shelf all-MiniLM-L6-v2 the offline package ships; the slow test takes the smoke DAG's trained
DPR (tests/conftest.py ``smoke_run``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import interop
from harness.datasets import Doc, Query, store
from harness.errors import ConfigError, DataError
from harness.evaluate.ir import evaluate as ir_evaluate

VOCAB = 40


def write_folder(folder: Path) -> Path:
    """30 documents (a third without title), 9 test queries of which 8 have qrels (grades 1 and 2)."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(VOCAB)]
    docs = [Doc(f"d{i}", f"title {i}" if i % 3 else "", " ".join(rng.choice(words, 8))) for i in range(30)]
    queries = [Query(f"q{i}", " ".join(rng.choice(words, 3))) for i in range(9)]
    folder.mkdir(parents=True, exist_ok=True)
    store.write_corpus(folder, docs)
    store.write_queries(folder, "test", queries)
    store.write_qrels(folder / store.QRELS, {f"q{i}": {f"d{(i * 7) % 30}": 1, f"d{(i * 3 + 1) % 30}": 2}
                                             for i in range(8)})
    (folder / "meta.json").write_text(json.dumps({"kind": "dataset", "key": "toyset", "config_hash": "abc"}))
    return folder


def bag_of_words(texts):
    out = np.zeros((len(texts), VOCAB), np.float32)
    for i, t in enumerate(texts):
        for w in t.split():
            out[i, int(w[1:]) if w[:1] == "w" and w[1:].isdigit() else 0] += 1.0
    return out


def toy_model(similarity: str = "dot", sparse: bool = False) -> interop.HarnessModel:
    import scipy.sparse as sp

    wrap = sp.csr_matrix if sparse else (lambda x: x)
    return interop.HarnessModel("harness/toy", lambda texts, task: wrap(bag_of_words(texts)),
                                lambda docs, task: wrap(bag_of_words([f"{d.title} {d.text}" for d in docs])),
                                similarity=similarity, revision="r1", sparse=sparse)


def test_task_loads_the_folder(tmp_path):
    folder = write_folder(tmp_path / "toyset")
    task = interop.mteb_task(folder)
    assert task.metadata.name == "toyset" and task.metadata.main_score == "ndcg_at_10"
    task.load_data()
    split = task.dataset["default"]["test"]
    docs = list(store.iter_corpus(folder))
    assert list(split["corpus"]["id"]) == [d.id for d in docs]
    assert list(split["corpus"]["title"]) == [d.title for d in docs]
    assert list(split["corpus"]["text"]) == [d.text for d in docs]
    qrels = store.read_qrels(folder / store.QRELS)
    want = {q.id: q.text for q in store.read_queries(folder, "test") if q.id in qrels}
    assert dict(zip(split["queries"]["id"], split["queries"]["text"])) == want   # q8 has no qrels: left out
    assert split["relevant_docs"] == qrels


def test_task_errors(tmp_path):
    store.write_corpus(tmp_path, [Doc("d", "", "x")])
    store.write_queries(tmp_path, "test", [Query("q", "x")])
    with pytest.raises(DataError, match="has no qrels-test.txt: not a prepared qrels dataset folder"):
        interop.mteb_task(tmp_path)
    store.write_qrels(tmp_path / store.QRELS, {"other": {"d": 1}})
    with pytest.raises(DataError, match="none of the test queries has qrels"):
        interop.mteb_task(tmp_path)


@pytest.mark.parametrize("similarity, sparse", [("dot", False), ("cosine", False), ("dot", True)])
def test_mteb_ndcg_equals_the_harness_evaluation(tmp_path, similarity, sparse):
    """MTEB's evaluator (mteb.evaluate on the custom task) and harness.evaluate.ir (ir_measures) on the
    same model's exact-search run give the same nDCG@10 (to 1e-4: MTEB rounds to 5 places); both break
    score ties by document id (pytrec_eval's rule), and the bag-of-words scores tie often."""
    folder = write_folder(tmp_path / "toyset")
    model = toy_model(similarity, sparse)
    got = interop.evaluate(model, interop.mteb_task(folder), tmp_path / "out")
    docs, queries, qrels = interop.load_split(folder)
    ours = ir_evaluate(qrels, model.search_exact(docs, queries, k=100), ["nDCG@10", "R@10"])
    assert got["ndcg_at_10"] == pytest.approx(ours["nDCG@10"], abs=1e-4)
    assert got["scores"]["recall_at_10"] == pytest.approx(ours["R@10"], abs=1e-4)
    assert got["path"] == tmp_path / "out" / "results" / "harness__toy" / "r1" / "toyset.json"
    written = json.loads(got["path"].read_text())   # MTEB's own result JSON
    assert written["task_name"] == "toyset" and written["scores"]["test"][0]["ndcg_at_10"] == got["ndcg_at_10"]
    assert model.mteb_model_meta.similarity_fn_name.value == ("dot" if similarity == "dot" else "cosine")


def test_model_meta_tells_mteb_the_inner_product():
    import mteb
    from mteb.models import EncoderProtocol

    model = toy_model()
    assert isinstance(model, EncoderProtocol)
    assert model.mteb_model_meta.similarity_fn_name is mteb.models.model_meta.ScoringFunction.DOT_PRODUCT
    a, b = bag_of_words(["w1 w2", "w3"]), bag_of_words(["w1 w1", "w2 w3", "w4"])
    np.testing.assert_allclose(model.similarity(a, b).numpy(), a @ b.T)
    np.testing.assert_allclose(toy_model(sparse=True).similarity(a, b).numpy(), a @ b.T)


@pytest.mark.parametrize("method, why", [("bm25", "term-matching"), ("densephrases", "phrases"),
                                         ("qcr", "discrete code ids")])
def test_jobs_without_vectors_fail_naming_the_job(tmp_path, method, why):
    folder = tmp_path / "models" / f"{method}.x"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"kind": "model", "method": method, "job": f"{method}.x"}))
    with pytest.raises(ConfigError, match=rf"job {method}\.x \({method}\) has no MTEB model: .*{why}"):
        interop.mteb_model(f"{method}.x", tmp_path)
    with pytest.raises(DataError, match="neither a model folder"):
        interop.mteb_model("nothing", tmp_path)
    with pytest.raises(ConfigError, match=r"job bm25 \(bm25\) has no MTEB model: BM25 is a term-matching index"):
        interop.mteb_model("bm25", tmp_path)   # BM25 has indexes and no model folder


def test_off_the_shelf_minilm_through_the_command(tmp_path, capsys):
    """`python -m harness mteb --model minilm`: all-MiniLM-L6-v2 from its offline package, as
    sentence-transformers runs it (normalised mean pooling, cosine, 256 tokens, title + " " + text),
    through MTEB's evaluator; equal to ir_measures on the same vectors searched exactly."""
    from sentence_transformers import SentenceTransformer

    from harness.cli import main

    folder = write_folder(tmp_path / "toyset")
    out = tmp_path / "out"
    assert main(["mteb", "--model", "minilm", "--task", str(folder), "--output", str(out)]) == 0
    line = capsys.readouterr().out
    assert "sentence-transformers/all-MiniLM-L6-v2 on toyset (test): MTEB nDCG@10" in line
    written = next((out / "results").glob("sentence-transformers__all-MiniLM-L6-v2/*/toyset.json"))
    mteb_ndcg = json.loads(written.read_text())["scores"]["test"][0]["ndcg_at_10"]
    model = interop.mteb_model("minilm")
    st = model.model
    assert isinstance(st, SentenceTransformer) and st.max_seq_length == 256
    docs, queries, qrels = interop.load_split(folder)
    d = st.encode([f"{x.title} {x.text}".strip() for x in docs], normalize_embeddings=True)
    q = st.encode(list(queries.values()), normalize_embeddings=True)
    scores = q @ d.T
    run = {qid: {docs[j].id: float(scores[i, j]) for j in range(len(docs))} for i, qid in enumerate(queries)}
    assert mteb_ndcg == pytest.approx(ir_evaluate(qrels, run, ["nDCG@10"])["nDCG@10"], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("job, side, system", [("dpr", None, "dpr"), ("lightretriever", None, "lightretriever"),
                                               ("lightretriever", "base", "lightretriever.base")])
def test_smoke_model_mteb_equals_the_harness(smoke_run, tmp_path, job, side, system):
    """The smoke DAG's trained DPR and LightRetriever (light dense side and full-size baseline) on their
    qrels dataset (smoke-ir): MTEB's nDCG@10 through ``python -m harness mteb``'s path equals
    harness.evaluate.ir on the DAG's own run of the same model (exact inner-product search) and the
    DAG's recorded evaluation, to 1e-4."""
    from harness.runs import read_run

    out, done = smoke_run
    assert done.returncode == 0, done.stderr[-3000:]
    root = out / "smoke"
    dataset = "smoke-ir"
    folder = root / "data" / dataset
    settings = interop._tree_instructions(root) if job == "lightretriever" else None  # an evaluation set's
    model = interop.mteb_model(job, root, side=side, settings=settings)
    got = interop.evaluate(model, interop.mteb_task(folder), tmp_path / "out")
    _, queries, qrels = interop.load_split(folder)
    run = {q: dict(hits) for q, hits in read_run(root / "runs" / dataset / job / f"{system}.trec").items()}
    ours = ir_evaluate(qrels, run, ["nDCG@10"])["nDCG@10"]
    assert got["ndcg_at_10"] == pytest.approx(ours, abs=1e-4)
    recorded = json.loads((root / "eval" / dataset / job / f"{system}.json").read_text())["measures"]["nDCG@10"]
    assert got["ndcg_at_10"] == pytest.approx(recorded, abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("job, side", [("bpr", "codes"), ("bpr", "continuous"), ("svdr", None), ("vdr", None)])
def test_smoke_model_without_a_qrels_run(smoke_run, tmp_path, job, side):
    """BPR and SVDR/VDR search only QA datasets in the DAG (no qrels run to compare with): on smoke-ir,
    MTEB's nDCG@10 equals harness.evaluate.ir on the same vectors searched exactly by the harness
    (SVDR/VDR: sparse vocabulary-space vectors, scored by the model's sparse product, never densified)."""
    import scipy.sparse as sp

    out, done = smoke_run
    assert done.returncode == 0, done.stderr[-3000:]
    root = out / "smoke"
    folder = root / "data" / "smoke-ir"
    model = interop.mteb_model(job, root, side=side)
    assert model.sparse == (job in ("svdr", "vdr"))
    docs, queries, qrels = interop.load_split(folder)
    if model.sparse:
        assert sp.issparse(model._docs(docs[:2], "smoke-ir"))
    got = interop.evaluate(model, interop.mteb_task(folder), tmp_path / "out")
    ours = ir_evaluate(qrels, model.search_exact(docs, queries, k=100), ["nDCG@10"])["nDCG@10"]
    assert got["ndcg_at_10"] == pytest.approx(ours, abs=1e-4)
