"""The scale overlay (configs/profiles/scale.yaml): synthetic payloads with the papers' shapes, the
SVDR / BPR measure jobs on them, and the tables they fill. Never at 21M, never asserting speed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.config import REPO, load_config, results_root
from harness.datasets import synthetic as syn
from harness.indexes.token_csr import BinaryTokenIndex
from harness.methods.vdr.scale import token_index

SCALE = REPO / "configs" / "profiles" / "scale.yaml"


def _df(index: BinaryTokenIndex) -> np.ndarray:
    """Passages per token id, summed over the index's blocks."""
    return np.diff(index.indptr, axis=1).sum(axis=0) / index.n_docs


def test_committed_fit_names_its_source():
    fit = syn.load_fit()
    assert 0.5 < fit["slope"] < 2.0
    assert fit["source"]["file"].endswith("scifact/corpus.jsonl.gz") and len(fit["source"]["sha256"]) == 64
    assert "WordPiece" in fit["source"]["tokenizer"]


def test_df_curve_sums_to_tokens_per_passage_and_is_zipf():
    p = syn.df_curve(syn.VOCAB, syn.DENSITY * syn.VOCAB, 1.0)
    assert p.sum() == pytest.approx(syn.DENSITY * syn.VOCAB, rel=1e-6)
    assert np.all(np.diff(p) <= 0) and p.max() <= 1.0
    assert syn.fitted_slope(p) == pytest.approx(1.0, abs=0.02)        # a pure power law below the cap
    assert syn.fitted_slope(syn.df_curve(syn.VOCAB, 86.0, 0.7)) == pytest.approx(0.7, abs=0.02)


def test_token_index_has_the_target_density_and_slope():
    rng = np.random.default_rng(7)
    slope = syn.load_fit()["slope"]
    p = syn.token_probabilities(syn.VOCAB, syn.DENSITY, slope, rng)
    n = syn.BLOCK + 4_464                                   # two blocks, the last one partial
    index, secs = token_index(n, syn.VOCAB, p, rng)
    assert index.n_docs == n and index.n_blocks == 2 and secs["build"] > 0
    density = index.nnz / (n * syn.VOCAB)
    assert density == pytest.approx(syn.DENSITY, rel=0.02)   # ~86 distinct tokens per passage
    df = _df(index)
    assert np.abs(df - p).max() < 0.02                      # each token's frequency is its target
    assert syn.fitted_slope(df, 10, 2000) == pytest.approx(slope, abs=0.1)   # Zipf-like, not uniform
    assert syn.fitted_slope(df, 10, 2000) > 0.5


def test_token_index_equals_the_index_built_from_token_ids():
    """The block-by-block assembly gives exactly BinaryTokenIndex.from_token_ids of the same passages."""
    vocab = 600
    p = syn.token_probabilities(vocab, 0.02, 1.0, np.random.default_rng(1))
    n = syn.BLOCK + 1_000
    index, _ = token_index(n, vocab, p, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    docs: list[list[int]] = []
    for b in range(2):
        nb = min(syn.BLOCK, n - b * syn.BLOCK)
        keys = syn.token_block(nb, p, rng)
        tok, local = (keys >> 16).astype(np.int64), (keys & 0xFFFF).astype(np.int64)
        order = np.argsort(local, kind="stable")
        cuts = np.searchsorted(local[order], np.arange(nb + 1))
        docs += [tok[order[cuts[i]:cuts[i + 1]]].tolist() for i in range(nb)]
    ref = BinaryTokenIndex.from_token_ids(docs, vocab)
    np.testing.assert_array_equal(index.indptr, ref.indptr)
    np.testing.assert_array_equal(index.postings, ref.postings)


def test_payloads_are_seeded():
    def build(seed):
        rng = np.random.default_rng(seed)
        p = syn.token_probabilities(2_000, 0.01, 1.0, rng)
        index, _ = token_index(5_000, 2_000, p, rng)
        return index, syn.sparse_queries(4, 2_000, 50, p, rng), syn.codes(100, 768, rng)

    (a, qa, ca), (b, qb, cb), (c, _, cc) = build(5), build(5), build(6)
    np.testing.assert_array_equal(a.postings, b.postings)
    np.testing.assert_array_equal(qa.toarray(), qb.toarray())
    np.testing.assert_array_equal(ca, cb)
    assert a.nnz != c.nnz or not np.array_equal(a.postings, c.postings)
    assert not np.array_equal(ca, cc)


def test_queries_have_768_active_dims_drawn_by_frequency():
    rng = np.random.default_rng(0)
    p = syn.token_probabilities(syn.VOCAB, syn.DENSITY, 1.0, rng)
    q = syn.sparse_queries(8, syn.VOCAB, 768, p, rng)
    assert q.shape == (8, syn.VOCAB) and np.all(np.diff(q.indptr) == 768)
    assert all(len(set(q.indices[q.indptr[i]:q.indptr[i + 1]])) == 768 for i in range(8))
    assert np.all(q.data > 0)
    # frequent tokens are active far more often than a uniform draw would make them
    top = np.argsort(-p)[:100]
    assert np.isin(q.indices, top).mean() > 10 * 100 / syn.VOCAB
    codes = syn.codes(10, 768, rng)
    assert codes.shape == (10, 96) and codes.dtype == np.uint8


def _tiny(tmp_path: Path) -> dict:
    return load_config([SCALE], overrides={
        "results_dir": str(tmp_path / "results"),
        "datasets": {"wiki21m-synth": {"passages": syn.BLOCK + 2_000}},
        "methods": {"svdr": {"scale": {"dense_fraction": 4_000, "emb_fraction": 300, "test_questions": 64}},
                    "bpr": {"scale": {"timing_queries": 2, "pq_train": 512,
                                      "fractions": {"flat": 4_000, "lsh": 4_000, "pq": 1_000, "hnsw": 300}}}}})


def test_scale_overlay_measures_and_renders(tmp_path, capsys):
    """A tiny passage count through the scale overlay: the measure jobs' files carry measured /
    projected marks and devices, the tables say "synthetic payload", effectiveness cells are not run."""
    from harness import plan as hplan
    from harness.methods import bpr, vdr
    from harness.methods.base import Context
    from harness.tables.render import fill, to_markdown

    cfg = _tiny(tmp_path)
    p = hplan.get(cfg)
    jobs = {j.id: j for j in p.jobs.values() if j.stage == "measure" and j.dataset == "wiki21m-synth"}
    assert set(jobs) == {"svdr.scale", "bpr.scale"}
    R = results_root(cfg) / "metrics" / "wiki21m-synth"
    for job_id, run in (("svdr.scale", lambda out: vdr.scale_measure(Context(cfg, "svdr", "wiki21m-synth"), out)),
                        ("bpr.scale", lambda out: bpr.scale_efficiency(Context(cfg, "bpr", "wiki21m-synth"),
                                                                       "wiki21m-synth", out))):
        out = R / job_id
        out.mkdir(parents=True)
        run(out)
        assert {f"{s}.json" for s in jobs[job_id].systems} == {x.name for x in out.iterdir()}
    printed = capsys.readouterr().out
    assert "paper" in printed and ("meets" in printed or "misses" in printed)   # the benchmark's printout

    def values(job, system):
        return json.loads((R / job / f"{system}.json").read_text())

    beta = values("svdr.scale", "svdr.lat-beta")
    assert "kind" not in beta["values"]["T_D"] and beta["values"]["T_D"]["device"] == "cpu"
    assert beta["values"]["f_cpu"]["kind"] == "projected"             # 1 timed batch x the test set's 2
    assert beta["not_run"]["f_cuda"].startswith("not run: no GPU in this run")
    assert beta["passages"] == syn.BLOCK + 2_000 and "synthetic payload" in beta["payload"]
    tok = values("svdr.scale", "svdr.index-token")["values"]
    assert tok["index_density"]["value"] == pytest.approx(0.0029, rel=0.05) and "kind" not in tok["index_bytes"]
    assert values("svdr.scale", "svdr.intrain-dpr")["values"]["storage_bytes"]["kind"] == "projected"
    assert values("svdr.scale", "svdr.index-emb")["values"]["index_bytes"]["kind"] == "projected"
    flat, bflat = values("bpr.scale", "dpr"), values("bpr.scale", "bpr.bflat")
    assert flat["values"]["index_bytes"]["kind"] == "projected" and flat["indexed_passages"] == 4_000
    assert flat["values"]["index_bytes"]["value"] == pytest.approx((syn.BLOCK + 2_000) * 768 * 4, rel=0.01)
    assert "kind" not in bflat["values"]["index_bytes"]                # BPR's codes: indexed whole
    assert bflat["values"]["index_bytes"]["value"] >= (syn.BLOCK + 2_000) * 96
    assert bflat["not_run"]["em"].startswith("not run") and "dpr_over_bflat_bytes" in bflat["ratios"]
    assert bflat["not_run"]["query_ms_cuda"].startswith("not run: no GPU in this run")

    for paper, table in (("svdr", "2"), ("svdr", "3"), ("bpr", "1")):
        tinfo, cells = fill(cfg, paper, table)
        md = to_markdown(cfg, paper, table, tinfo, cells)
        assert "synthetic payload" in md
        measured = [c for c in cells if c.kind == "measured"]
        assert measured and all(c.dataset == "wiki21m-synth" for c in measured)
        if paper == "bpr":
            eff = [c for c in cells if c.column in ("NQ top1", "NQ top20", "NQ EM", "TQA EM")]
            assert eff and all(c.kind == "not run" for c in eff)              # never from synthetic data
            proj = {c.row: c.projected for c in measured if c.column == "Index size"}
            assert proj["DPR"] and not proj["BPR (linear scan; l=1000)"]
    tinfo, cells = fill(cfg, "svdr", "2")
    cell = next(c for c in cells if c.row == "SVDR_β" and c.column == "f(q,D)")
    assert cell.kind == "not run" and cell.reason.startswith("not run: no GPU in this run")


def test_scale_dry_run(repo, tmp_path):
    r = subprocess.run([sys.executable, "-m", "snakemake", "--nolock", "-n", "svdr_table2", "svdr_table3", "bpr_table1",
                        "--configfile", str(SCALE), "--config", f"results_dir={tmp_path}"],
                       cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert f"{tmp_path}/scale/metrics/wiki21m-synth/svdr.scale" in out
    assert f"{tmp_path}/scale/metrics/wiki21m-synth/bpr.scale" in out
    assert "rule train:" not in out and "rule index:" not in out      # no model, no real index
