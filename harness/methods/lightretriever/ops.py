"""Low-level operations of LightRetriever (paper: /work/shared/papers/lightretriever.md).

Sparse document side (§2.3, Eq. 8; Appendix A.5 "Optimizations of sparse max aggregation", Algorithm 1):

* :func:`projection_max` -- ``max_t (hidden[:, t] @ weight.T + bias)`` over unmasked positions, as a custom
  autograd function that fuses the vocabulary projection with the max so the ``[B, T, V]`` logits are never
  materialised: the forward pass slices T (``[B, chunk, V]`` at a time) and keeps the running max and its argmax;
  the backward pass routes each ``(b, v)`` gradient to the argmax position only (a gather/index_add over V, not
  Algorithm 1's per-position ``[B, V] x [V, H]`` matmuls, which are the same sums but far slower on CPU).
* :func:`sparse_doc_vector` -- ``log1p(relu(projection_max(...)))``. A.5 moves the max before ReLU and the log
  saturation; that is exact because both are monotone non-decreasing.

Dense query side (§2.2, Eq. 3; Appendix A.5 "Customized causal mask"):

* :func:`block_inputs` -- ``prompt t0 eos t1 eos ... t_{n-1} eos`` with per-block positions and the customised
  causal mask (blocks see the prompt and themselves, never each other), so one forward pass yields the
  ``eos`` hidden state of ``prompt + [t_i, eos]`` for many tokens at once.
* :func:`token_vectors` -- the query-token vector table: row ``i`` is the last hidden state at the final ``eos``
  of ``prompt + [token_ids[i], eos]``. Causal models (see :func:`is_causal`) use the packed block form;
  bidirectional encoders (BERT) run the separate sequences, since the block mask cannot reproduce them there.
* :func:`build_table` / :func:`query_vector` -- a frozen ``EmbeddingBag(mode="mean")`` over those vectors and the
  query vector as the mean of its tokens' rows (a query with no tokens gives a zero row).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from harness.models.projection import segment_max_torch, use_numpy

# Elements of the [B, v-chunk, H] temporaries in projection_max's backward pass.
_MASKED = -1.0e4  # added to the logits of masked positions (far below any real logit; finite in bf16)
_BACKWARD_BUDGET = 1 << 24


class _ProjectionMax(torch.autograd.Function):
    """Fused ``max_t(hidden @ weight.T + bias)`` (Algorithm 1 of the paper, App. A.5).

    Forward: per chunk of positions, ``linear(h, W, b)`` (the bias inside the matmul) plus ``m``, 0 at
    kept positions and ``_MASKED`` at masked ones; the running max and its position are kept. (An
    augmented ``[h, 1, m] @ [W, b, 1].T`` would fold ``m`` into the matmul, but copies the V x H weight
    on every call: 1 GB at Llama's vocabulary, more than the mask's pass over ``[B, chunk, V]``.)
    Backward: only the (b, v) with a nonzero upstream gradient contribute (after ReLU and FLOPS
    training most do not): grad_h[b, arg[b, v]] += g[b, v] W[v] and grad_W[v] += g[b, v] h[b, arg[b, v]]
    by ``index_add_`` over those pairs, in blocks of ``_BACKWARD_BUDGET`` elements."""

    @staticmethod
    def forward(
        ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor | None, chunk: int
    ) -> Tensor:
        B, T, _ = hidden.shape
        V = weight.shape[0]
        if use_numpy(hidden) and weight.dtype == torch.float32:
            best, arg, valid = _projection_max_packed(hidden, weight, bias, mask)
            ctx.save_for_backward(hidden, weight, arg, valid)
            ctx.has_bias = bias is not None
            return torch.where(valid, best, torch.zeros_like(best))
        best = hidden.new_full((B, V), float("-inf"))
        arg = torch.zeros((B, V), dtype=torch.int64, device=hidden.device)
        m = None
        if mask is not None:
            m = hidden.new_zeros((B, T, 1)).masked_fill(
                ~mask.to(device=hidden.device, dtype=torch.bool)[..., None], _MASKED)
        for s in range(0, T, chunk):
            logits = torch.nn.functional.linear(hidden[:, s : s + chunk], weight, bias)   # [B, c, V]
            if m is not None:
                logits = logits + m[:, s : s + chunk].to(logits.dtype)
            cmax, carg = logits.max(dim=1)
            better = cmax > best
            best = torch.where(better, cmax, best)
            arg = torch.where(better, carg + s, arg)
        valid = best > _MASKED / 2  # False only where every position of the row is masked (or T == 0)
        ctx.save_for_backward(hidden, weight, arg, valid)
        ctx.has_bias = bias is not None
        return torch.where(valid, best, torch.zeros_like(best))

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        hidden, weight, arg, valid = ctx.saved_tensors
        B, T, H = hidden.shape
        # accumulated in one dtype, at least float32, whatever the operands' dtypes (under bf16 autocast
        # ``hidden`` is bf16 and ``weight`` float32; index_add_ needs one); each gradient is cast back
        acc = torch.promote_types(torch.promote_types(hidden.dtype, weight.dtype), torch.float32)
        g = torch.where(valid, grad_out, torch.zeros_like(grad_out)).to(acc)  # [B, V]
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = ctx.has_bias and ctx.needs_input_grad[2]
        grad_h = hidden.new_zeros((B * T, H), dtype=acc) if need_h else None  # rows indexed by b*T + t
        grad_w = torch.zeros_like(weight, dtype=acc) if need_w else None
        if need_h or need_w:
            bi, vi = g.nonzero(as_tuple=True)
            rows = arg[bi, vi] + bi * T                                    # positions in hidden.view(B*T, H)
            gv = g[bi, vi][:, None]
            flat_h = hidden.reshape(B * T, H)
            step = max(1, _BACKWARD_BUDGET // max(1, H))
            for s in range(0, len(bi), step):
                r, v, gg = rows[s : s + step], vi[s : s + step], gv[s : s + step]
                if need_h:
                    grad_h.index_add_(0, r, gg * weight[v].to(acc))
                if need_w:
                    grad_w.index_add_(0, v, gg * flat_h[r].to(acc))
        grad_b = g.sum(0).to(weight.dtype) if need_b else None
        if grad_h is not None:
            grad_h = grad_h.to(hidden.dtype).view(B, T, H)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        return grad_h, grad_w, grad_b, None, None


def _projection_max_packed(hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor | None):
    """The forward of :class:`_ProjectionMax` through the shared kernel (harness.models.projection):
    the kept positions packed row after row, (best [B, V], arg [B, V] position, valid [B, 1])."""
    B, T, _ = hidden.shape
    keep = torch.ones((B, T), dtype=torch.bool) if mask is None else mask.to(dtype=torch.bool)
    counts = keep.sum(1)
    starts = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    best, a = segment_max_torch(hidden[keep], weight, bias, starts.numpy())
    t_of = keep.nonzero()[:, 1]                                            # each packed row's position
    flat = (starts[:-1, None] + a).clamp(max=max(0, len(t_of) - 1))
    arg = t_of[flat] if len(t_of) else torch.zeros_like(a)
    return best, arg, (counts > 0)[:, None]


def eos_pool(last_hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """[B, T, H] x [B, T] -> [B, H]: the hidden state of each row's last non-padding token (EOS
    pooling, as Mistral-E5 and the paper), L2-normalised (the paper scores with cosine).

    The position is the largest index whose mask is 1, so right padding (the harness's) and left
    padding both work; a row with no token at all takes position 0.
    """
    if last_hidden.dim() != 3 or attention_mask.shape != last_hidden.shape[:2]:
        raise ValueError(f"eos_pool: shapes {tuple(last_hidden.shape)} and {tuple(attention_mask.shape)} "
                         "do not match [B, T, H] and [B, T]")
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.ne(0).long() * positions).argmax(dim=1)
    pooled = last_hidden[torch.arange(last_hidden.shape[0], device=last_hidden.device), last]
    return nn.functional.normalize(pooled, p=2, dim=-1)


def projection_max(
    hidden: Tensor, weight: Tensor, bias: Tensor | None = None, mask: Tensor | None = None, chunk: int = 16
) -> Tensor:
    """``[B, V]`` max over unmasked positions of ``hidden[:, t] @ weight.T + bias`` without a ``[B, T, V]`` tensor.

    ``hidden`` is ``[B, T, H]``, ``weight`` ``[V, H]``, ``bias`` ``[V]`` or None, ``mask`` ``[B, T]`` (bool or 0/1;
    nonzero = keep) or None. Positions are processed ``chunk`` at a time. A row with every position masked gives
    0 for every v and passes no gradient. Computes in the input dtype; works on any device.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if hidden.dim() != 3 or weight.dim() != 2 or hidden.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"expected hidden [B,T,H] and weight [V,H], got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if mask is not None and tuple(mask.shape) != tuple(hidden.shape[:2]):
        raise ValueError(
            f"mask shape {tuple(mask.shape)} does not match hidden [B,T] = {tuple(hidden.shape[:2])}"
        )
    return _ProjectionMax.apply(hidden, weight, bias, mask, chunk)


def sparse_doc_vector(
    hidden: Tensor, weight: Tensor, bias: Tensor | None = None, mask: Tensor | None = None, chunk: int = 16
) -> Tensor:
    """SPLADE-like ``[B, V]`` document vector ``log1p(relu(max_t(hidden @ weight.T + bias)))`` (Eq. 8, Eq. 12 order)."""
    return torch.log1p(torch.relu(projection_max(hidden, weight, bias, mask, chunk)))


def block_inputs(
    prompt_ids: Sequence[int], token_ids: Sequence[int], eos_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Packed inputs for ``prompt + t0 eos t1 eos ... t_{n-1} eos`` (App. A.5, Eq. 10; block width 2).

    Returns ``(input_ids [L], position_ids [L], allowed [L, L] bool, eos_positions [n])`` with L = P + 2n.
    Positions run 0..P-1 over the prompt and are (P, P+1) for every block; ``allowed[q, k]`` is true iff
    (q < P and k <= q) or (q >= P and k < P) or (q >= P, k in q's block and k <= q). ``prompt_ids`` must already
    hold the [bos] token if the model uses one.
    """
    P, n = len(prompt_ids), len(token_ids)
    L = P + 2 * n
    body = [x for t in token_ids for x in (int(t), int(eos_id))]
    input_ids = torch.tensor([int(x) for x in prompt_ids] + body, dtype=torch.long)
    position_ids = torch.cat([torch.arange(P), torch.tensor([P, P + 1], dtype=torch.long).repeat(n)])
    idx = torch.arange(L)
    block = torch.where(idx < P, -1, (idx - P) // 2)
    q, k = idx[:, None], idx[None, :]
    causal = k <= q
    allowed = (
        ((q < P) & causal) | ((q >= P) & (k < P)) | ((q >= P) & (block[:, None] == block[None, :]) & causal)
    )
    eos_positions = P + 2 * torch.arange(n) + 1
    return input_ids, position_ids.long(), allowed, eos_positions


def is_causal(model: nn.Module) -> bool:
    """Whether ``model`` attends causally: ``config.is_decoder`` is set, or its model type has a causal-LM class
    and no masked-LM class (llama, qwen2, mistral, ...; BERT-likes have both and are decoders only with
    ``is_decoder=True``). ``config.is_causal = False`` (transformers' bidirectional switch) wins."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    config = model.config
    if getattr(config, "is_causal", True) is False:
        return False
    if getattr(config, "is_decoder", False):
        return True
    kind = getattr(config, "model_type", None)
    return kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _base(model: nn.Module) -> nn.Module:
    # LlamaForCausalLM.base_model is its LlamaModel; a bare LlamaModel/BertModel returns itself.
    return getattr(model, "base_model", model)


def token_vectors(
    model: nn.Module,
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    eos_id: int,
    *,
    max_len: int = 1024,
    batch_size: int = 64,
) -> Tensor:
    """``[len(token_ids), hidden]``: row i is the last hidden state at the final eos of ``prompt + [t_i, eos]``.

    ``model`` is a Hugging Face model; wrappers (``*ForCausalLM``, ``*ForMaskedLM``) are reduced to
    ``model.base_model`` and its ``last_hidden_state`` is read (after the final norm for Llama/Qwen2).

    * Causal models (:func:`is_causal`): tokens are packed with :func:`block_inputs`, at most ``max_len`` positions
      per packed sequence and ``batch_size`` packed sequences per forward; the mask goes in as a 4-D additive float
      mask ``[batch, 1, L, L]`` (0 = attend, ``finfo(dtype).min`` = blocked) with explicit ``position_ids``.
      transformers 5 passes a 4-D mask through untouched; eager attention *adds* it to the scores (so a bool mask
      would be silently wrong there) and SDPA accepts the float form too. Padding positions attend only to
      themselves (no fully-blocked rows, hence no NaN) and nothing attends to them. Verified against separate
      passes for Llama and Qwen2 with eager and sdpa attention (not flash/flex attention).
    * Bidirectional encoders (BERT): the separate sequences ``prompt + [t, eos]`` are run, ``batch_size`` per
      forward (all the same length, no padding), reading the last position.

    Gradients flow if the caller has grad enabled (wrap in ``torch.no_grad()`` to build a cache).
    """
    base = _base(model)
    device = next(base.parameters()).device
    n = len(token_ids)
    if n == 0:
        return torch.zeros((0, base.config.hidden_size), dtype=base.dtype, device=device)
    prompt = [int(x) for x in prompt_ids]
    if not is_causal(model):
        rows = []
        for s in range(0, n, batch_size):
            ids = torch.tensor(
                [prompt + [int(t), int(eos_id)] for t in token_ids[s : s + batch_size]], device=device
            )
            out = base(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            rows.append(out[:, -1])
        return torch.cat(rows)

    per_seq = (max_len - len(prompt)) // 2
    if per_seq < 1:
        raise ValueError(
            f"max_len={max_len} leaves no room for a token block after a {len(prompt)}-token prompt"
        )
    chunks = [list(token_ids[s : s + per_seq]) for s in range(0, n, per_seq)]
    neg = torch.finfo(base.dtype).min
    rows = []
    for s in range(0, len(chunks), batch_size):
        packed = [block_inputs(prompt, c, eos_id) for c in chunks[s : s + batch_size]]
        L = max(len(p[0]) for p in packed)
        ids = torch.full((len(packed), L), int(eos_id), dtype=torch.long)
        pos = torch.zeros((len(packed), L), dtype=torch.long)
        allowed = torch.eye(L, dtype=torch.bool).repeat(len(packed), 1, 1)  # padding attends to itself only
        for i, (x, p, a, _) in enumerate(packed):
            ids[i, : len(x)], pos[i, : len(x)], allowed[i, : len(x), : len(x)] = x, p, a
        mask = torch.zeros(allowed.shape, dtype=base.dtype).masked_fill(~allowed, neg)[:, None]
        out = base(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=pos.to(device),
            use_cache=False,
        ).last_hidden_state
        for i, (_, _, _, eos) in enumerate(packed):
            rows.append(out[i, eos.to(device)])
    return torch.cat(rows)


def build_table(vectors: Tensor) -> nn.EmbeddingBag:
    """A frozen ``EmbeddingBag(mode="mean")`` whose rows are ``vectors`` ``[V, H]``."""
    return nn.EmbeddingBag.from_pretrained(vectors.detach().clone(), freeze=True, mode="mean")


def query_vector(table: nn.EmbeddingBag, token_ids: Sequence[Sequence[int]]) -> Tensor:
    """``[n_queries, H]``: the mean of each query's token rows of ``table``; a query with no tokens gives zeros.

    Raises ValueError for a token id outside ``[0, table.num_embeddings)``.
    """
    return mean_rows(table.weight, token_ids)


def mean_rows(vectors: Tensor, token_ids: Sequence[Sequence[int]]) -> Tensor:
    """``[len(token_ids), H]``: row i is the mean of the rows ``token_ids[i]`` of ``vectors`` (zeros for none),
    by ``embedding_bag(mode="mean")``, one pass with its own backward (training's light sides: a gather
    and a mean per text left each text's [length, H] copy resident in glibc's heap, 4.0 GiB for 1,024
    passages of 510 tokens, and took 162 s beside a training job; this: 0.04 GiB, 0.5 s).

    Raises ValueError for a row index outside ``[0, len(vectors))``.
    """
    size = vectors.shape[0]
    flat: list[int] = []
    offsets: list[int] = []
    for q in token_ids:
        offsets.append(len(flat))
        for t in q:
            t = int(t)
            if not 0 <= t < size:
                raise ValueError(f"token id {t} is outside the token-vector table of size {size}")
            flat.append(t)
    device = vectors.device
    return nn.functional.embedding_bag(torch.tensor(flat, dtype=torch.long, device=device), vectors,
                                       torch.tensor(offsets, dtype=torch.long, device=device), mode="mean")
