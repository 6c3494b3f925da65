"""BPR: the loss, the hash-layer schedule, settings/variants, training on the smoke fixture, the
binary index and two-stage search against exact search, DPR baselines, efficiency and metrics files."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.config import load_config
from harness.datasets import store
from harness.errors import ConfigError, DataError
from harness.indexes.faiss_binary import binarize, unpack_pm1
from harness.methods import bpr, dpr
from harness.methods.base import Context


# --------------------------------------------------------------------------------------------
# the loss and the schedule (no model)


def test_beta_schedule():
    assert bpr.beta(0.1, 0) == 1.0
    assert bpr.beta(0.1, 10) == pytest.approx(math.sqrt(2.0))
    assert bpr.beta(0.0, 1000) == 1.0


def _manual_loss(eq, ep, step, gamma, margin, reduction, cand_loss="ranking"):
    b = math.sqrt(gamma * step + 1)
    hq, hp = np.tanh(b * eq), np.tanh(b * ep)
    n = eq.shape[0]
    dense = eq @ hp.T
    rerank = np.mean([-dense[i, i] + np.log(np.exp(dense[i]).sum()) for i in range(n)])
    s = hq @ hp.T
    if cand_loss == "ce":
        cand = np.mean([-s[i, i] + np.log(np.exp(s[i]).sum()) for i in range(n)])
    else:
        hinge = np.array([[max(0.0, margin - (s[i, i] - s[i, j])) for j in range(s.shape[1]) if j != i] for i in range(n)])
        cand = hinge.sum(1).mean() if reduction == "sum" else hinge.mean()
    return cand + rerank, cand, rerank


@pytest.mark.parametrize("reduction,cand_loss", [("sum", "ranking"), ("mean", "ranking"), ("sum", "ce")])
def test_bpr_loss_matches_the_equations(reduction, cand_loss):
    rng = np.random.default_rng(0)
    eq = rng.normal(size=(3, 8)).astype(np.float32)
    ep = rng.normal(size=(6, 8)).astype(np.float32)  # 3 positives then 3 hard negatives
    loss, parts = bpr.bpr_loss(torch.tensor(eq), torch.tensor(ep), 7, gamma=0.1, cand_loss=cand_loss, margin=2.0,
                               reduction=reduction)
    want, cand, rerank = _manual_loss(eq.astype(np.float64), ep.astype(np.float64), 7, 0.1, 2.0, reduction, cand_loss)
    assert float(loss) == pytest.approx(want, rel=1e-4)
    assert parts["cand"] == pytest.approx(cand, rel=1e-4)
    assert parts["rerank"] == pytest.approx(rerank, rel=1e-4)
    assert parts["beta"] == pytest.approx(math.sqrt(1.7))


def test_bpr_loss_gradients_reach_both_encoders():
    eq = torch.randn(4, 8, requires_grad=True)
    ep = torch.randn(8, 8, requires_grad=True)
    loss, _ = bpr.bpr_loss(eq, ep, 0, gamma=0.1)
    loss.backward()
    assert eq.grad.abs().sum() > 0 and ep.grad.abs().sum() > 0


def test_ranking_loss_is_zero_when_margins_hold():
    eq = torch.eye(3) * 50
    ep = torch.eye(3) * 50  # h~ = ±1-ish: positives score 1, negatives 0 -> margin 0.5 holds
    _, parts = bpr.bpr_loss(eq, ep, 0, gamma=0.1, margin=0.5)
    assert parts["cand"] == pytest.approx(0.0, abs=1e-6)


# --------------------------------------------------------------------------------------------
# settings and variants


def test_settings_variants_and_model_sources():
    cfg = load_config([])
    assert bpr.search_variants(cfg)[:4] == ["bflat", "bhash", "no-rerank", "no-cand"]
    assert "l1000" in bpr.search_variants(cfg)
    s = bpr.settings(cfg, "g0025")
    assert s["gamma"] == 0.025 and s["max_train_questions"] == cfg["methods"]["bpr"]["variant_overrides"]["max_train_questions"]
    assert bpr.train_hash(cfg, "g0025") != bpr.train_hash(cfg, "g005")
    assert bpr.train_hash(cfg, "ref") == bpr.train_hash(cfg, "ref")
    with pytest.raises(ConfigError, match="unknown BPR train variant"):
        bpr.settings(cfg, "nope")
    # ref equals the main model once the variants run at the main model's scale
    main = cfg["methods"]["bpr"]
    cfg2 = load_config([], overrides={"methods": {"bpr": {"variant_overrides": {
        "max_train_questions": main["max_train_questions"], "epochs": main["epochs"]}}}})
    assert bpr.model_source(cfg2, "ref") == "bpr"
    assert bpr.model_source(cfg2, "g02") == "bpr-variant/g02"
    assert bpr.model_source(cfg, "ref") == "bpr-variant/ref"


def test_efficiency_systems_and_baseline_specs():
    cfg = load_config([])
    assert bpr.efficiency_systems(cfg) == ["dpr", "dpr.hnsw", "dpr.lsh", "dpr.pq", "bpr.bflat", "bpr.bhash",
                                           "bpr.no-rerank", "bpr.no-cand"]
    bad = load_config([], overrides={"methods": {"bpr": {"dpr_baselines": {"x": "faiss-binary:BFlat"}}}})
    with pytest.raises(ConfigError, match="faiss:<factory>"):
        bpr.dpr_baselines(bad)


def test_variant_search_settings():
    cfg = load_config([])
    assert bpr._variant_search(cfg, "bflat") == ("flat", True, 1000)
    assert bpr._variant_search(cfg, "no-rerank") == ("hash", False, 1000)
    assert bpr._variant_search(cfg, "no-cand") == (None, True, None)
    assert bpr._variant_search(cfg, "l200") == ("flat", True, 200)
    with pytest.raises(ConfigError):
        bpr._variant_search(cfg, "bogus")


def test_bad_loss_setting_is_refused():
    with pytest.raises(ConfigError, match="cand_loss"):
        bpr._check({**bpr.DEFAULTS, "cand_loss": "hinge"})


# --------------------------------------------------------------------------------------------
# a tiny trained model on the smoke fixture


@pytest.fixture(scope="module")
def trained(tmp_path_factory, smoke_context, train_on_smoke):
    root = tmp_path_factory.mktemp("bpr")
    ctx = smoke_context(root, "bpr", {"epochs": 2, "batch_size": 8, "p_max_len": 64})
    model, info = train_on_smoke(ctx, root)  # no BM25 negatives: random passages stand in
    index = root / "index"
    index.mkdir()
    iinfo = bpr.build_index(ctx, index, model)
    return ctx, model, index, info, iinfo, root


def test_training_reduces_loss_and_grows_beta(trained):
    _, _, _, info, _, _ = trained
    assert info["steps"] == 2 * -(-187 // 8)
    assert np.mean(info["loss_last"]) < np.mean(info["loss_first"])
    assert info["beta_last"] == pytest.approx(math.sqrt(0.1 * (info["steps"] - 1) + 1))


def test_index_holds_the_signs_of_the_passage_embeddings(trained):
    ctx, model, index, _, iinfo, _ = trained
    assert iinfo["spec"] == "faiss-binary:BFlat" and iinfo["documents"] == 122 and iinfo["code_bytes"] == 16
    docs = list(store.iter_corpus(ctx.data_dir()))
    P = dpr.BiEncoder.load(ctx, model).encode_passages([d.title for d in docs], [d.text for d in docs])
    # the rerank's codes are the ones the linear scan holds: no second copy beside it (BPR Table 1's size)
    assert not (index / bpr.CODES_FILE).exists()
    np.testing.assert_array_equal(bpr.read_codes(index), binarize(P))
    assert (index / bpr.DOCIDS_FILE).read_text().split() == [d.id for d in docs]


def test_an_index_that_does_not_keep_the_codes_in_row_order_writes_them_beside_it(trained, tmp_path):
    """A hash spec as the main index: its buckets hold the codes out of row order, so the rerank's codes
    go to codes.npy, which read_codes prefers."""
    ctx, model, _, _, _, _ = trained
    c = {**ctx.cfg, "methods": {**ctx.cfg["methods"], "bpr": {**ctx.mcfg, "index": "faiss-binary:BHash16x8"}}}
    hctx = Context(c, "bpr", "smoke")
    out = tmp_path / "hash-main"
    out.mkdir()
    bpr.build_index(hctx, out, model)
    flat = tmp_path / "flat"
    flat.mkdir()
    bpr.build_index(ctx, flat, model)
    np.testing.assert_array_equal(np.load(out / bpr.CODES_FILE), bpr.read_codes(flat))
    np.testing.assert_array_equal(bpr.read_codes(out), bpr.read_codes(flat))
    (out / bpr.CODES_FILE).unlink()
    with pytest.raises(DataError, match="without codes.npy"):
        bpr.read_codes(out)


def test_strip_question_mark_is_on_for_bpr(trained):
    ctx, _, _, _, _, _ = trained
    assert dpr.prepare_question(ctx, "Who built it?") == "Who built it"


def _questions(ctx):
    return [q.text for q in store.read_queries(ctx.data_dir(), "test")[:12]]


def test_two_stage_search_against_exact(trained, tmp_path):
    ctx, model, index, _, _, _ = trained
    s = bpr.Searcher(ctx, index, model)
    Q = s.encode(_questions(ctx))
    codes = bpr.read_codes(index)
    # the linear scan's searcher reranks with the codes its index holds (a read-only view, no copy)
    np.testing.assert_array_equal(s.codes, codes)
    assert not s.codes.flags.writeable and not s.codes.flags.owndata
    exact = Q @ unpack_pm1(codes).T                      # <e_q, ±1 code> over every passage
    hamming = np.array([[np.unpackbits(np.bitwise_xor(c, p)).sum() for p in codes] for c in binarize(Q)])
    # no candidate generation = exact rerank of every passage
    sc, rows = bpr.Searcher(ctx, index, None, variant="no-cand").search(Q, 10)
    for i in range(len(Q)):
        np.testing.assert_allclose(sc[i], np.sort(exact[i])[::-1][:10], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(exact[i, rows[i]], sc[i], rtol=1e-4, atol=1e-4)
    # l >= corpus size: the linear scan's candidates are every passage, so the same top-k scores
    sc2, _ = bpr.Searcher(ctx, index, None, variant="bflat").search(Q, 10)
    np.testing.assert_allclose(sc2, sc, rtol=1e-4, atol=1e-4)
    # l = 5: every result is among the 5 nearest codes by Hamming distance (ties allowed)
    cfg5 = {**ctx.cfg, "methods": {**ctx.cfg["methods"], "bpr": {**ctx.mcfg, "n_candidates": 5}}}
    _, rows5 = bpr.Searcher(Context(cfg5, "bpr", "smoke"), index, None, variant="bflat").search(Q, 10)
    assert rows5.shape[1] == 5
    for i in range(len(Q)):
        fifth = np.sort(hamming[i])[4]
        assert all(hamming[i, r] <= fifth for r in rows5[i])


def test_no_rerank_is_hamming_order(trained, tmp_path):
    ctx, model, index, _, _, _ = trained
    hdir = tmp_path / "hash"
    hdir.mkdir()
    info = bpr.build_binary_index("faiss-binary:BHash16x8", index, hdir, nflip=1)
    assert info["documents"] == 122
    s = bpr.Searcher(ctx, index, model, variant="no-rerank", hash_dir=hdir)
    Q = s.encode(_questions(ctx))
    sc, rows = s.search(Q, 10)
    codes = bpr.read_codes(index)
    for i, c in enumerate(binarize(Q)):
        ham = np.array([np.unpackbits(np.bitwise_xor(c, codes[r])).sum() for r in rows[i] if r >= 0])
        np.testing.assert_array_equal(-sc[i][rows[i] >= 0], ham)
        assert np.all(np.diff(ham) >= 0)


def test_dpr_baseline_reads_back_dpr_vectors(trained, tmp_path):
    ctx, model, _, _, _, root = trained
    # a stand-in "DPR" flat index: the BPR passage encoder's vectors in faiss:Flat
    dctx = Context({**ctx.cfg, "methods": {**ctx.cfg["methods"], "dpr": {**ctx.cfg["methods"]["dpr"], "p_max_len": 64}}},
                   "dpr", "smoke")
    flat = tmp_path / "flat"
    flat.mkdir()
    dpr.build_index(dctx, flat, model)
    out = tmp_path / "lsh"
    out.mkdir()
    info = bpr.build_dpr_baseline("faiss:LSH", flat, out)
    assert info["documents"] == 122 and (out / bpr.DOCIDS_FILE).exists()
    pq = tmp_path / "pq"
    pq.mkdir()
    assert bpr.build_dpr_baseline("faiss:PQ32x4np", flat, pq)["index_file_bytes"] > 122 * 16
    same = tmp_path / "same"
    same.mkdir()
    bpr.build_dpr_baseline("faiss:Flat", flat, same)
    from harness.indexes.faiss_dense import DenseFaissIndex

    Q = dpr.BiEncoder.load(dctx, model).encode_questions(_questions(ctx))
    a = DenseFaissIndex.load(flat, "Flat").search(Q, 10)
    b = DenseFaissIndex.load(same, "Flat").search(Q, 10)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5)
    with pytest.raises(ConfigError, match="must be faiss:Flat"):
        bpr.build_dpr_baseline("faiss:Flat", out, tmp_path / "x")


def test_time_per_question_calls_every_system(trained):
    ctx, model, index, _, _, _ = trained
    s = bpr.Searcher(ctx, index, model)
    Q = s.encode(_questions(ctx)[:3])
    out = bpr.time_per_question({"a": (s, Q, binarize(Q)), "b": (s, Q, None)}, 5, repeats=2)
    assert len(out["a"]) == len(out["b"]) == 6 and min(out["a"]) > 0
