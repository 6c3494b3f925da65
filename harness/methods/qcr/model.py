"""QCR's model (§3.1): ``[CLS] [QCR0..QCR{K-1}] text [SEP]`` through the backbone, the K outputs
projected to d = len(levels) and quantised by FSQ; and its training losses (§3.2-3.3): Eq. 3's late
interaction, the code entropy of Eq. 4-5, and a GradCache step for multi-vector outputs."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.methods.qcr.settings import ENCODER_DIR, FSQ_VERSION, MODEL_FILE, codebook_size, codes_k, max_codes
from harness.models.backbones import load_encoder, load_tokenizer
from harness.models.runtime import quiet_transformers, torch_for
from harness.progress import counted_batches
from harness.recording import snapshot


def prequant(fsq, z):
    """FSQ's bounded value before rounding, on the code scale (``fsq.bound`` without its ``round_ste``):
    what Eq. 3 and Eq. 4 measure distances between."""
    import torch

    levels = fsq._levels.to(z.dtype)
    half_l = (levels - 1) * (1 + 1e-3) / 2
    offset = torch.where(fsq._levels % 2 == 0, 0.5, 0.0).to(z.dtype)
    shift = torch.atanh(offset / half_l)
    return (torch.tanh(z + shift) * half_l - offset) / (fsq._levels // 2).to(z.dtype)


def code_dtype(size: int) -> np.dtype:
    """The smallest unsigned integer type that holds code ids ``[0, size)``."""
    return np.dtype(np.uint16 if size <= 1 << 16 else np.uint32)


def code_ids(fsq, pre):
    """Code ids of pre-rounded representations (rounding as FSQ does)."""
    import torch

    hw = (fsq._levels // 2).to(pre.dtype)
    return fsq.codes_to_indices(torch.round(pre * hw) / hw).long()


class QCRModel:
    """Backbone + projection + FSQ; ``pre(texts, k)`` gives pre-rounded codes [B, k, d]."""

    def __init__(self, s: Mapping[str, Any], encoder, tokenizer, proj, fsq) -> None:
        self.s, self.encoder, self.tok, self.proj, self.fsq = s, encoder, tokenizer, proj, fsq
        self.special = tokenizer.convert_tokens_to_ids([f"[QCR{i}]" for i in range(max_codes(s))])

    @classmethod
    def from_backbone(cls, cfg: Mapping[str, Any], s: Mapping[str, Any]) -> QCRModel:
        import torch
        from vector_quantize_pytorch import FSQ

        quiet_transformers()
        enc = load_encoder(cfg, s["backbone"])
        tok = load_tokenizer(cfg, s["backbone"])
        tok.add_special_tokens({"additional_special_tokens": [f"[QCR{i}]" for i in range(max_codes(s))]})
        enc.resize_token_embeddings(len(tok))
        proj = torch.nn.Linear(enc.config.hidden_size, len(s["levels"]))
        return cls(s, enc, tok, proj, FSQ(levels=list(s["levels"])))

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> QCRModel:
        """The trained model of ``folder`` on ``device`` (index and search jobs: the section's,
        :func:`harness.models.runtime.encode_device`; codes come back as CPU numpy arrays)."""
        import torch
        from transformers import AutoModel, AutoTokenizer
        from vector_quantize_pytorch import FSQ

        quiet_transformers()
        state = torch.load(Path(folder) / MODEL_FILE, weights_only=True)  # plain data: no pickle runs code
        s = state["settings"]
        enc = AutoModel.from_pretrained(Path(folder) / ENCODER_DIR)
        tok = AutoTokenizer.from_pretrained(Path(folder) / ENCODER_DIR)
        proj = torch.nn.Linear(enc.config.hidden_size, len(s["levels"]))
        proj.load_state_dict(state["proj"])
        model = cls(s, enc, tok, proj, FSQ(levels=list(s["levels"])))
        if device != "cpu":
            for m in model.modules():
                m.to(device)
        return model

    def save(self, folder: Path) -> None:
        import torch

        self.encoder.save_pretrained(Path(folder) / ENCODER_DIR)
        self.tok.save_pretrained(Path(folder) / ENCODER_DIR)
        # the settings travel with the weights as provenance (snapshot: not a read of them); a loaded
        # model takes its fields (levels, schedule, backbone) from them, the search its own from the config
        torch.save({"proj": self.proj.state_dict(), "settings": snapshot(self.s), "fsq": FSQ_VERSION},
                   Path(folder) / MODEL_FILE)

    def modules(self) -> list[Any]:
        return [self.encoder, self.proj, self.fsq]

    def parameters(self) -> list[Any]:
        return list(self.encoder.parameters()) + list(self.proj.parameters())

    def batch(self, texts: Sequence[str | tuple[str, str]], k: int, max_len: int):
        """Token ids ``[CLS] [QCR0..QCR{k-1}] text [SEP]`` (pairs: title [SEP] text) and the mask."""
        import torch

        if k > len(self.special):
            raise ConfigError(f"K = {k} codes but the model has {len(self.special)} special tokens")
        if texts and isinstance(texts[0], tuple):
            enc = self.tok([t[0] for t in texts], [t[1] for t in texts], padding=True, truncation="only_second",
                           max_length=max_len + 2, return_tensors="pt")
        else:
            enc = self.tok(list(texts), padding=True, truncation=True, max_length=max_len + 2, return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        n = ids.shape[0]
        special = torch.tensor(self.special[:k], dtype=ids.dtype).expand(n, k)
        ids = torch.cat([ids[:, :1], special, ids[:, 1:]], 1)
        mask = torch.cat([mask[:, :1], torch.ones(n, k, dtype=mask.dtype), mask[:, 1:]], 1)
        return ids, mask

    def pre(self, ids, mask, k: int):
        dev = next(self.encoder.parameters()).device
        h = self.encoder(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state[:, 1:1 + k]
        return prequant(self.fsq, self.proj(h).float())

    def encode(self, texts: Iterable[str | tuple[str, str]], max_len: int, batch_size: int = 64,
               n: int | None = None) -> np.ndarray:
        """Code ids [N, K] (K = the last stage's), inference mode, in the smallest integer type that holds
        the codebook (uint16 for the paper's 3,125 codes: 4.4 GB for 8.8M passages x K 250, not 8.8 GB
        in int32), filled batch by batch (never a list of batches beside their concatenation).
        ``texts``: a sequence, or an iterable read a batch at a time with ``n`` its length (a corpus
        streamed from its file); a count other than ``n`` fails."""
        torch = torch_for(self.s)
        k = codes_k(self.s)
        self.encoder.eval()
        if n is None:
            texts = texts if isinstance(texts, Sequence) else list(texts)
            n = len(texts)
        out = np.zeros((n, k), code_dtype(codebook_size(self.s["levels"])))
        i = 0
        with torch.inference_mode():
            for batch in counted_batches(texts, n, batch_size, "QCR encode", "text", bar=False):
                ids, mask = self.batch(batch, k, max_len)
                out[i:i + len(batch)] = code_ids(self.fsq, self.pre(ids, mask, k)).cpu().numpy()
                i += len(batch)
        return out


#: the most float32 distances Eq. 3 or the entropy loss holds at once (512 MB). Above it the loss runs
#: in row chunks, each under activation checkpointing (its distances are recomputed in the backward
#: pass instead of kept): at the paper's last stage (batch 2,048, K 250) Eq. 3 alone is a [512,000 x
#: 512,000] matrix, 1 TB in float32. On the CPU, Eq. 3 past it takes the fused kernel instead
#: (:mod:`harness.methods.qcr.fused`: no distances held, each minimum's index kept). At or below it the
#: loss is the one-piece computation, bit for bit (every smoke, small and ci batch is far below).
LOSS_CHUNK_ELEMENTS = 1 << 27


def _rows(n: int, per_row: int, max_elements: int) -> int:
    """Rows per chunk so that a chunk holds at most ``max_elements`` (at least one row)."""
    return max(1, max_elements // max(1, per_row)) if n * per_row > max_elements else n


def _chunked(fn, x, rows: int, *rest):
    """``fn(x[i:i+rows], *rest)`` over row chunks, checkpointed when a gradient is being recorded."""
    import torch
    from torch.utils.checkpoint import checkpoint

    grad = torch.is_grad_enabled() and (x.requires_grad or any(getattr(r, "requires_grad", False) for r in rest))
    return [checkpoint(fn, x[i:i + rows], *rest, use_reentrant=False) if grad else fn(x[i:i + rows], *rest)
            for i in range(0, x.shape[0], rows)]


def _late_interaction(q, d):
    import torch

    b, k, dim = q.shape
    p, k2, _ = d.shape
    qf, df = q.reshape(b * k, dim), d.reshape(p * k2, dim)
    # exact differences (the matmul form cancels badly near 0); cdist's gradient is 0 at distance 0
    dist = torch.cdist(qf, df, compute_mode="donot_use_mm_for_euclid_dist").view(b, k, p, k2)
    return (-dist).max(dim=3).values.sum(dim=1)


def _fast_path(x) -> bool:
    """Whether the loss takes the CUDA path for tensor ``x`` (on CUDA; the CPU keeps cdist's bits)."""
    return bool(x.is_cuda)


def _late_interaction_gpu(q, d):
    """:func:`_late_interaction` for CUDA tensors: the same exact differences summed over the code's
    few dimensions, but the minimum is taken over squared distances and only the [B, K, P] minima are
    square-rooted (sqrt is monotonic: the same values), with cdist's gradient 0 at distance 0. cdist's
    difference form has no fast CUDA backward: at the paper's stage shapes it was the whole step."""
    b, k, dim = q.shape
    p, k2, _ = d.shape
    sq = None
    for c in range(dim):  # dim = len(levels): 5 in the paper
        diff = q[:, :, c].reshape(b, k, 1, 1) - d[:, :, c].reshape(1, 1, p, k2)
        sq = diff * diff if sq is None else sq + diff * diff
    return (-_safe_sqrt(sq.min(dim=3).values)).sum(dim=1)


def _safe_sqrt(sq):
    """sqrt of squared distances with cdist's gradient at 0 (0, not sqrt's infinity)."""
    import torch

    pos = sq > 0
    return torch.where(pos, torch.where(pos, sq, torch.ones_like(sq)).sqrt(), torch.zeros_like(sq))


def late_interaction(q, d, max_elements: int = LOSS_CHUNK_ELEMENTS):
    """Eq. 3 for every query-document pair: q [B, K, d], d [P, K', d] -> [B, P],
    ``sum_i max_j -||q_i - d_j||_2``. Past ``max_elements`` distances: on CUDA in checkpointed query
    chunks; on the CPU in one fused pass that keeps each minimum's index, not the distances
    (:mod:`harness.methods.qcr.fused`)."""
    import torch

    b, k, _ = q.shape
    fn = _late_interaction_gpu if _fast_path(q) else _late_interaction
    rows = _rows(b, k * d.shape[0] * d.shape[1], max_elements)
    if rows >= b:
        return fn(q, d)
    from harness.methods.qcr import fused  # numba: imported where used, not by the plan

    if not _fast_path(q) and fused.supports(q, d):
        # the CPU past the budget: one pass, no distance matrix (cdist's chunks: ~2.7 h projected for a step's
        # loss at the paper's last stage on 2 cores); below it every batch keeps cdist's bits
        return fused.late_interaction(q, d)
    return torch.cat(_chunked(fn, q, rows, d))


def _code_probs(z, codebook):
    """(softmax(-||zeta - z||) over the codebook, one-hot of its arg-max), rows of ``z``."""
    import torch

    # the exact-difference form: cdist's matmul form (its default past 25 rows) takes MKL VML's sqrt,
    # whose bits depend on the CPU (harness.numerics); the codebook has only len(levels) dimensions
    if _fast_path(z):  # the same exact differences; cdist's difference form has no fast CUDA backward
        dist = _safe_sqrt(((z[:, None, :] - codebook[None, :, :]) ** 2).sum(-1))
    else:
        dist = torch.cdist(z, codebook, compute_mode="donot_use_mm_for_euclid_dist")
    p = (-dist).softmax(-1)
    return p, torch.nn.functional.one_hot(p.argmax(-1), codebook.shape[0]).to(p.dtype)


def _straight_through_sum(z, codebook):
    p, hard = _code_probs(z, codebook)
    return (hard + p - p.detach()).sum(0)


def entropy_loss(z, codebook, max_elements: int = LOSS_CHUNK_ELEMENTS):
    """Eq. 4-5: entropy (nats) of the batch-averaged crisp code distribution of the pre-rounded codes
    ``z`` [N, d] over ``codebook`` [C, d]; forward = one-hot of the nearest entry, backward = the
    gradient of softmax(-||zeta - z||). Returns (entropy, batch-averaged distribution). Past
    ``max_elements`` distances the [N, C] matrices are built in row chunks."""
    import torch

    rows = _rows(z.shape[0], codebook.shape[0], max_elements)
    if rows >= z.shape[0]:
        p, hard = _code_probs(z, codebook)
        p_star = (hard + p - p.detach()).mean(0)
    else:
        p_star = torch.stack(_chunked(_straight_through_sum, z, rows, codebook)).sum(0) / z.shape[0]
    return -(p_star * torch.log(p_star.clamp(min=1e-12))).sum(), p_star.detach()


def loss_peak_elements(batch: int, k: int, codebook: int, max_elements: int = LOSS_CHUNK_ELEMENTS) -> int:
    """The most float32 distances one piece of the QCR loss holds for ``batch`` queries and ``batch``
    documents of ``k`` codes each (Eq. 3 per query: k x batch x k; the entropy per code: |C|)."""
    eq3_row, codes = k * batch * k, 2 * batch * k
    return max(_rows(batch, eq3_row, max_elements) * eq3_row, _rows(codes, codebook, max_elements) * codebook)


def qcr_loss(q, d, codebook, *, temperature: float, entropy_weight: float):
    """Contrastive loss over in-batch documents (document i is the positive of query i) minus
    ``entropy_weight`` x the code entropy of queries and documents together. Returns (loss, parts)."""
    import torch

    scores = late_interaction(q, d) / temperature
    target = torch.arange(q.shape[0], device=q.device)
    lc = torch.nn.functional.cross_entropy(scores, target)
    parts = {"contrastive": float(lc.detach())}
    loss = lc
    if entropy_weight > 0:
        h, _ = entropy_loss(torch.cat([q.reshape(-1, q.shape[-1]), d.reshape(-1, d.shape[-1])]), codebook)
        loss = lc - entropy_weight * h
        parts["entropy"] = float(h.detach())
    return loss, parts
