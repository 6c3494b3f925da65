"""E_θ and T (paper §4.1) and the training objective (§4.2): the vocabulary-space encoder towers,
their save/load, the differentiable max-pooled projection, binary token representations, the losses.

The gradient of the max-pooled projection is computed exactly but without materialising the
[tokens x vocabulary] logits twice: the forward keeps each dimension's arg-max token, the
backward scatters only the non-zero gradient dimensions (top-k training touches ~k per row).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Doc
from harness.errors import ConfigError, DataError
from harness.models.backbones import load_mlm, load_tokenizer
from harness.models.projection import BLOCK_TOKENS, segment_max_torch
from harness.models.runtime import quiet_transformers, torch_for
from harness.progress import chunks

MODEL_SETTINGS = "vdr.json"
HEAD_FILE = "vdr_head.pt"
CHUNK_TOKENS = BLOCK_TOKENS  # tokens projected at once (harness.models.projection)


def max_project(h, lengths: Sequence[int], weight, bias=None):
    """max over the first ``lengths[b]`` tokens of ``h[b] @ weight.T (+ bias)``: values [B, V] and
    the arg-max token of every dimension [B, V] (no autograd; the shared kernel of
    :mod:`harness.models.projection`, in numpy under portable numerics)."""
    import torch

    starts = np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])
    with torch.no_grad():
        packed = torch.cat([h[b, : lengths[b]] for b in range(h.shape[0])])
        return segment_max_torch(packed, weight, bias, starts)


def _max_project_function():
    import torch

    class MaxProject(torch.autograd.Function):
        """Differentiable max-pooled vocabulary projection (see the module doc)."""

        @staticmethod
        def forward(ctx, h, weight, bias, lengths):
            values, arg = max_project(h, lengths, weight, bias)
            ctx.save_for_backward(h, weight, arg)
            ctx.has_bias = bias is not None
            return values

        @staticmethod
        def backward(ctx, grad):
            h, weight, arg = ctx.saved_tensors
            gh = torch.zeros_like(h) if ctx.needs_input_grad[0] else None
            gw = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
            gb = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
            for b in range(grad.shape[0]):
                nz = torch.nonzero(grad[b]).squeeze(1)
                if nz.numel() == 0:
                    continue
                g = grad[b, nz].unsqueeze(1)
                idx = arg[b, nz]
                if gh is not None:
                    gh[b].index_add_(0, idx, g * weight[nz])
                if gw is not None:
                    gw.index_add_(0, nz, g * h[b, idx])
            return gh, gw, gb, None

    return MaxProject


_MAXPROJECT = None


def max_project_grad(h, lengths, weight, bias=None):
    global _MAXPROJECT
    if _MAXPROJECT is None:
        _MAXPROJECT = _max_project_function()
    return _MAXPROJECT.apply(h, weight, bias, list(lengths))


def elu1p(x):
    """elu1p(x) = x + 1 for x >= 0, e^x otherwise (paper eq. 1) = elu(x) + 1."""
    import torch.nn.functional as F

    return F.elu(x) + 1.0


def passage_text(doc: Doc) -> str:
    """vsearch's passage string: ``"<title> [SEP] <text>"`` (text alone without a title)."""
    return f"{doc.title} [SEP] {doc.text}" if doc.title else doc.text


class VDREncoder:
    """One tower of E_θ (backbone + vocabulary projection) and T, for one tokenizer."""

    def __init__(self, mlm, tokenizer, s: Mapping[str, Any], ln=None) -> None:
        self.mlm, self.tok, self.s, self.ln = mlm, tokenizer, s, ln  # not dict(s): a copy reads every setting
        self.skip = int(s["skip_vocab"])
        self.vocab = len(tokenizer)
        if not 0 <= self.skip < self.vocab:
            raise ConfigError(f"skip_vocab {self.skip} must lie in [0, {self.vocab}) (the tokenizer's vocabulary)")
        self.dims = self.vocab - self.skip
        if self.tok.padding_side != "right":
            self.tok.padding_side = "right"
        self.torch = torch_for(s)
        self.device = "cpu"
        if s["projection"] == "mlm-head" and not hasattr(getattr(mlm, "cls", None), "predictions"):
            raise ConfigError("projection 'mlm-head' needs a BERT-style MLM head (model.cls.predictions)",
                              fix="use projection: vsearch")

    def to(self, device: str) -> VDREncoder:
        """Move the tower to ``device`` (inputs follow; outputs come back as CPU scipy matrices)."""
        self.mlm.to(device)
        if self.ln is not None:
            self.ln.to(device)
        self.device = device
        return self

    # ---- construction / persistence -------------------------------------------------------
    @classmethod
    def from_backbone(cls, cfg: Mapping[str, Any], s: Mapping[str, Any]) -> VDREncoder:
        quiet_transformers()
        torch = torch_for(s)
        mlm = load_mlm(cfg, s["backbone"])
        ln = torch.nn.LayerNorm(mlm.config.hidden_size) if s["projection"] == "vsearch" else None
        return cls(mlm, load_tokenizer(cfg, s["backbone"]), s, ln)

    @classmethod
    def load(cls, folder: Path, s: Mapping[str, Any]) -> VDREncoder:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        quiet_transformers()
        torch = torch_for(s)
        mlm = AutoModelForMaskedLM.from_pretrained(folder)
        ln = None
        if s["projection"] == "vsearch":
            ln = torch.nn.LayerNorm(mlm.config.hidden_size)
            ln.load_state_dict(torch.load(Path(folder) / HEAD_FILE, weights_only=True))
        enc = cls(mlm, AutoTokenizer.from_pretrained(folder), s, ln)
        enc.eval()
        return enc

    def save(self, folder: Path) -> None:
        self.mlm.save_pretrained(folder)
        self.tok.save_pretrained(folder)
        if self.ln is not None:
            self.torch.save(self.ln.state_dict(), Path(folder) / HEAD_FILE)

    def parameters(self) -> list:
        return list(self.mlm.parameters()) + (list(self.ln.parameters()) if self.ln is not None else [])

    def train(self) -> None:
        self.mlm.train()
        if self.ln is not None:
            self.ln.train()

    def eval(self) -> None:
        self.mlm.eval()
        if self.ln is not None:
            self.ln.eval()

    # ---- text -> tensors -------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], max_len: int):
        batch = self.tok(list(texts), padding=True, truncation=True, max_length=int(max_len), return_tensors="pt")
        return batch.to(self.device) if self.device != "cpu" else batch

    def _projection(self):
        emb = self.mlm.get_input_embeddings().weight
        if self.s["projection"] == "vsearch":
            return emb[self.skip :], None
        dec = self.mlm.get_output_embeddings()
        return dec.weight[self.skip :], (dec.bias[self.skip :] if dec.bias is not None else None)

    def _hidden(self, batch):
        out = self.mlm.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  token_type_ids=batch.get("token_type_ids")).last_hidden_state
        if self.s["projection"] == "vsearch":
            return self.ln(out)
        return self.mlm.cls.predictions.transform(out)

    def pooled(self, batch, grad: bool):
        """elu1p(max-pooled projection) [B, dims] (dimension j is vocabulary id skip + j)."""
        h = self._hidden(batch)
        lengths = batch["attention_mask"].sum(1).tolist()
        w, b = self._projection()
        if grad:
            return elu1p(max_project_grad(h, lengths, w, b))
        values, _ = max_project(h.detach(), lengths, w.detach(), None if b is None else b.detach())
        return elu1p(values)

    def binary(self, input_ids):
        """T(x) [B, dims] as float: 1 for every input id >= skip_vocab."""
        torch = self.torch
        out = torch.zeros(input_ids.shape[0], self.dims, device=input_ids.device)
        ids = input_ids - self.skip
        valid = ids >= 0
        rows = torch.arange(input_ids.shape[0], device=input_ids.device).unsqueeze(1).expand_as(ids)
        out[rows[valid], ids[valid]] = 1.0
        return out

    def topk_mask(self, values, input_ids):
        """Top-k dimensions of each row, unioned with the input's own tokens (activate_lexical)."""
        torch = self.torch
        k = min(int(self.s["topk"]), values.shape[1])
        mask = torch.zeros_like(values, dtype=torch.bool)
        mask.scatter_(1, values.detach().topk(k, dim=1).indices, True)
        if self.s.get("activate_lexical", True):
            mask |= self.binary(input_ids).bool()
        return mask

    def embed_sparse(self, texts: Iterable[str], max_len: int, batch_size: int | None = None):
        """E_θ(x) of each text as a scipy CSR [N, vocab] float32 (top-k ∪ lexical; no grad)."""
        import scipy.sparse as sp

        torch = self.torch
        bs = batch_size or int(self.s.get("encode_batch_size", 64))
        parts = []
        with torch.inference_mode():
            for chunk in chunks(texts, bs):   # a Sequence, or passages streamed from the corpus file
                batch = self.tokenize(chunk, max_len)
                values = self.pooled(batch, grad=False)
                values = values * self.topk_mask(values, batch["input_ids"])
                parts.append(_to_csr(values.float().cpu().numpy(), self.skip, self.vocab))
        if not parts:
            return sp.csr_matrix((0, self.vocab), dtype=np.float32)
        return stack_csr(parts, self.vocab)

    def binary_sparse(self, texts: Sequence[str], max_len: int):
        """T(x) of each text as a scipy CSR [N, vocab] float32 of ones (tokenizer only)."""
        enc = self.tok(list(texts), truncation=True, max_length=int(max_len))["input_ids"]
        return binary_csr(enc, self.skip, self.vocab)


class VDRModel:
    """The question and passage towers (one tower when ``shared_encoder``; vsearch's VDR config
    has separate ones) with the settings they were trained with."""

    TOWERS = ("question_encoder", "passage_encoder")

    def __init__(self, q: VDREncoder, p: VDREncoder, s: Mapping[str, Any]) -> None:
        self.q, self.p, self.s = q, p, s
        self.tok, self.skip, self.vocab, self.dims = q.tok, q.skip, q.vocab, q.dims

    @property
    def shared(self) -> bool:
        return self.p is self.q

    @classmethod
    def from_backbone(cls, cfg: Mapping[str, Any], s: Mapping[str, Any]) -> VDRModel:
        q = VDREncoder.from_backbone(cfg, s)
        p = q if s.get("shared_encoder") else VDREncoder.from_backbone(cfg, s)
        return cls(q, p, s)

    @classmethod
    def load(cls, folder: Path, threads: int | None = None, device: str = "cpu") -> VDRModel:
        """The trained towers of ``folder`` on ``device`` (index and search jobs: the section's,
        :func:`harness.models.runtime.encode_device`; encodings come back as CPU scipy matrices)."""
        folder = Path(folder)
        if not (folder / MODEL_SETTINGS).exists():
            raise DataError(f"{folder} is not a VDR/SVDR model folder (no {MODEL_SETTINGS})",
                            fix=f"train it first: python -m harness train --job <model id> --out {folder}")
        s = json.loads((folder / MODEL_SETTINGS).read_text())
        if threads is not None:
            s["torch_threads"] = threads
        q = VDREncoder.load(folder / cls.TOWERS[0], s)
        p = q if s.get("shared_encoder") else VDREncoder.load(folder / cls.TOWERS[1], s)
        model = cls(q, p, s)
        return model.to(device) if device != "cpu" else model

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        self.q.save(folder / self.TOWERS[0])
        if not self.shared:
            self.p.save(folder / self.TOWERS[1])
        keep = ("backbone", "projection", "skip_vocab", "topk", "activate_lexical", "q_max_len", "p_max_len",
                "encode_batch_size", "torch_threads", "strip_question_mark", "shared_encoder")
        (folder / MODEL_SETTINGS).write_text(json.dumps({k: self.s.get(k) for k in keep}, indent=2) + "\n")

    def parameters(self) -> list:
        ps = self.q.parameters() + ([] if self.shared else self.p.parameters())
        return list({id(x): x for x in ps}.values())

    def train(self) -> None:
        self.q.train()
        self.p.train()

    def eval(self) -> None:
        self.q.eval()
        self.p.eval()

    def to(self, device: str) -> VDRModel:
        self.q.to(device)
        self.p.to(device)
        return self

    def question(self, text: str) -> str:
        text = text.strip()
        if self.s.get("strip_question_mark") and text.endswith("?"):
            text = text[:-1]
        return text

    def embed_questions(self, texts: Sequence[str], batch_size: int | None = None):
        """E_θ(q) of prepared question strings (CSR [N, vocab])."""
        return self.q.embed_sparse(texts, self.s["q_max_len"], batch_size)

    def embed_passages(self, texts: Iterable[str], max_len: int | None = None, batch_size: int | None = None):
        """E_θ(p) of passage strings (see passage_text) (CSR [N, vocab])."""
        return self.p.embed_sparse(texts, max_len or self.s["p_max_len"], batch_size)

    def binary_questions(self, texts: Sequence[str]):
        """T(q) of prepared question strings (CSR [N, vocab] of ones)."""
        return self.q.binary_sparse(texts, self.s["q_max_len"])

    def encode_questions(self, texts: Sequence[str]):
        return self.embed_questions([self.question(t) for t in texts])

    def encode_passages(self, docs: Iterable[Doc]):
        return self.embed_passages(passage_text(d) for d in docs)


def stack_csr(parts: list, vocab: int):
    """``sp.vstack(parts, format="csr")``, each part freed once copied (``parts`` is emptied): the
    stacked matrix is held once, not beside its parts (E(D) of NQ's 21M passages: ~180 GiB). Index
    arrays are int32 where the counts fit, int64 past 2^31 entries, as scipy chooses."""
    import scipy.sparse as sp

    n = sum(p.shape[0] for p in parts)
    nnz = sum(p.nnz for p in parts)
    idx = np.int64 if max(nnz, n, vocab) > np.iinfo(np.int32).max else np.int32
    data, indices, indptr = np.empty(nnz, np.float32), np.empty(nnz, idx), np.empty(n + 1, idx)
    indptr[0] = r = z = 0
    parts.reverse()   # popped from the end: first part first
    while parts:
        part = parts.pop()
        rows, m = part.shape[0], part.nnz
        data[z:z + m], indices[z:z + m] = part.data, part.indices
        indptr[r + 1:r + 1 + rows] = part.indptr[1:] + z
        r, z = r + rows, z + m
        del part
    return sp.csr_matrix((data, indices, indptr), shape=(n, vocab), copy=False)


def _to_csr(dense: np.ndarray, skip: int, vocab: int):
    import scipy.sparse as sp

    rows, cols = np.nonzero(dense)
    m = sp.csr_matrix((dense[rows, cols].astype(np.float32), (rows, cols + skip)), shape=(dense.shape[0], vocab))
    m.sort_indices()
    return m


def binary_csr(token_ids: Sequence[Sequence[int]], skip: int, vocab: int):
    """Binary [N, vocab] CSR (float32 ones) of token-id lists; ids below ``skip`` are dropped."""
    import scipy.sparse as sp

    indptr = [0]
    indices: list[np.ndarray] = []
    for ids in token_ids:
        u = np.unique(np.asarray(ids, dtype=np.int64))
        u = u[u >= skip]
        indices.append(u)
        indptr.append(indptr[-1] + u.size)
    cols = np.concatenate(indices) if indices else np.zeros(0, np.int64)
    return sp.csr_matrix((np.ones(cols.size, np.float32), cols.astype(np.int32), np.asarray(indptr, np.int64)),
                         shape=(len(indptr) - 1, vocab))


# --------------------------------------------------------------------------------------------
# loss
# --------------------------------------------------------------------------------------------
def contrastive(a, b, temperature: float = 1.0):
    """Bidirectional contrastive loss of §4.2, mean over the batch: q→p over all rows of ``b``
    (positives first, then negatives), p→q for each positive ``b[i]`` over all rows of ``a``."""
    import torch
    import torch.nn.functional as F

    n = a.shape[0]
    scores = a @ b.T / temperature
    target = torch.arange(n, device=scores.device)
    return F.cross_entropy(scores, target) + F.cross_entropy(scores[:, :n].T, target)


def svdr_loss(s: Mapping[str, Any], eq_dense, ep_dense, q_mask, p_mask, tq, tp):
    """The training objective of ``s`` from full and top-k vectors and binary T(q), T(p)."""
    t = float(s.get("temperature", 1.0))
    eq, ep = eq_dense * q_mask, ep_dense * p_mask
    if s["loss"] == "paper":
        loss = contrastive(eq, ep, t)
        if s["sp_loss"]:
            loss = loss + (contrastive(eq, tp, t) + contrastive(tq, ep, t)) / 2
        return loss
    if s["sp_loss"]:  # vsearch compute_vdr_loss, semi=True: the mean of four terms
        return (contrastive(eq, ep_dense, t) + contrastive(eq_dense, ep, t)
                + contrastive(tq, ep_dense, t) + contrastive(eq_dense, tp, t)) / 4
    return (contrastive(eq, ep_dense, t) + contrastive(tq, ep_dense, t)) / 2  # vsearch, semi=False
