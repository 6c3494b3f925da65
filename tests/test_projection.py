"""The shared max-pooled vocabulary projection (harness.models.projection): against a float64 brute
force, its bits against the thread count, its blocks against one product, and the methods' two
paths (numpy under portable numerics, torch otherwise) against each other."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from harness import numerics
from harness.models import projection


def _brute(tokens, weight, bias, starts):
    logits = tokens.astype(np.float64) @ weight.astype(np.float64).T + (0 if bias is None else bias)
    B, V = len(starts) - 1, weight.shape[0]
    values, arg = np.full((B, V), -np.inf), np.zeros((B, V), np.int64)
    for b in range(B):
        seg = logits[starts[b]:starts[b + 1]]
        if len(seg):
            arg[b] = seg.argmax(0)
            values[b] = seg.max(0)
    return values, arg


def _case(seed=0, lengths=(7, 0, 1, 40, 13), V=301, H=12):
    rng = np.random.default_rng(seed)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return (rng.standard_normal((starts[-1], H), dtype=np.float32), rng.standard_normal((V, H), dtype=np.float32),
            rng.standard_normal(V, dtype=np.float32), starts)


@pytest.mark.parametrize("with_bias", [True, False])
def test_segment_max_matches_a_float64_brute_force(with_bias, monkeypatch):
    monkeypatch.setattr(projection, "BLOCK_TOKENS", 16)   # several token blocks, one segment longer than a block
    monkeypatch.setattr(projection, "BLOCK_VOCAB", 64)    # and several vocabulary blocks, the last one short
    tokens, weight, bias, starts = _case()
    bias = bias if with_bias else None
    values, arg = projection.segment_max(tokens, weight, bias, starts, threads=2)
    ref_v, ref_a = _brute(tokens, weight, bias, starts)
    assert values.shape == arg.shape == (5, 301) and values.dtype == np.float32
    np.testing.assert_allclose(values[[0, 2, 3, 4]], ref_v[[0, 2, 3, 4]], rtol=1e-5, atol=1e-5)
    assert (arg == ref_a).mean() > 0.999                     # float32 vs float64: a near-tie may flip
    assert np.all(values[1] == -np.inf) and np.all(arg[1] == 0)   # the empty segment


def test_ties_take_the_first_row():
    tokens = np.array([[1.0, 0.0], [2.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.0, 3.0]], np.float32)
    weight = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    values, arg = projection.segment_max(tokens, weight, None, [0, 3, 5])
    assert values.tolist() == [[2.0, 0.0], [0.0, 3.0]]
    assert arg.tolist() == [[1, 0], [0, 0]]


def test_the_bits_do_not_depend_on_the_thread_count():
    tokens, weight, bias, starts = _case(seed=1, lengths=(300, 700, 900, 50), V=5000, H=64)
    outs = [projection.segment_max(tokens, weight, bias, starts, threads=t) for t in (1, 2, 3)]
    for values, arg in outs[1:]:
        assert values.tobytes() == outs[0][0].tobytes() and np.array_equal(arg, outs[0][1])


def test_bad_starts_name_the_problem():
    tokens, weight, bias, _ = _case()
    with pytest.raises(ValueError, match="starts must rise"):
        projection.segment_max(tokens, weight, bias, [0, 5, 3, len(tokens)])
    with pytest.raises(ValueError, match="not \\[N, H\\]"):
        projection.segment_max(tokens[:, :3], weight, bias, [0, len(tokens)])


def test_numpy_only_for_cpu_float32_under_portable(monkeypatch):
    x = torch.zeros(2, 2)
    monkeypatch.setattr(numerics, "_active", "native")
    assert not projection.use_numpy(x)
    monkeypatch.setattr(numerics, "_active", "portable")
    assert projection.use_numpy(x) and not projection.use_numpy(x.double()) and not projection.use_numpy(x.bfloat16())


def test_both_paths_agree_for_vdr(monkeypatch):
    from harness.methods.vdr.model import max_project, max_project_grad

    g = torch.Generator().manual_seed(3)
    h, w, b = torch.randn(4, 30, 16, generator=g), torch.randn(700, 16, generator=g), torch.randn(700, generator=g)
    lengths = [30, 2, 17, 1]
    out = {}
    for mode in ("native", "portable"):
        monkeypatch.setattr(numerics, "_active", mode)
        values, arg = max_project(h, lengths, w, b)
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        max_project_grad(hh, lengths, ww, b).pow(2).sum().backward()
        out[mode] = values, arg, hh.grad, ww.grad
    (v0, a0, gh0, gw0), (v1, a1, gh1, gw1) = out["native"], out["portable"]
    torch.testing.assert_close(v1, v0)
    assert torch.equal(a1, a0)
    torch.testing.assert_close(gh1, gh0, rtol=1e-4, atol=1e-4)   # the same sums, another product's rounding
    torch.testing.assert_close(gw1, gw0, rtol=1e-4, atol=1e-4)
