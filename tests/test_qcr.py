"""QCR's own logic (harness/methods/qcr/): FSQ pre-rounding, Eq. 3, the entropy loss, GradCache,
rescoring through the distance matrix, code strings, batching, crops, the query generator."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from harness.errors import ConfigError, DataError
from harness.methods import qcr


def _fsq(levels=(5, 5, 5, 5, 5)):
    from vector_quantize_pytorch import FSQ

    return FSQ(levels=list(levels))


@pytest.mark.parametrize("levels", [(5, 5, 5, 5, 5), (8, 5, 5, 5), (3, 4)])
def test_prequant_rounds_to_fsqs_own_codes(levels):
    fsq = _fsq(levels)
    z = torch.randn(4, 7, len(levels)) * 3
    zhat, idx = fsq(z)
    pre = qcr.prequant(fsq, z)
    hw = (fsq._levels // 2).float()
    assert torch.allclose(torch.round(pre * hw) / hw, zhat, atol=1e-6)
    assert torch.equal(qcr.code_ids(fsq, pre), idx.long())
    assert int(idx.max()) < qcr.codebook_size(levels)


def test_late_interaction_equals_the_double_loop():
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(2, 3, 5, generator=g), torch.randn(4, 2, 5, generator=g)
    got = qcr.late_interaction(q, d)
    want = torch.zeros(2, 4)
    for i, j in itertools.product(range(2), range(4)):
        want[i, j] = sum(max(-torch.dist(q[i, a], d[j, b]).item() for b in range(2)) for a in range(3))
    assert torch.allclose(got, want, atol=1e-5)
    # identical codes score 0, the maximum
    assert qcr.late_interaction(q[:1], q[:1]).item() == pytest.approx(0.0, abs=1e-4)


def test_entropy_loss_is_the_entropy_of_the_nearest_codes_and_has_a_gradient():
    fsq = _fsq((3, 3))
    cb = fsq.implicit_codebook.float()
    z = (cb[[0, 0, 1, 2]] + 0.05).clone().requires_grad_()  # nearest codes 0, 0, 1, 2
    h, p = qcr.entropy_loss(z, cb)
    counts = np.array([2, 1, 1]) / 4
    assert h.item() == pytest.approx(float(-(counts * np.log(counts)).sum()), abs=1e-5)
    assert p.sum().item() == pytest.approx(1.0)
    h.backward()
    assert z.grad is not None and float(z.grad.abs().sum()) > 0  # straight-through: the softmax's gradient


def test_losses_in_chunks_equal_the_one_piece_losses_and_their_gradients(monkeypatch):
    """#28: past LOSS_CHUNK_ELEMENTS distances Eq. 3 and the entropy run in checkpointed row chunks;
    same values and gradients as one piece, and no piece holds more than the budget."""
    from harness.methods.qcr import model as qm

    fsq = _fsq()
    cb = fsq.implicit_codebook.float()
    g = torch.Generator().manual_seed(3)
    q0, d0 = torch.randn(6, 4, 5, generator=g) * 2, torch.randn(6, 3, 5, generator=g) * 2
    pieces = []
    # Eq. 3's chunks are the CUDA path's (the CPU's fused kernel needs none): its form, on CPU tensors
    monkeypatch.setattr(qm, "_fast_path", lambda x: True)
    li = qm._late_interaction_gpu
    monkeypatch.setattr(qm, "_late_interaction_gpu", lambda q, d: pieces.append(q.shape[0] * q.shape[1] * d.shape[0] * d.shape[1]) or li(q, d))

    def run(max_elements):
        q, d = q0.clone().requires_grad_(), d0.clone().requires_grad_()
        scores = qm.late_interaction(q, d, max_elements)
        h, _ = qm.entropy_loss(torch.cat([q.reshape(-1, 5), d.reshape(-1, 5)]), cb, max_elements)
        (torch.nn.functional.cross_entropy(scores, torch.arange(6)) - h).backward()
        return scores.detach(), h.detach(), q.grad, d.grad

    whole = run(qm.LOSS_CHUNK_ELEMENTS)
    assert pieces == [6 * 4 * 6 * 3]
    pieces.clear()
    budget = 2 * 4 * 6 * 3  # two queries' distances per piece
    chunked = run(budget)
    assert pieces and max(pieces) <= budget and len(pieces) >= 3 * 2  # forward + recomputed backward
    for a, b in zip(whole, chunked):
        assert torch.allclose(a, b, atol=1e-5), (a, b)
    assert qm.loss_peak_elements(6, 4, 3125, budget) == max(2 * 4 * 6 * 4, (budget // 3125 or 1) * 3125)
    # the paper's last stage fits: at most the budget per piece instead of a 1 TB Eq. 3 matrix
    assert qm.loss_peak_elements(2048, 250, 3125) <= qm.LOSS_CHUNK_ELEMENTS


def _scores_and_grads(fn, q, d, w):
    """(scores, d/dq, d/dd) of Eq. 3 path ``fn`` on copies of ``q`` and ``d``, the scores weighted by ``w``."""
    qq, dd = q.clone().requires_grad_(), d.clone().requires_grad_()
    out = fn(qq, dd)
    (out * w).sum().backward()
    return out.detach(), qq.grad, dd.grad


def _tied(g, shape):
    """Pre-rounded codes in [-2, 2] with many coordinates exactly on a level (ties and zero distances)."""
    x = torch.tanh(torch.randn(shape, generator=g)) * 2
    return torch.where(torch.rand(shape, generator=g) < 0.6, x.round(), x)


def test_fused_eq3_equals_cdist_values_and_gradients_ties_and_zeros_included():
    """#28: the CPU's one-pass Eq. 3 (harness.methods.qcr.fused) against the exact-difference cdist
    path: the same scores and gradients for both inputs, with coinciding codes (ties between a
    document's codes, distances of exactly 0: gradient 0 there, as cdist's), unequal query and
    document counts and K, and K' past 256 (two-byte kept indexes)."""
    from harness.methods.qcr import fused
    from harness.methods.qcr import model as qm

    g = torch.Generator().manual_seed(11)
    for b, k, p, k2 in ((7, 6, 9, 4), (5, 3, 4, 300)):
        q, d = _tied(g, (b, k, 5)), _tied(g, (p, k2, 5))
        d[0, 0] = q[0, 0]  # a distance of exactly 0
        d[1, 1] = d[1, 0]  # two equal codes in one document: a tie
        w = torch.randn(b, p, generator=g)
        got = [_scores_and_grads(fn, q, d, w) for fn in (qm._late_interaction, fused.late_interaction)]
        for a, c in zip(*got):
            assert a.shape == c.shape and torch.isfinite(c).all()
            assert torch.allclose(a, c, atol=1e-5), (a - c).abs().max()
    assert fused.index_dtype(250) == np.uint8 and fused.index_dtype(300) == np.uint16
    assert not fused.supports(q.double(), d.double()) and fused.supports(q, d)
    with pytest.raises(ValueError, match="CPU float32"):
        fused.late_interaction(q.double(), d.double())


def test_the_cpu_takes_the_fused_eq3_only_past_the_budget(monkeypatch):
    """At or below LOSS_CHUNK_ELEMENTS the CPU keeps cdist's one-piece bits (every smoke, small and ci
    batch); past it, the fused kernel, the same scores; a float64 batch past it keeps cdist's chunks."""
    from harness.methods.qcr import fused
    from harness.methods.qcr import model as qm

    g = torch.Generator().manual_seed(12)
    q, d = _tied(g, (6, 4, 5)), _tied(g, (6, 3, 5))
    calls = []
    real = fused.late_interaction
    monkeypatch.setattr(fused, "late_interaction", lambda a, b: calls.append(a.shape) or real(a, b))
    assert torch.equal(qm.late_interaction(q, d), qm._late_interaction(q, d)) and not calls
    past = qm.late_interaction(q, d, max_elements=2 * 4 * 6 * 3)
    assert calls == [q.shape] and torch.allclose(past, qm._late_interaction(q, d), atol=1e-5)
    calls.clear()
    wide = qm.late_interaction(q.double(), d.double(), max_elements=2 * 4 * 6 * 3)
    assert not calls and torch.allclose(wide, qm._late_interaction(q.double(), d.double()))


def test_qcr_loss_prefers_aligned_pairs():
    fsq = _fsq()
    cb = fsq.implicit_codebook.float()
    q = qcr.prequant(fsq, torch.randn(4, 6, 5) * 2)
    aligned, _ = qcr.qcr_loss(q, q.clone(), cb, temperature=1.0, entropy_weight=0.0)
    shuffled, _ = qcr.qcr_loss(q, q.roll(1, 0), cb, temperature=1.0, entropy_weight=0.0)
    assert aligned.item() < shuffled.item()
    _, parts = qcr.qcr_loss(q, q, cb, temperature=1.0, entropy_weight=1.0)
    assert set(parts) == {"contrastive", "entropy"}


def test_grad_cache_equals_the_full_batch_gradient_with_dropout():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3 * 5))
    net.train()
    fsq = _fsq()
    cb = fsq.implicit_codebook.float()
    xs = torch.randn(6, 8)
    ys = torch.randn(6, 8)

    def encode(items):
        return qcr.prequant(fsq, net(torch.stack(list(items))).view(len(items), 3, 5))

    def loss_fn(q, d):
        return qcr.qcr_loss(q, d, cb, temperature=0.5, entropy_weight=0.3)

    torch.manual_seed(1)
    loss, _ = qcr.grad_cache_step(encode, [list(xs), list(ys)], loss_fn, chunk=2)
    cached = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    # the same RNG draws as the cached run's first pass: chunks of 2, queries then documents
    torch.manual_seed(1)
    q = torch.cat([encode(list(xs[i:i + 2])) for i in range(0, 6, 2)])
    d = torch.cat([encode(list(ys[i:i + 2])) for i in range(0, 6, 2)])
    full, _ = loss_fn(q, d)
    full.backward()
    assert loss.item() == pytest.approx(full.item(), abs=1e-5)
    for a, b in zip(cached, (p.grad for p in net.parameters())):
        assert torch.allclose(a, b, atol=1e-5)


def test_grad_cache_with_one_sub_batch_encodes_once_and_gives_the_cached_gradient():
    """When every group fits one sub-batch, the step encodes once (the cache's second pass would
    repeat the first) and its gradient is the cached path's (on the smoke QCR job the trained model
    came out bit for bit the same either way)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3 * 5))
    fsq = _fsq()
    cb = fsq.implicit_codebook.float()
    xs, ys = list(torch.randn(4, 8)), list(torch.randn(4, 8))
    calls = []

    def encode(items):
        calls.append(len(items))
        return qcr.prequant(fsq, net(torch.stack(list(items))).view(len(items), 3, 5))

    def loss_fn(q, d):
        return qcr.qcr_loss(q, d, cb, temperature=0.5, entropy_weight=0.3)

    grads = []
    for chunk in (4, 2):  # one sub-batch per group; two (the cache)
        net.zero_grad()
        torch.manual_seed(1)
        qcr.grad_cache_step(encode, [xs, ys], loss_fn, chunk=chunk)
        grads.append([p.grad.clone() for p in net.parameters()])
    assert calls[:2] == [4, 4] and len(calls) == 2 + 8  # once each; then 2 x 2 sub-batches, twice
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6) and float(a.abs().sum()) > 0


def test_rescore_equals_eq3_over_code_vectors():
    levels = (3, 3, 3)
    dist = qcr.distance_matrix(levels)
    cb = _fsq(levels).implicit_codebook.float().numpy()
    assert dist.shape == (27, 27) and np.allclose(np.diag(dist), 0)
    rng = np.random.default_rng(0)
    qc, cands = rng.integers(0, 27, 4), rng.integers(0, 27, (5, 6))
    got = qcr.rescore(qc, cands, dist, chunk=2)
    want = [sum(max(-np.linalg.norm(cb[a] - cb[b]) for b in row) for a in qc) for row in cands]
    assert np.allclose(got, want, atol=1e-5)


def test_rescore_run_reorders_the_head_and_keeps_the_tail():
    dist = qcr.distance_matrix((3, 3))
    doc_codes = np.array([[0, 1], [4, 4], [8, 8], [2, 2]])
    run = {"q": [("a", 3.0), ("b", 2.0), ("c", 1.0), ("d", 0.5)]}
    out = qcr.rescore_run(run, {"q": np.array([8, 8])}, doc_codes, {"a": 0, "b": 1, "c": 2, "d": 3}, dist,
                          depth=3, k=4)
    assert [d for d, _ in out["q"]] == ["c", "b", "a", "d"]  # c matches exactly; d stays below the head
    assert [s for _, s in out["q"]] == [4.0, 3.0, 2.0, 1.0]


def test_code_strings_and_their_errors():
    codes = np.array([[3, 0], [5, 5]])
    assert qcr.code_strings(codes, ["d1", "d2"], k=2, size=27, positional=True) == ["0_c3 1_c0", "0_c5 1_c5"]
    assert qcr.code_strings(codes, ["d1", "d2"], k=2, size=27, positional=False) == ["c3 c0", "c5 c5"]
    with pytest.raises(DataError, match="d2: code id 30 outside the codebook"):
        qcr.code_strings(np.array([[1, 2], [30, 1]]), ["d1", "d2"], k=2, size=27, positional=True)
    with pytest.raises(DataError, match="3 codes per text, the model writes K = 2"):
        qcr.code_strings(np.zeros((2, 3), int), ["d1", "d2"], k=2, size=27, positional=True)


def test_a_code_index_streams_its_strings_to_lucene(tmp_path, monkeypatch):
    """At the paper's scale (8.8M passages x K 250) a corpus's code strings are ~20 GB of Python
    strings: the index build hands Lucene one string at a time (an iterator, every row checked before
    the first), so the build holds a few rows' strings, not the corpus's; the strings are code_strings'.
    The codes themselves are uint16 for the paper's 3,125-code book (half of int32)."""
    import tracemalloc

    from harness.methods.qcr import index as qindex
    from harness.methods.qcr.model import code_dtype

    rng = np.random.default_rng(0)
    n, k, size = 20_000, 250, 3125
    codes = rng.integers(0, size, (n, k)).astype(code_dtype(size))
    assert codes.dtype == np.uint16 and code_dtype(5 ** 7) == np.uint32
    ids = [f"d{i}" for i in range(n)]
    total = sum(len(x) for x in qindex.iter_code_strings(codes, ids, k=k, size=size, positional=True))
    seen = {}

    def consume(spec, payload, **options):   # what Anserini's input writer does: one row at a time
        seen["sequence"] = isinstance(payload, (list, tuple))
        tracemalloc.start()
        for i, (docid, text) in enumerate(payload):
            if i < 2:
                seen.setdefault("first", []).append((docid, text))
        seen["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        seen["rows"] = i + 1

    monkeypatch.setattr(qindex, "build_index", consume)
    strings = qindex.iter_code_strings(codes, ids, k=k, size=size, positional=True)
    info = qindex.build_lucene("lucene:pretokenized", ids, strings, tmp_path, {"k1": 0.9, "b": 0.4})
    assert info["documents"] == seen["rows"] == n and not seen["sequence"]
    assert seen["first"] == list(zip(ids[:2], qindex.code_strings(codes[:2], ids[:2], k=k, size=size, positional=True)))
    assert seen["peak"] < total / 5, (seen["peak"], total)   # ~5 MB, against 46 MB of strings held at once
    with pytest.raises(DataError, match="d7: code id 3125 outside the codebook"):   # checked before any row is given
        bad = codes.copy()
        bad[7, 3] = size
        next(qindex.iter_code_strings(bad, ids, k=k, size=size, positional=True))


def test_unique_code_fraction_is_the_mean_distinct_share_per_row_block_by_block():
    """Hand-checked: rows [1 1 2 3] and [4 4 4 4] hold 3 and 1 distinct codes of 4: (0.75 + 0.25) / 2;
    blocks of one row give the same, and it equals the per-row set count on random codes."""
    from harness.methods.qcr.index import unique_code_fraction

    codes = np.array([[1, 1, 2, 3], [4, 4, 4, 4]], np.uint16)
    assert unique_code_fraction(codes) == unique_code_fraction(codes, rows=1) == 0.5
    assert unique_code_fraction(np.zeros((0, 4), np.uint16)) == 0.0
    rand = np.random.default_rng(3).integers(0, 40, (5000, 150)).astype(np.uint16)
    assert unique_code_fraction(rand, rows=700) == float(np.mean([len(set(r)) / len(r) for r in rand.tolist()]))


def test_batch_schedule_follows_the_stages_and_never_repeats_a_document():
    pairs = [(f"q{i}", f"d{i % 5}") for i in range(20)]
    s = qcr.BatchSchedule(pairs, [{"steps": 2, "batch_size": 3, "codes": 4}, {"steps": 3, "batch_size": 5, "codes": 8}],
                          random.Random(0))
    assert s.total == 5
    for step in range(5):
        batch, k = s.batch(step)
        assert (len(batch), k) == ((3, 4) if step < 2 else (5, 8))
        assert len({d for _, d in batch}) == len(batch)


def test_crop_query_is_a_span_within_the_ratio():
    text = " ".join(f"w{i}" for i in range(100))
    rng = random.Random(0)
    for _ in range(20):
        c = qcr.crop_query(text, rng, {"min_ratio": 0.1, "max_ratio": 0.5, "min_words": 4}).split()
        assert 10 <= len(c) <= 50
        start = int(c[0][1:])
        assert c == [f"w{i}" for i in range(start, start + len(c))]


def test_settings_variants_and_grid(tmp_path):
    cfg = {"seed": 1, "methods": {"qcr": {"train_dataset": "x", "backbone": "b", "levels": [5, 5, 5],
                                          "variants": {"noent": {"entropy_weight": 0.0}},
                                          "variant_overrides": {"max_train_questions": 10},
                                          "grid": {"batch_sizes": [8, 32], "codes": [4, 16], "steps": 7}}}}
    s = qcr.settings(cfg, "noent")
    assert (s["entropy_weight"], s["max_train_questions"], s["levels"]) == (0.0, 10, [5, 5, 5])
    assert qcr.grid_models(qcr.settings(cfg)) == ["grid-b0k0", "grid-b1k0", "grid-b0k1", "grid-b1k1"]
    assert qcr.settings(cfg, "grid-b1k0")["schedule"] == [{"steps": 7, "batch_size": 32, "codes": 4}]
    assert qcr.model_id(cfg, "noent") == "qcr.noent"
    with pytest.raises(ConfigError, match="unknown QCR variant"):
        qcr.settings(cfg, "nope")
    with pytest.raises(ConfigError, match="unknown QCR grid model"):
        qcr.settings(cfg, "grid-b5k0")


def test_generated_queries_pipeline_with_a_random_tiny_causal_lm():
    """App. A.1's pipeline, offline: a randomly initialised tiny Llama with the smoke backbone's tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.config import load_config
    from harness.datasets import Doc
    from harness.models.backbones import load_tokenizer

    tok = load_tokenizer(load_config(), "splade-tiny")
    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                                      pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                                      bos_token_id=tok.cls_token_id))
    docs = [Doc("d1", "T", "a passage about rivers"), Doc("d2", "", "another one")]
    docs += [Doc("d3", "A much longer title", "a far longer passage, so that the batch is padded on the left " * 3)]
    out = qcr.generate_queries("unused", docs, max_new_tokens=5, model=lm, tokenizer=tok)
    assert len(out) == 3 and all(isinstance(q, str) and q for q in out)
    # one left-padded batch gives each passage the query it gets alone (padding masked, positions shifted)
    assert [qcr.generate_queries("unused", [d], max_new_tokens=5, model=lm, tokenizer=tok)[0] for d in docs] == out
    assert qcr.generate_queries("unused", docs, max_new_tokens=5, model=lm, tokenizer=tok, batch_size=2) == out
    assert tok.padding_side == "right"  # restored for the encoders that share the tokenizer
    pad, tok.pad_token, tok.eos_token = tok.pad_token, None, "[SEP]"  # a decoder's tokenizer without a pad token
    try:
        assert qcr.generate_queries("unused", docs, max_new_tokens=5, model=lm, tokenizer=tok) == out  # EOS pads
        assert tok.pad_token is None  # restored
        tok.eos_token = None
        with pytest.raises(ConfigError, match="neither a padding nor an EOS token"):
            qcr.generate_queries("unused", docs, max_new_tokens=5, model=lm, tokenizer=tok)
        assert tok.padding_side == "right"  # the refusal leaves the shared tokenizer as it was
    finally:
        tok.pad_token = pad
    assert "{document}" in qcr.GENERATOR_PROMPT and qcr.GENERATOR_PROMPT.startswith("You are an expert search engine")


def test_the_cuda_loss_path_equals_cdists_values_and_gradients():
    """QCR's CUDA path (cdist's difference form has no fast CUDA backward: at the paper's stage shapes
    it was the whole step on an H200) computes the same distances, minima and gradients as cdist,
    exact zeros (codes that coincide, the common case after rounding) included."""
    from harness.methods.qcr import model as qm

    g = torch.Generator().manual_seed(5)
    q = torch.tanh(torch.randn(7, 6, 5, generator=g)) * 2
    d = torch.tanh(torch.randn(9, 4, 5, generator=g)) * 2
    q = torch.where(torch.rand(q.shape, generator=g) < 0.6, q.round(), q)  # many coinciding coordinates
    d = torch.where(torch.rand(d.shape, generator=g) < 0.6, d.round(), d)
    d[0, 0] = q[0, 0]  # a distance of exactly 0
    w = torch.randn(7, 9, generator=g)
    grads = [_scores_and_grads(fn, q, d, w) for fn in (qm._late_interaction, qm._late_interaction_gpu)]
    for a, b in zip(*grads):
        assert torch.isfinite(b).all() and torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    cb = _fsq().implicit_codebook.float()
    z = torch.cat([q.reshape(-1, 5), cb[:3]]).requires_grad_()  # rows on codebook entries: distance 0
    ref = torch.cdist(z, cb, compute_mode="donot_use_mm_for_euclid_dist")
    mine = qm._safe_sqrt(((z[:, None, :] - cb[None]) ** 2).sum(-1))
    gw = torch.randn(ref.shape, generator=g)
    g_ref, = torch.autograd.grad((ref * gw).sum(), z)
    g_mine, = torch.autograd.grad((mine * gw).sum(), z)
    assert torch.allclose(ref, mine, atol=1e-6) and torch.allclose(g_ref, g_mine, atol=1e-4)


def test_bench_qcr_loss_runs_both_paths_and_they_agree(tmp_path, capsys):
    """`python -m harness bench qcr-loss` on small shapes: both paths run on the same tensors and give
    the same loss; on a CPU the fused path's target is judged at the largest shape both ran; a malformed
    shape list is one clear error."""
    import json

    from harness.bench import run
    from harness.errors import ConfigError

    assert run("qcr-loss", ["--shapes", "8x4,16x6", "--cdist-max-batch", "8", "--json", str(tmp_path / "q.json")]) == 0
    out = capsys.readouterr().out
    assert "same loss: True" in out and "cdist not run (past --cdist-max-batch)" in out
    assert "fused path" in out and "target: fused path >= 10x cdist at B=8 K=4" in out  # the CPU's path, judged
    rows = json.loads((tmp_path / "q.json").read_text())["shapes"]
    ran = [r for r in rows if not any(key.startswith("projected_") for key in r)]
    assert [(r["batch"], r["K"]) for r in ran] == [(8, 4), (16, 6)] and ran[0]["same_loss"] is True
    # on a CPU the paper's four stages are projected from the largest shape cdist ran (8 x 4), at B^2 K^2
    proj = {(r["batch"], r["K"]): r["projected_cdist_seconds"] for r in rows if "projected_cdist_seconds" in r}
    assert list(proj) == [(256, 150), (512, 183), (1024, 217), (2048, 250)]
    assert proj[2048, 250] == pytest.approx(ran[0]["cdist"]["seconds"] * (2048 / 8) ** 2 * (250 / 4) ** 2)
    assert "projected (cdist, QCR's CPU path below the budget, and before; from B=8 K=4 at B^2 K^2)" in out
    # the fused path's, from the largest shape it ran (16 x 6)
    fp = {(r["batch"], r["K"]): r["projected_fused_seconds"] for r in rows if "projected_fused_seconds" in r}
    assert fp[2048, 250] == pytest.approx(ran[1]["fused"]["seconds"] * (2048 / 16) ** 2 * (250 / 6) ** 2)
    from harness.bench.qcr_loss import projected_seconds
    assert projected_seconds(2.0, 128, 150, 256, 300) == pytest.approx(2.0 * 4 * 4)
    with pytest.raises(ConfigError, match="BATCHxK"):
        run("qcr-loss", ["--shapes", "256"])


def test_generated_queries_from_a_backbone_key_build_its_config_source(tmp_path):
    """QCR-uns.'s generator may name a key of config backbones: a config: source (the rehearsal's
    random Gemma-2-2b) is built with random weights and its offline tokenizer, not fetched from the
    hub by id; one query per passage, up to max_passages."""
    import json
    import random

    from harness.config import load_config
    from harness.datasets import prepare as prepare_dataset
    from harness.methods.qcr.settings import settings
    from harness.methods.qcr.train import training_pairs

    conf = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
            "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 600, "max_position_embeddings": 1024,
            "bos_token_id": 1, "eos_token_id": 2}
    (tmp_path / "gen.json").write_text(json.dumps(conf))
    cfg = load_config()
    cfg["backbones"]["tiny-gen"] = {"source": f"config:{tmp_path / 'gen.json'}", "tokenizer": "byte-bpe",
                                    "has_mlm_head": False}
    cfg["methods"]["qcr"].update(training_data="generated", probe_sub_batches=2,   # the rehearsal's probe
                                 generator={"model": "tiny-gen", "max_new_tokens": 3, "max_passages": 2})
    data = tmp_path / "data"
    prepare_dataset("smoke", cfg["datasets"]["smoke"], cfg, data)
    torch.manual_seed(0)
    pairs, docs, info = training_pairs(cfg, settings(cfg), data, random.Random(0))
    assert info["training_data"] == "generated" and len(pairs) == 2
    gen = info["generator"]   # what harness.estimate prices per passage
    assert gen["passages"] == 2 and gen["seconds"] > 0 and gen["max_new_tokens"] == 3 and gen["device"] == "cpu"
    assert all(isinstance(q, str) and d in docs for q, d in pairs)
