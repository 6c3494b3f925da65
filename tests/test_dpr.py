"""DPR on the smoke fixture: training moves the loss, encoders round-trip, faiss Flat is exact."""
from __future__ import annotations

import numpy as np
import pytest

from harness.config import load_config
from harness.methods import dpr
from harness.methods.base import Context


@pytest.fixture(scope="module")
def trained(tmp_path_factory, smoke_context, train_on_smoke):
    root = tmp_path_factory.mktemp("dpr")
    ctx = smoke_context(root, "dpr", {"epochs": 2, "batch_size": 8, "p_max_len": 64, "lr": 5e-4})
    out, info = train_on_smoke(ctx, root)  # no BM25 negatives: the trainer falls back to random passages
    return ctx, out, info


def test_training_reduces_loss(trained):
    _, _, info = trained
    assert info["steps"] == 2 * -(-187 // 8)
    assert np.mean(info["loss_last"]) < np.mean(info["loss_first"])


def test_encoders_round_trip_and_shapes(trained):
    ctx, out, _ = trained
    m = dpr.BiEncoder.load(ctx, out)
    q = m.encode_questions(["Who founded the works?", "What year?"])
    p = m.encode_passages(["T"], ["some passage text"])
    assert q.shape == (2, 128) and p.shape == (1, 128)
    assert q.dtype == np.float32
    again = dpr.BiEncoder.load(ctx, out).encode_questions(["Who founded the works?", "What year?"])
    np.testing.assert_allclose(q, again, rtol=1e-5, atol=1e-6)
    assert not np.allclose(q, m.encode_passages(["Who founded the works?", "What year?"], ["", ""]))


def test_flat_index_search_is_exact(trained, tmp_path):
    ctx, out, _ = trained
    info = dpr.build_index(ctx, tmp_path / "idx", out) if (tmp_path / "idx").mkdir() is None else None
    assert info["spec"] == "faiss:Flat" and info["documents"] == 122
    s = dpr.Searcher(ctx, tmp_path / "idx", out)
    from harness.datasets import store

    docs = list(store.iter_corpus(ctx.data_dir()))
    P = s.model.encode_passages([d.title for d in docs], [d.text for d in docs])
    Q = s.encode(["Who founded Kanmor Works?", "Where is the source of the river?", "How long is it?"])
    scores, rows = s.search(Q, 10)
    exact = Q @ P.T
    for i in range(len(Q)):
        want = np.sort(exact[i])[::-1][:10]
        np.testing.assert_allclose(scores[i], want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(exact[i, rows[i]], scores[i], rtol=1e-4, atol=1e-4)


def test_question_mark_stripping(trained):
    ctx, _, _ = trained
    assert dpr.prepare_question(ctx, "Who? ") == "Who?"
    ctx2 = Context(load_config([], overrides={"methods": {"dpr": {"strip_question_mark": True}}}), "dpr")
    assert dpr.prepare_question(ctx2, "Who are you?") == "Who are you"


def test_bm25_rerank_reads_the_flat_index_vectors_and_matches_encoding_on_the_fly(trained, tmp_path):
    """BM25 + DPR (m): the passages' vectors come from the Flat index (stored_vectors: exactly what
    build_index added), giving the order the encoders give on the fly; a lossy index has none."""
    from harness.datasets import store
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.job import Job
    from harness.rerank import rerank
    from harness.runs import read_run, write_run

    ctx, out, _ = trained
    (tmp_path / "idx").mkdir()
    dpr.build_index(ctx, tmp_path / "idx", out)
    s = dpr.Searcher(ctx, tmp_path / "idx", out)
    docs = list(store.iter_corpus(ctx.data_dir()))
    P = s.model.encode_passages([d.title for d in docs], [d.text for d in docs])
    np.testing.assert_allclose(s.index.stored_vectors(), P, rtol=1e-5, atol=1e-6)
    assert DenseFaissIndex.build("PQ8x4", np.random.default_rng(0).random((300, 128), np.float32)).stored_vectors() is None
    queries = store.read_queries(ctx.data_dir(), "test")
    bm25 = {q.id: [(d.id, 30.0 - i) for i, d in enumerate(docs[i % 7:i % 7 + 30])] for i, q in enumerate(queries)}
    (tmp_path / "bm25").mkdir()
    write_run(tmp_path / "bm25" / "bm25.trec", bm25, "bm25")
    job = Job("search", "dpr", "dpr", "", "smoke", systems=("dpr",), params={"depths": [5, 20]})
    (tmp_path / "runs").mkdir()
    dpr.run_search(ctx, job, {"data": ctx.data_dir(), "model": out, "index": tmp_path / "idx",
                              "bm25_run": tmp_path / "bm25"}, tmp_path / "runs")
    fly = rerank(bm25, queries, [5, 20], {d.id: d for d in docs}, s.model.encode_questions,
                 lambda ds: s.model.encode_passages([d.title for d in ds], [d.text for d in ds]))
    # given the dataset folder, rerank reads the re-ranked passages alone (not the corpus whole): the same
    assert rerank(bm25, queries, [5, 20], ctx.data_dir(), s.model.encode_questions,
                  lambda ds: s.model.encode_passages([d.title for d in ds], [d.text for d in ds])) == fly
    for m in (5, 20):
        got = read_run(tmp_path / "runs" / f"dpr.bm25-m{m}.trec")
        assert {q: [d for d, _ in h] for q, h in got.items()} == {q: [d for d, _ in h] for q, h in fly[m].items()}
