"""Is a backbone really pretrained? Two checks that a randomly initialised model of the same
configuration fails (issue "Stand-ins that learn", item 1; docs/backbones.md holds what they showed):

- ``mlm_probe``: where the model has a masked-LM head, its top predictions for masked words in
  plain sentences ("Paris is the capital of [MASK].") — hits@k over ``PROBES``;
- ``zero_shot``: the run of the model used as a retriever with no training on a BEIR-style test
  collection (dense: mean-pooled last hidden states, dot product; sparse, where it has an MLM head:
  SPLADE's max over positions of log(1 + ReLU(logits))), for the harness's evaluation to score.

``random_twin`` builds the control: the same architecture with fresh weights (the tokenizer is the
backbone's). ``python -m harness bench backbones`` runs both checks on each configured backbone and
its twin.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: masked sentences and the words a pretrained English masked LM puts in its top 5 (any one counts)
PROBES: tuple[tuple[str, frozenset[str]], ...] = (
    ("Paris is the capital of [MASK].", frozenset({"france"})),
    ("The sun rises in the [MASK].", frozenset({"east", "morning", "sky"})),
    ("Water is made of hydrogen and [MASK].", frozenset({"oxygen"})),
    ("She drank a cup of hot [MASK].", frozenset({"tea", "coffee", "chocolate", "water", "milk"})),
    ("Monday, Tuesday, [MASK], Thursday.", frozenset({"wednesday"})),
    ("The doctor works at the [MASK].", frozenset({"hospital", "clinic", "office"})),
    ("He plays the [MASK] in a rock band.", frozenset({"guitar", "drums", "bass", "piano"})),
    ("One, two, three, [MASK], five.", frozenset({"four"})),
)


@dataclass
class Loaded:
    """A backbone in memory: tokenizer, encoder and (where it has one) masked-LM model."""
    tokenizer: Any
    encoder: Any           # returns last_hidden_state
    mlm: Any | None        # returns logits over the vocabulary (shares the encoder's weights)


def load(path: str, mlm_head: bool) -> Loaded:
    """Backbone at ``path`` (a folder ``from_pretrained`` reads), in eval mode."""
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if mlm_head:
        mlm = AutoModelForMaskedLM.from_pretrained(path).eval()
        return Loaded(tok, mlm.base_model, mlm)
    return Loaded(tok, AutoModel.from_pretrained(path).eval(), None)


def random_twin(path: str, mlm_head: bool, seed: int = 0) -> Loaded:
    """The same architecture as the backbone at ``path``, freshly initialised (its tokenizer)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(path)
    if mlm_head:
        mlm = AutoModelForMaskedLM.from_config(config).eval()
        return Loaded(AutoTokenizer.from_pretrained(path), mlm.base_model, mlm)
    return Loaded(AutoTokenizer.from_pretrained(path), AutoModel.from_config(config).eval(), None)


def mlm_probe(m: Loaded, k: int = 5, probes: Sequence[tuple[str, frozenset[str]]] = PROBES) -> dict[str, Any]:
    """Top-``k`` predictions for each probe's [MASK]; ``hits`` = probes with an expected word in them."""
    import torch

    if m.mlm is None:
        return {"hits": None, "of": len(probes), "why": "no masked-LM head"}
    rows, hits = [], 0
    with torch.inference_mode():
        for text, want in probes:
            text = text.replace("[MASK]", m.tokenizer.mask_token)
            enc = m.tokenizer(text, return_tensors="pt")
            pos = (enc["input_ids"][0] == m.tokenizer.mask_token_id).nonzero()[0, 0]
            top = m.mlm(**enc).logits[0, pos].topk(k).indices.tolist()
            words = [m.tokenizer.decode([t]).strip().lower() for t in top]
            hit = bool(want & set(words))
            hits += hit
            rows.append({"probe": text, "top": words, "hit": hit})
    return {"hits": hits, "of": len(probes), "k": k, "probes": rows}


def _batches(texts: Sequence[str], size: int):
    for i in range(0, len(texts), size):
        yield texts[i:i + size]


def encode(m: Loaded, texts: Sequence[str], kind: str, max_length: int = 256, batch: int = 32):
    """Dense (``kind`` dense: mean-pooled last hidden states, float32 array) or SPLADE (``kind``
    sparse: max over positions of log(1 + ReLU(logits)), scipy CSR) vectors of ``texts``."""
    import scipy.sparse as sp
    import torch

    out = []
    with torch.inference_mode():
        for chunk in _batches(list(texts), batch):
            enc = m.tokenizer(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            mask = enc["attention_mask"].unsqueeze(-1).float()
            if kind == "dense":
                h = m.encoder(**enc).last_hidden_state
                out.append(((h * mask).sum(1) / mask.sum(1).clamp(min=1)).numpy())
            else:
                logits = m.mlm(**enc).logits
                w = (torch.log1p(torch.relu(logits)) * mask).amax(1)
                out.append(sp.csr_matrix(w.numpy()))
    return np.vstack(out).astype(np.float32) if kind == "dense" else sp.vstack(out).tocsr()


def zero_shot(m: Loaded, docs: Sequence[tuple[str, str]], queries: Sequence[tuple[str, str]],
              kind: str = "dense", k: int = 100, max_length: int = 256) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """``m`` as an untrained retriever: ``docs`` (id, text) and ``queries`` (id, text) encoded the
    same way, exact inner-product top-``k``. Returns the run ({qid: {docid: score}}, for
    harness.evaluate.ir.evaluate) and what it rests on (queries, documents, kind; for SPLADE the
    mean number of active terms per document)."""
    d = encode(m, [t for _, t in docs], kind, max_length)
    q = encode(m, [t for _, t in queries], kind, max_length)
    scores = q @ d.T
    scores = scores.toarray() if hasattr(scores, "toarray") else np.asarray(scores)
    k = min(k, scores.shape[1])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    run = {qid: {docs[j][0]: float(scores[i, j]) for j in top[i]} for i, (qid, _) in enumerate(queries)}
    info: dict[str, Any] = {"queries": len(queries), "documents": len(docs), "kind": kind}
    if kind == "sparse":
        info["active_terms_per_doc"] = float(d.getnnz(axis=1).mean())
    return run, info
