from __future__ import annotations

import pytest
import torch

from harness.methods.lightretriever import ops as lr_ops
from harness.methods.lightretriever.ops import (
    block_inputs,
    build_table,
    is_causal,
    mean_rows,
    projection_max,
    query_vector,
    sparse_doc_vector,
    token_vectors,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny matmuls: with 2 intra-op threads on a 2-core box, any other busy process makes every op wait for a
    # time slice (~15 ms per linear); one thread keeps these tests fast and stable.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _naive(hidden, weight, bias, mask):
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = logits.masked_fill(~mask.bool()[..., None], float("-inf"))
    out = logits.max(1).values
    return torch.where(out == float("-inf"), torch.zeros_like(out), out)


def _inputs(dtype=torch.float32, B=3, T=7, H=5, V=11, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g, dtype=dtype)
    weight = torch.randn(V, H, generator=g, dtype=dtype)
    b = torch.randn(V, generator=g, dtype=dtype) if bias else None
    mask = torch.rand(B, T, generator=g) > 0.3
    mask[:, 0] = True
    return hidden, weight, b, mask


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_projection_max_values(bias, dtype):
    hidden, weight, b, mask = _inputs(dtype, bias=bias)
    got = projection_max(hidden, weight, b, mask.int(), chunk=2)  # 0/1 mask accepted
    assert got.dtype == dtype
    # bf16: the bias is added inside one matmul (one rounding), the naive form rounds twice
    tol = {"atol": 3e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, _naive(hidden, weight, b, mask), **tol)
    torch.testing.assert_close(projection_max(hidden, weight, b, None), _naive(hidden, weight, b, None), **tol)
    torch.testing.assert_close(
        sparse_doc_vector(hidden, weight, b, mask), torch.log1p(torch.relu(_naive(hidden, weight, b, mask))), **tol
    )


@pytest.mark.parametrize("chunk", [1, 3, 7, 50])
def test_projection_max_chunk_invariant(chunk):
    hidden, weight, b, mask = _inputs(torch.float64)
    ref = projection_max(hidden, weight, b, mask, chunk=16)
    # Same maxima; only BLAS rounding of differently shaped matmuls may differ (last bit of float64).
    torch.testing.assert_close(projection_max(hidden, weight, b, mask, chunk=chunk), ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("bias", [True, False])
def test_projection_max_gradcheck(bias):
    hidden, weight, b, mask = _inputs(torch.float64, B=2, T=4, H=3, V=5, bias=bias)
    mask[1] = False  # a fully masked row: zeros, no gradient
    args = [hidden.requires_grad_(), weight.requires_grad_()] + ([b.requires_grad_()] if bias else [])
    fn = (
        (lambda h, w, bb: projection_max(h, w, bb, mask, 3))
        if bias
        else (lambda h, w: projection_max(h, w, None, mask, 3))
    )
    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize("budget", [1 << 24, 8])  # 8 elements: backward walks V one column at a time
def test_projection_max_grad_matches_naive(budget, monkeypatch):
    monkeypatch.setattr(lr_ops, "_BACKWARD_BUDGET", budget)
    hidden, weight, b, mask = _inputs(torch.float64, B=4, T=9, H=6, V=13)
    up = torch.randn(4, 13, dtype=torch.float64)
    grads = []
    for f in (lambda *a: projection_max(*a, chunk=4), _naive):
        leaves = [t.clone().requires_grad_() for t in (hidden, weight, b)]
        (f(*leaves, mask) * up).sum().backward()
        grads.append([t.grad for t in leaves])
    for got, ref in zip(*grads):
        torch.testing.assert_close(got, ref)


def test_projection_max_bfloat16_backward():
    hidden, weight, b, mask = (
        t.requires_grad_() if t.is_floating_point() else t for t in _inputs(torch.bfloat16)
    )
    up = torch.randn(3, 11, dtype=torch.bfloat16)
    (projection_max(hidden, weight, b, mask) * up).sum().backward()
    assert hidden.grad.dtype == weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(b.grad, up.sum(0))


@pytest.mark.parametrize("device", [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                     reason="torch sees no CUDA device")]),
])
def test_projection_max_backward_under_bf16_autocast(device):
    """precision: bf16 training (accelerate's autocast): the encoder's hidden states are bf16, the
    projection's weight and bias float32. The backward pass gives each input a gradient of its own
    dtype, close to the float32 gradient on the CPU (the error the first bf16 training run, on an
    H200, hit: index_add_ with a bf16 destination and a float32 source)."""
    hidden, weight, b, mask = _inputs(torch.float32, B=4, T=9, H=6, V=13)
    up = torch.randn(4, 13)
    ref = [t.clone().requires_grad_() for t in (hidden, weight, b)]
    (projection_max(*ref, mask) * up).sum().backward()
    h16 = hidden.to(device=device, dtype=torch.bfloat16).requires_grad_()
    w, bb = weight.to(device).requires_grad_(), b.to(device).requires_grad_()
    with torch.autocast(device, dtype=torch.bfloat16):
        out = projection_max(h16, w, bb, mask.to(device))
    (out.float() * up.to(device)).sum().backward()
    assert (h16.grad.dtype, w.grad.dtype, bb.grad.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    # bf16 logits can pick another position's max here and there, which moves a position's gradient
    # to another: compared are what no choice of position changes (the hidden gradient summed over
    # positions, sum_v g[b, v] W[v], and the bias gradient), and the weight gradient as a whole
    h_ref, w_ref, b_ref = (t.grad for t in ref)
    for got, want, tol in ((h16.grad.float().sum(1), h_ref.sum(1), 0.03), (bb.grad, b_ref, 0.03),
                           (w.grad, w_ref, 0.75)):  # 0.56 seen: one switched max moves a whole row
        err = ((got.float().cpu() - want).norm() / want.norm()).item()
        assert torch.isfinite(got).all() and err < tol, f"relative error {err:.3f} (at most {tol})"


def test_projection_max_fully_masked_row():
    hidden, weight, b, mask = _inputs()
    mask[1] = False
    hidden.requires_grad_()
    out = projection_max(hidden, weight, b, mask)
    assert torch.equal(out[1], torch.zeros(11))
    out.sum().backward()
    assert torch.equal(hidden.grad[1], torch.zeros_like(hidden.grad[1]))
    assert projection_max(hidden[:, :0], weight, b).abs().sum() == 0  # T == 0


@pytest.mark.parametrize("bias", [True, False])
def test_projection_max_packed_kernel_under_portable_matches_torchs(bias, monkeypatch):
    """Under portable numerics a CPU float32 forward runs the shared numpy kernel (kept positions
    packed): the same values, arg-max positions and gradients as torch's chunked path, a fully
    masked row and no mask at all included."""
    from harness import numerics

    hidden, weight, b, mask = _inputs(B=4, T=9, V=40, bias=bias, seed=5)
    mask[2] = False
    out = {}
    for mode in ("native", "portable"):
        monkeypatch.setattr(numerics, "_active", mode)
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        y = projection_max(h, w, b, mask)
        (y * torch.arange(y.numel()).view_as(y)).sum().backward()
        out[mode] = y.detach(), h.grad, w.grad, projection_max(hidden, weight, b, None)
    for got, want in zip(out["portable"], out["native"], strict=True):
        torch.testing.assert_close(got, want)
    assert torch.equal(out["portable"][0][2], torch.zeros(40))


def test_block_inputs_hand_checked():
    ids, pos, allowed, eos = block_inputs([1, 2], [10, 11], eos_id=9)
    assert ids.tolist() == [1, 2, 10, 9, 11, 9]
    assert pos.tolist() == [0, 1, 2, 3, 2, 3]
    assert eos.tolist() == [3, 5]
    assert allowed.dtype == torch.bool
    assert allowed.int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],
        [1, 1, 0, 0, 1, 1],
    ]


#: the shape of every tiny random model here (decoders add their key/value heads)
TINY = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 128}


def _decoder(kind: str, attn: str):
    from transformers import LlamaConfig, LlamaModel, Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    cfg, cls = (LlamaConfig, LlamaModel) if kind == "llama" else (Qwen2Config, Qwen2Model)
    config = cfg(**TINY, num_key_value_heads=2, attn_implementation=attn)
    return cls(config).eval()


def _separate(model, prompt, tokens, eos):
    with torch.no_grad():
        return torch.stack(
            [model(input_ids=torch.tensor([prompt + [t, eos]])).last_hidden_state[0, -1] for t in tokens]
        )


PROMPT, TOKENS, EOS = [1, 5, 17, 3, 40], [7, 8, 63, 22, 8, 0, 31], 2


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_token_vectors_decoder_match_separate(kind, attn):
    model = _decoder(kind, attn)
    assert is_causal(model)
    ref = _separate(model, PROMPT, TOKENS, EOS)
    with torch.no_grad():
        for max_len, bs in [
            (1024, 64),
            (len(PROMPT) + 6, 64),
            (len(PROMPT) + 6, 2),
        ]:  # 1 chunk; 3 chunks (3, 3, 1)
            got = token_vectors(model, PROMPT, TOKENS, EOS, max_len=max_len, batch_size=bs)
            assert got.shape == (len(TOKENS), 32)
            torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)


def test_token_vectors_causal_lm_wrapper():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    lm = LlamaForCausalLM(_decoder("llama", "sdpa").config).eval()
    with torch.no_grad():
        got = token_vectors(lm, PROMPT, TOKENS[:3], EOS, max_len=9)
    torch.testing.assert_close(got, _separate(lm.model, PROMPT, TOKENS[:3], EOS), atol=1e-4, rtol=0)
    assert token_vectors(lm, PROMPT, [], EOS).shape == (0, 32)
    with pytest.raises(ValueError, match="max_len"):
        token_vectors(lm, PROMPT, TOKENS, EOS, max_len=6)


def test_token_vectors_bert_encoder_path():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(**TINY)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    assert not is_causal(model)
    ref = _separate(model, PROMPT, TOKENS, EOS)
    with torch.no_grad():
        assert torch.equal(
            token_vectors(model, PROMPT, TOKENS, EOS, batch_size=1), ref
        )  # bit-exact one at a time
        # batched: the same computation up to BLAS rounding of the larger matmuls (~1 ulp in fp32)
        torch.testing.assert_close(
            token_vectors(model, PROMPT, TOKENS, EOS, batch_size=3), ref, atol=1e-6, rtol=0
        )


def test_query_vector():
    vectors = torch.randn(6, 4)
    table = build_table(vectors)
    assert not table.weight.requires_grad
    out = query_vector(table, [[0, 2, 2], [], [5]])
    torch.testing.assert_close(out[0], (vectors[0] + 2 * vectors[2]) / 3)
    assert torch.equal(out[1], torch.zeros(4))
    torch.testing.assert_close(out[2], vectors[5])
    with pytest.raises(ValueError, match=r"token id 6 .*size 6"):
        query_vector(table, [[1], [6]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mean_rows_gives_each_rows_mean_and_its_gradient(dtype):
    """Training's light sides (LightModel.light_mean): one embedding_bag pass equals a gather and a mean
    per row, values and gradients (a repeated token counts twice; an empty row is zeros, no gradient)."""
    g = torch.Generator().manual_seed(0)
    rows = [[0, 2, 2, 7], [], [5], [7, 1, 3, 3, 3, 0]]
    weights = torch.randn(len(rows), 3, generator=g)   # an uneven loss over the rows' outputs
    got, want = (torch.randn(8, 3, generator=g).to(dtype).requires_grad_() for _ in range(2))
    with torch.no_grad():
        want.copy_(got)
    out = mean_rows(got, rows)
    ref = torch.stack([want[r].float().mean(0) if r else torch.zeros(3) for r in rows])
    assert out.shape == (4, 3) and out.dtype == dtype and torch.equal(out[1], torch.zeros(3, dtype=dtype))
    tol = {"atol": 1e-6, "rtol": 1e-6} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out.float(), ref, **tol)
    (out.float() * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(got.grad.float(), want.grad.float(), **tol)
    assert got.grad[[4, 6]].abs().sum() == 0   # rows no text holds get none
    with pytest.raises(ValueError, match=r"token id 8 .*size 8"):
        mean_rows(got, [[8]])
