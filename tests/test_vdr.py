"""VDR / SVDR: encoder pieces against naive torch, exact search against brute force, the loss,
in-training negative retrieval (index built once), re-ranking, ablation reuse, the CLI steps."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import scipy.sparse as sp

from harness.config import load_config
from harness.datasets import Doc, Query, store
from harness.errors import ConfigError
from harness.methods import vdr
from harness.methods.base import Context
from harness.rerank import rerank

torch = pytest.importorskip("torch")

TINY = {"epochs": 2, "batch_size": 8, "p_max_len": 64, "q_max_len": 24, "lr": 5e-4, "max_train_questions": 48,
        "topk": 64, "encode_batch_size": 32}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, smoke_context):
    root = tmp_path_factory.mktemp("vdr")
    ctx = smoke_context(root, "svdr", TINY)
    return root, ctx.cfg, ctx


@pytest.fixture(scope="module")
def trained(smoke, train_on_smoke):
    root, _, ctx = smoke
    out, info = train_on_smoke(ctx, root)  # no BM25 negatives: random passages until retrieval starts
    return ctx, out, info


# ---------------------------------------------------------------- encoder pieces
def _naive_pool(h, lengths, w, b):
    rows = []
    for i, n in enumerate(lengths):
        logits = h[i, :n] @ w.T + (0 if b is None else b)
        rows.append(logits.max(0).values)
    return torch.stack(rows)


@pytest.mark.parametrize("with_bias", [False, True])
def test_max_project_value_and_gradient_match_naive_torch(with_bias):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 5, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, generator=g, dtype=torch.float64, requires_grad=True) if with_bias else None
    lengths = [7, 4, 1]
    out = vdr.max_project_grad(h, lengths, w, b)
    want = _naive_pool(h, lengths, w, b)
    torch.testing.assert_close(out, want)
    upstream = torch.randn(3, 11, generator=g, dtype=torch.float64)
    upstream[1, ::2] = 0.0  # sparse gradients (top-k training) take the same path
    grads = torch.autograd.grad((out * upstream).sum(), [h, w] + ([b] if with_bias else []))
    want_grads = torch.autograd.grad((want * upstream).sum(), [h, w] + ([b] if with_bias else []))
    for got, exp in zip(grads, want_grads):
        torch.testing.assert_close(got, exp)
    # padding positions never receive gradient
    assert torch.all(grads[0][1, 4:] == 0) and torch.all(grads[0][2, 1:] == 0)


def test_max_project_chunks_do_not_change_the_result(monkeypatch):
    from harness.models import projection

    h = torch.randn(5, 9, 4)
    w = torch.randn(13, 4)
    monkeypatch.setattr(projection, "BLOCK_TOKENS", 4)
    a, ia = vdr.max_project(h, [9, 3, 9, 2, 6], w)
    monkeypatch.setattr(projection, "BLOCK_TOKENS", 1000)
    b, ib = vdr.max_project(h, [9, 3, 9, 2, 6], w)
    torch.testing.assert_close(a, b)
    assert torch.equal(ia, ib)


def test_elu1p():
    x = torch.tensor([-2.0, 0.0, 3.0])
    torch.testing.assert_close(vdr.elu1p(x), torch.tensor([np.exp(-2.0), 1.0, 4.0], dtype=torch.float32))


def test_encoder_sparsity_lexical_union_and_binary(trained):
    _, out, _ = trained
    m = vdr.VDRModel.load(out)
    texts = ["who founded the kanmor works?", "river source"]
    E = m.embed_questions(texts)
    T = m.binary_questions(texts)
    ids = m.tok(texts, truncation=True, max_length=m.s["q_max_len"])["input_ids"]
    for i, row in enumerate(ids):
        lexical = {t for t in row if t >= m.skip}
        cols = set(E[i].indices.tolist())
        assert lexical <= cols                                   # activate_lexical: input tokens are on
        assert len(cols) <= m.s["topk"] + len(lexical)          # top-k ∪ lexical
        assert min(cols) >= m.skip                               # special / unused ids are never dimensions
        assert set(T[i].indices.tolist()) == lexical and np.all(T[i].data == 1.0)
        assert np.all(E[i].data > 0)                             # elu1p > 0
    assert E.shape == (2, len(m.tok)) and m.skip == 999


def test_round_trip_gives_identical_vectors(trained):
    _, out, _ = trained
    a = vdr.VDRModel.load(out).encode_questions(["What year was Belmorholt founded?"])
    b = vdr.VDRModel.load(out).encode_questions(["What year was Belmorholt founded?"])
    assert (a != b).nnz == 0


# ---------------------------------------------------------------- loss
def test_contrastive_loss_is_both_directions_over_the_batch():
    g = torch.Generator().manual_seed(1)
    q = torch.rand(3, 6, generator=g)
    p = torch.rand(5, 6, generator=g)  # 3 positives then 2 negatives
    s = q @ p.T
    q2p = -torch.log_softmax(s, 1)[range(3), range(3)].mean()
    p2q = -torch.log_softmax(s[:, :3].T, 1)[range(3), range(3)].mean()
    torch.testing.assert_close(vdr.contrastive(q, p), q2p + p2q)


def test_svdr_loss_adds_the_semi_parametric_terms():
    g = torch.Generator().manual_seed(2)
    eq, ep = torch.rand(2, 8, generator=g), torch.rand(4, 8, generator=g)
    qm, pm = torch.rand(2, 8, generator=g) > 0.3, torch.rand(4, 8, generator=g) > 0.3
    tq, tp = (torch.rand(2, 8, generator=g) > 0.5).float(), (torch.rand(4, 8, generator=g) > 0.5).float()
    base = {"loss": "paper", "temperature": 1.0}
    lp = vdr.contrastive(eq * qm, ep * pm)
    lsp = (vdr.contrastive(eq * qm, tp) + vdr.contrastive(tq, ep * pm)) / 2
    torch.testing.assert_close(vdr.svdr_loss({**base, "sp_loss": True}, eq, ep, qm, pm, tq, tp), lp + lsp)
    torch.testing.assert_close(vdr.svdr_loss({**base, "sp_loss": False}, eq, ep, qm, pm, tq, tp), lp)
    code = vdr.svdr_loss({**base, "loss": "code-mean4", "sp_loss": True}, eq, ep, qm, pm, tq, tp)
    want = (vdr.contrastive(eq * qm, ep) + vdr.contrastive(eq, ep * pm) + vdr.contrastive(tq, ep)
            + vdr.contrastive(eq, tp)) / 4
    torch.testing.assert_close(code, want)


# ---------------------------------------------------------------- training
def test_training_runs_uses_retrieved_negatives_and_moves_the_loss(trained):
    _, out, info = trained
    assert info["steps"] == 2 * 6 and info["examples"] == 48
    assert info["retrieval_from_step"] == 6
    r = info["in_training_retrieval"]
    assert r["batches"] == 6 and r["retrieved"] + r["padded_random"] == 6 * 8 and r["top_m"] == 20
    assert np.mean(info["loss_last"]) < np.mean(info["loss_first"])
    assert (out / vdr.MODEL_SETTINGS).exists() and (out / "question_encoder").is_dir() and (out / "passage_encoder").is_dir()


def test_token_index_is_built_once_during_training(smoke, monkeypatch, tmp_path):
    from harness.indexes.token_csr import BinaryTokenIndex

    _, cfg, _ = smoke
    cfg = {**cfg, "methods": {**cfg["methods"], "svdr": {**cfg["methods"]["svdr"], "epochs": 1,
                                                          "max_train_questions": 32, "retrieval_start": 0.0}}}
    built, searched = [], []
    orig_build, orig_search = BinaryTokenIndex.from_token_ids.__func__, BinaryTokenIndex.search

    def counting_build(cls, *a, **k):
        idx = orig_build(cls, *a, **k)
        built.append(id(idx))
        return idx

    def counting_search(self, *a, **k):
        searched.append(id(self))
        return orig_search(self, *a, **k)

    monkeypatch.setattr(BinaryTokenIndex, "from_token_ids", classmethod(counting_build))
    monkeypatch.setattr(BinaryTokenIndex, "search", counting_search)
    ctx = Context(cfg, "svdr", "smoke")
    out = tmp_path / "m"
    out.mkdir()
    info = vdr.train(ctx, out, None)
    assert len(built) == 1                       # no rebuild during training
    assert len(searched) == info["steps"] == 4   # one beta search per batch, all on that one object
    assert set(searched) == set(built)


def test_negative_retriever_drops_answers_gold_and_positives_and_pads():
    from harness.indexes.token_csr import BinaryTokenIndex

    texts = {"d0": "the mayor is greta", "d1": "bridges of stone", "d2": "greta again", "d3": "rivers"}
    docs = {k: Doc(k, "", t) for k, t in texts.items()}
    ids = ["d0", "d1", "d2", "d3"]
    index = BinaryTokenIndex.from_token_ids([[1, 2], [1, 3], [1, 2, 4], [5]], vocab_size=8)
    r = vdr.NegativeRetriever(index, ids, docs, "dpr-string", top_m=3, rng=random.Random(0))
    q = np.zeros((1, 8), np.float32)
    q[0, [1, 2]] = 1.0
    q_all = Query("q", "who is mayor", ["greta"], ["d0"])
    for _ in range(20):   # top 3 = d0 (gold), d2 (answer), d1: only d1 is a negative
        assert r.negatives(q, [q_all], exclude=set()) == ["d1"]
    assert r.negatives(q, [q_all], exclude={"d1"}) != ["d1"]  # nothing left: a random passage
    assert r.padded == 1 and r.retrieved == 20


# ---------------------------------------------------------------- indexes and search
def test_token_index_beta_search_is_exact(trained):
    ctx, out, _ = trained
    docs = list(store.iter_corpus(ctx.data_dir()))
    m = vdr.VDRModel.load(out)
    index = vdr.build_token_index(m.tok, docs, m.s["p_max_len"], m.skip)
    T = index.to_scipy_csr()
    assert T.shape == (122, len(m.tok)) and T[:, : m.skip].nnz == 0
    Q = m.encode_questions(["Who is the mayor of Belmorholt?", "How long is the river?", "When was it founded?"])
    exact = (Q @ T.T).toarray()
    scores, rows = index.search(Q, 10)
    for i in range(3):
        np.testing.assert_allclose(scores[i], np.sort(exact[i])[::-1][:10], rtol=1e-5)
        np.testing.assert_allclose(exact[i, rows[i]], scores[i], rtol=1e-5)


def test_embedding_index_full_and_alpha_are_exact(trained, tmp_path):
    ctx, out, _ = trained
    info = vdr.build_emb(ctx, _job("index", "svdr.emb"), {"data": ctx.data_dir(), "model": out}, tmp_path)
    assert info["spec"] == "sparse-csr" and info["documents"] == 122 and info["build_seconds"] > 0
    emb = vdr.SparseEmbeddingIndex.load(tmp_path)
    m = vdr.VDRModel.load(out)
    E = emb.matrix
    assert E.getnnz(axis=1).max() <= m.s["topk"] + m.s["p_max_len"]
    for Q in (m.encode_questions(["Who is the mayor?", "river length"]), m.binary_questions(["who is the mayor?"])):
        exact = (Q @ E.T).toarray()
        scores, rows = emb.search(Q, 7)
        for i in range(Q.shape[0]):
            order = np.lexsort((np.arange(122), -exact[i]))[:7]   # score desc, ties by lower row
            np.testing.assert_array_equal(rows[i], order)
            np.testing.assert_allclose(scores[i], exact[i, order], rtol=1e-5)


def test_topk_rows_ties_and_padding():
    s, i = vdr.topk_rows(np.array([[1.0, 3.0, 3.0, 0.0]]), 3)
    assert i.tolist() == [[1, 2, 0]] and s.tolist() == [[3.0, 3.0, 1.0]]
    s, i = vdr.topk_rows(np.array([[1.0, 2.0]]), 4)
    assert i.tolist() == [[1, 0, -1, -1]] and np.isinf(s[0, 2:]).all()


def _job(stage, id_, **kw):
    from harness.job import Job

    return Job(stage, id_, "svdr", "", "smoke", **kw)


def test_search_job_writes_every_variant_from_one_load(trained, tmp_path):
    from harness.runs import read_run

    ctx, out, _ = trained
    for d in ("t", "e", "runs"):
        (tmp_path / d).mkdir()
    vdr.build_token(ctx, _job("index", "svdr.token"), {"data": ctx.data_dir()}, tmp_path / "t")
    vdr.build_emb(ctx, _job("index", "svdr.emb"), {"data": ctx.data_dir(), "model": out}, tmp_path / "e")
    job = _job("search", "svdr", params={"depths": [5]},
               systems=("svdr.full", "svdr.alpha", "svdr.beta", "svdr.beta-m5"))
    vdr.run_search(ctx, job, {"data": ctx.data_dir(), "model": out, "token_index": tmp_path / "t",
                              "emb_index": tmp_path / "e"}, tmp_path / "runs")
    n = len(store.read_queries(ctx.data_dir(), "test"))
    for system in job.systems:
        run = read_run(tmp_path / "runs" / f"{system}.trec")
        assert len(run) == n, system
        for h in run.values():
            assert [s for _, s in h] == sorted((s for _, s in h), reverse=True)
    beta, m5 = read_run(tmp_path / "runs" / "svdr.beta.trec"), read_run(tmp_path / "runs" / "svdr.beta-m5.trec")
    for q in beta:  # re-ranking m = 5 only permutes the top 5
        assert {d for d, _ in beta[q][:5]} == {d for d, _ in m5[q][:5]}
        assert [d for d, _ in beta[q][5:]] == [d for d, _ in m5[q][5:]]
    # the job re-scores with E_θ(p) from the embedding index: the order embedding the passages on the fly gives
    enc = vdr.VDRModel.load(out)
    docs = {d.id: d for d in store.iter_corpus(ctx.data_dir())}
    queries = store.read_queries(ctx.data_dir(), "test")
    fly = rerank(beta, queries, [5], docs, enc.encode_questions, enc.encode_passages)[5]
    assert {q: [d for d, _ in h] for q, h in fly.items()} == {q: [d for d, _ in h] for q, h in m5.items()}


def test_beta_alone_needs_no_embedding_index(trained, tmp_path):
    """``searches: [beta]`` (the ci overlay's VDR): the search job has no E(D) input and writes the
    beta run the three-search job writes; a re-rank without beta is refused when the plan is made."""
    import copy

    from harness.methods.vdr.jobs import search_job

    ctx, out, _ = trained
    cfg = copy.deepcopy(ctx.cfg)
    cfg["methods"]["vdr"].update(searches=["beta"], rerank_depths=[])
    job = search_job(cfg, "vdr", "smoke")
    assert job.systems == ("vdr.beta",) and "emb_index" not in job.inputs
    assert "emb_index" in search_job(ctx.cfg, "vdr", "smoke").inputs
    cfg["methods"]["vdr"].update(searches=["full"], rerank_depths=[20])
    with pytest.raises(ConfigError, match="rerank_depths"):
        search_job(cfg, "vdr", "smoke")
    for d in ("t", "e", "all", "beta"):
        (tmp_path / d).mkdir()
    vdr.build_token(ctx, _job("index", "svdr.token"), {"data": ctx.data_dir()}, tmp_path / "t")
    vdr.build_emb(ctx, _job("index", "svdr.emb"), {"data": ctx.data_dir(), "model": out}, tmp_path / "e")
    inputs = {"data": ctx.data_dir(), "model": out, "token_index": tmp_path / "t"}
    vdr.run_search(ctx, _job("search", "svdr", params={"depths": []}, systems=("svdr.full", "svdr.alpha", "svdr.beta")),
                   {**inputs, "emb_index": tmp_path / "e"}, tmp_path / "all")
    vdr.run_search(ctx, _job("search", "svdr", params={"depths": []}, systems=("svdr.beta",)), inputs, tmp_path / "beta")
    assert sorted(p.name for p in (tmp_path / "beta").glob("*.trec")) == ["svdr.beta.trec"]
    assert (tmp_path / "beta" / "svdr.beta.trec").read_text() == (tmp_path / "all" / "svdr.beta.trec").read_text()


# ---------------------------------------------------------------- re-ranking
def test_rerank_reorders_only_the_top_m():
    docs = {f"d{i}": Doc(f"d{i}", "", f"text {i}") for i in range(6)}
    run = {"q": [(f"d{i}", 10.0 - i) for i in range(6)]}
    P = np.eye(6, dtype=np.float32)
    Q = np.array([[0, 1, 5, 2, 9, 0]], np.float32)  # re-ranking scores: d4 > d2 > d3 > d1 > d0 = d5

    res = rerank(run, [Query("q", "x")], [3, 6], docs, lambda t: Q, lambda ds: P[[int(d.id[1:]) for d in ds]])
    assert [d for d, _ in res[3]["q"]] == ["d2", "d1", "d0", "d3", "d4", "d5"]
    assert [d for d, _ in res[6]["q"]] == ["d4", "d2", "d3", "d1", "d0", "d5"]   # tie d0/d5 keeps first-stage order
    assert [s for _, s in res[3]["q"]] == sorted((s for _, s in res[3]["q"]), reverse=True)


# ---------------------------------------------------------------- config
def test_ablation_reuse_and_settings():
    cfg = load_config()
    cfg["methods"]["svdr"]["variant_overrides"] = {}
    assert vdr.model_id(cfg, "svdr", "ref") == "svdr"
    assert vdr.model_id(cfg, "svdr", "nosp") == "vdr"
    assert vdr.model_id(cfg, "svdr", "m1") == "svdr.abl-m1"
    s = vdr.settings(cfg["methods"]["svdr"], "noneg")
    assert s["hard_negatives"] == 0 and s["batch_size"] == 2 * cfg["methods"]["svdr"]["batch_size"]
    cfg["methods"]["svdr"]["variant_overrides"] = {"epochs": 1}
    assert vdr.model_id(cfg, "svdr", "ref") == "svdr.abl-ref"
    cfg["methods"]["svdr"]["variants"]["ref-again"] = {}          # trains as ref, declared after it: reads ref's model
    cfg["methods"]["svdr"]["variants"]["m1-again"] = {"retrieval_top_m": 1}
    assert vdr.model_id(cfg, "svdr", "ref-again") == "svdr.abl-ref"
    assert vdr.model_id(cfg, "svdr", "m1-again") == "svdr.abl-m1"
    assert vdr.model_id(cfg, "svdr", "m1") == "svdr.abl-m1"         # the first of equals keeps its own
    with pytest.raises(ConfigError, match="did you mean 'm100'"):
        vdr.settings(cfg["methods"]["svdr"], "m10", "svdr")


def test_vdr_is_svdr_without_sp_loss_in_every_profile(repo):
    for prof in (None, "small", "paper"):
        cfg = load_config([repo / "configs" / "profiles" / f"{prof}.yaml"] if prof else [])
        s, v = (vdr.train_signature(vdr.settings(cfg["methods"][m], None, m)) for m in ("svdr", "vdr"))
        assert s.pop("sp_loss") is True and v.pop("sp_loss") is False
        assert s == v, prof


# ---------------------------------------------------------------- metrics in tables and claims
def test_metrics_not_run_reason_and_device_in_rendered_table(tmp_path):
    from harness import claims
    from harness.measured import locate
    from harness.tables import render
    from harness.tables.matrix import load_matrix

    cfg = load_config([], overrides={"results_dir": str(tmp_path / "results")})

    def metrics_path(system):
        return locate(cfg, system, "smoke", "metric:x")[0][0]

    for system in load_matrix("svdr")["tables"]["2"]["systems"].values():   # the other rows: nothing measured
        metrics_path(system).parent.mkdir(parents=True, exist_ok=True)
        metrics_path(system).write_text(json.dumps({"values": {}}))
    path = metrics_path("svdr.lat-beta")
    path.write_text(json.dumps({"values": {"T_D": {"value": 36.0, "unit": "s", "device": "cpu"},
                                           "f_cpu": {"value": 2.0, "unit": "s", "device": "cpu", "kind": "projected"}},
                                "not_run": {"f_cuda": "timing.device is cpu"}}))
    tinfo, cells = render.fill(cfg, "svdr", "2")
    cell = {(c.row, c.column): c for c in cells}
    assert cell[("SVDR_β", "T(D)")].measured == pytest.approx(0.01) and cell[("SVDR_β", "T(D)")].device == "cpu"
    assert cell[("SVDR_β", "f(q,D)")].reason == "timing.device is cpu"
    assert cell[("SVDR_β", "f(q,D) CPU")].status == "projected"
    md = render.to_markdown(cfg, "svdr", "2", tinfo, cells)
    assert "**0.01** (cpu)" in md and "timing.device is cpu" in md
    assert "projected*" in md and "**0.00** (cpu)" not in md   # a projected figure never renders as measured
    idx = metrics_path("svdr.index")
    idx.parent.mkdir(parents=True, exist_ok=True)
    idx.write_text(json.dumps({"values": {"token_index_bytes": {"value": 1.0, "unit": "KB"},
                                          "emb_index_bytes": {"value": 9000.0, "unit": "B"}}}))
    claim = {"id": "x", "paper": "svdr", "statement": "s", "op": "<=", "factor": 0.2,
             "lhs": {"system": "svdr.index", "dataset": "NQ", "measure": "metric:token_index_bytes"},
             "rhs": {"system": "svdr.index", "dataset": "NQ", "measure": "metric:emb_index_bytes"}}
    assert claims.evaluate(cfg, claim)["holds"] == "true"        # 1000 B <= 0.2 x 9000 B
    assert claims.evaluate(cfg, {**claim, "factor": 0.1})["holds"] == "false"
    assert str(idx.parent) in claims.required_inputs(cfg)   # the measure job's folder is the rule output


def test_binary_csr_drops_special_ids():
    m = vdr.binary_csr([[101, 5, 1500, 1500, 2000], []], skip=999, vocab=3000)
    assert m.shape == (2, 3000) and m[0].indices.tolist() == [1500, 2000] and m[1].nnz == 0
    assert sp.isspmatrix_csr(m)


def test_cli_reports_an_unknown_job_in_one_line(tmp_path, capsys, monkeypatch):
    from harness import numerics
    from harness.cli import main

    for k, v in numerics.PORTABLE_ENV.items():  # this process loaded torch already: as if started portable
        monkeypatch.setenv(k, v)
    rc = main(["train", "--job", "svdr.abl-m10", "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: no train job 'svdr.abl-m10'") and "did you mean 'svdr.abl-m100'" in err
    assert not (tmp_path / "m").exists()
