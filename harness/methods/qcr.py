"""QCR (anonymous, 2024): queries and documents as bags of learnt discrete codes in a Lucene index.

Model (§3.1): K special tokens ``[QCR0] .. [QCR{K-1}]`` are placed after ``[CLS]`` in front of the
text; the backbone's outputs at those K positions go through one linear projection to d = len(levels)
dimensions and FSQ (PyPI ``vector-quantize-pytorch`` 1.32.0, class ``FSQ``; bound
``tanh(z + shift) * half_l - offset`` with ``half_l = (L - 1)(1 + 1e-3) / 2``, rounding with a
straight-through estimator, codes scaled by ``1 / (L // 2)``, code id = sum of level digits times
cumulative products of the levels). A text becomes K code ids in ``[0, |C|)``.

Training (§3.2-3.3): the score of Eq. 3, ``s(q, d) = sum_i max_j -||z_qi - z_dj||_2`` over the
*pre-rounded* FSQ representations (the bounded values before rounding, on the code scale), as
softmax cross-entropy over the in-batch documents (``temperature``: the paper gives none), minus
``entropy_weight`` times the entropy of the batch-averaged crisp code distribution (Eq. 4-5: the
one-hot of the nearest codebook entry in the forward pass, the gradient of the softmax over
``-||zeta - z||`` in the backward pass). Large batches with GradCache (:func:`grad_cache_step`:
representations computed without a graph in sub-batches of ``chunk_size``, the loss and its gradient
w.r.t. the representations on the whole batch, then each sub-batch re-encoded with the same RNG
state and back-propagated with its cached gradient). The batch size and K follow ``schedule`` (the
paper: 256 -> 2048 and 150 -> 250 over 4,000 steps; the stages are config). Training pairs:
``supervised`` (the train split's questions and gold passages), ``crops`` (a random span of each
passage as its pseudo-query, as Contriever's random cropping: the stand-in for generated queries
where no generator runs offline) or ``generated`` (queries from ``generator``, App. A.1's prompt).

Retrieval (§3.4, §4.2): codes as position-prefixed tokens (``0_c52 1_c113 ...``) in a pre-tokenized
Lucene index searched with BM25 (``k1``, ``b``); the top ``rescore_depth`` rescored by Eq. 3 with a
precomputed |C| x |C| distance matrix between code vectors; "w/ words": codes and the analysed words
in one Lucene document (and query); "w/ words + RRF": weighted reciprocal rank fusion of the code run
and the word run (``rrf_weight`` on the codes). k-means baseline (§4.4): token vectors of the
profile's dense encoder clustered with faiss, every token replaced by its centroid id.

Systems: ``qcr`` (codes), ``qcr.rescore``, ``qcr.nopos`` (codes without positions), ``qcr.words``,
``qcr.rrf``; per variant ``v`` (``methods.qcr.variants``): ``qcr.v``, ``qcr.v-rescore`` and, for
``full_variants``, ``qcr.v-words``, ``qcr.v-rrf``; Figure 3 grid models ``qcr.g<B>x<K>``;
``qcr.kmeans``, ``qcr.kmeans-words``. Measure jobs: Figure 2 / A.2 / Table 2 (``qcr.analysis``),
Figure 3 (``qcr.fig3``) and the efficiency figures the paper lacks (``qcr.efficiency``).
"""
from __future__ import annotations

import copy
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import read_docids, write_docids
from harness.config import fragment_defaults
from harness.datasets import Doc, store
from harness.errors import ConfigError, DataError
from harness.methods.base import Context, training_keys, wants_gpu
from harness.plan import Job, Ref

SCHEMA = "qcr.schema.yaml"
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
CODES_FILE = "codes.npy"
MODEL_FILE = "qcr.pt"              # projection weights and settings beside the backbone's files
ENCODER_DIR = "encoder"
CENTROIDS = "centroids.npy"
FSQ_VERSION = "vector-quantize-pytorch==1.32.0"
#: keys of methods.qcr that never change a trained model
NOT_MODEL = ("positional", "k1", "b", "rescore_depth", "rrf_weight", "rrf_k", "rrf_codes", "words_system",
             "usage_threshold", "variants", "variant_overrides", "full_variants", "grid", "kmeans", "analysis",
             "timing_queries", "chunk_size", "generator")
#: settings a model's training reads (the model's identity; variants equal to the main model share it)
TRAIN_KEYS = ("backbone", "train_dataset", "levels", "schedule", "training_data", "crop", "entropy_weight",
              "temperature", "lr", "weight_decay", "warmup_ratio", "grad_clip", "precision", "q_max_len",
              "p_max_len", "max_train_questions")
_NESTED = ("crop", "generator", "grid", "kmeans", "analysis")


# --------------------------------------------------------------------------------------------
# settings


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.qcr with defaults (nested sections merged key by key); for a variant, the
    ``variant_overrides`` and the variant's settings on top; for a grid model ``g<B>x<K>`` one stage
    of ``grid.steps`` steps at batch B and K codes."""
    sec = cfg["methods"]["qcr"]
    s = {**copy.deepcopy(DEFAULTS), **sec}
    for k in _NESTED:
        s[k] = {**DEFAULTS.get(k, {}), **(sec.get(k) or {})}
    if variant is None:
        return s
    s.update(copy.deepcopy(s["variant_overrides"] or {}))
    if variant.startswith("grid-") and variant not in (s["variants"] or {}):
        b, k = grid_point(s, variant)
        steps = s["grid"].get("steps") or sum(st["steps"] for st in s["schedule"])
        s["schedule"] = [{"steps": int(steps), "batch_size": b, "codes": k}]
        return s
    if variant not in (s["variants"] or {}):
        raise ConfigError(f"unknown QCR variant {variant!r}; methods.qcr.variants defines: "
                          f"{', '.join(s['variants'] or {}) or '(none)'}")
    s.update(copy.deepcopy(s["variants"][variant]))
    return s


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in TRAIN_KEYS}


def codes_k(s: Mapping[str, Any]) -> int:
    """K at inference: the last stage's representation length."""
    return int(s["schedule"][-1]["codes"])


def max_codes(s: Mapping[str, Any]) -> int:
    return max(int(st["codes"]) for st in s["schedule"])


def codebook_size(levels: Sequence[int]) -> int:
    return int(np.prod([int(x) for x in levels]))


def grid_models(s: Mapping[str, Any]) -> list[str]:
    """Figure 3 models ``grid-b<i>k<j>``: batch_sizes[i] x codes[j] (indexes, so that table rows
    such as "smallest batch, shortest K" name the same system in every profile)."""
    return [f"grid-b{i}k{j}" for j in range(len(s["grid"]["codes"])) for i in range(len(s["grid"]["batch_sizes"]))]


def grid_point(s: Mapping[str, Any], name: str) -> tuple[int, int]:
    """(batch size, K) of grid model ``grid-b<i>k<j>``."""
    import re

    m = re.fullmatch(r"grid-b(\d+)k(\d+)", name)
    g = s["grid"]
    if not m or int(m.group(1)) >= len(g["batch_sizes"]) or int(m.group(2)) >= len(g["codes"]):
        raise ConfigError(f"unknown QCR grid model {name!r}; methods.qcr.grid defines {grid_models(s)}")
    return int(g["batch_sizes"][int(m.group(1))]), int(g["codes"][int(m.group(2))])


def check(s: Mapping[str, Any], where: str = "methods.qcr") -> None:
    for i, st in enumerate(s["schedule"]):
        if int(st["codes"]) + int(s["p_max_len"]) + 3 > 512:
            raise ConfigError(f"{where}.schedule[{i}]: K = {st['codes']} codes + p_max_len {s['p_max_len']} "
                              "text tokens exceed BERT's 512 positions", fix="lower codes or p_max_len")
    c = s["crop"]
    if c["min_ratio"] > c["max_ratio"]:
        raise ConfigError(f"{where}.crop: min_ratio {c['min_ratio']} > max_ratio {c['max_ratio']}")
    unknown = set(s["full_variants"] or []) - set(s["variants"] or {})
    if unknown:
        raise ConfigError(f"{where}.full_variants names {sorted(unknown)}, which methods.qcr.variants does not define")


# --------------------------------------------------------------------------------------------
# model


def _torch(s: Mapping[str, Any]):
    import torch

    torch.set_num_threads(int(s.get("torch_threads", 2)))
    return torch


def prequant(fsq, z):
    """FSQ's bounded value before rounding, on the code scale (``fsq.bound`` without its ``round_ste``):
    what Eq. 3 and Eq. 4 measure distances between."""
    import torch

    levels = fsq._levels.to(z.dtype)
    half_l = (levels - 1) * (1 + 1e-3) / 2
    offset = torch.where(fsq._levels % 2 == 0, 0.5, 0.0).to(z.dtype)
    shift = torch.atanh(offset / half_l)
    return (torch.tanh(z + shift) * half_l - offset) / (fsq._levels // 2).to(z.dtype)


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

        from harness.methods.dpr import _quiet_transformers
        from harness.models.backbones import load_encoder, load_tokenizer

        _quiet_transformers()
        enc = load_encoder(cfg, s["backbone"])
        tok = load_tokenizer(cfg, s["backbone"])
        tok.add_special_tokens({"additional_special_tokens": [f"[QCR{i}]" for i in range(max_codes(s))]})
        enc.resize_token_embeddings(len(tok))
        proj = torch.nn.Linear(enc.config.hidden_size, len(s["levels"]))
        return cls(s, enc, tok, proj, FSQ(levels=list(s["levels"])))

    @classmethod
    def load(cls, folder: Path) -> QCRModel:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from vector_quantize_pytorch import FSQ

        from harness.methods.dpr import _quiet_transformers

        _quiet_transformers()
        state = torch.load(Path(folder) / MODEL_FILE, weights_only=False)
        s = state["settings"]
        enc = AutoModel.from_pretrained(Path(folder) / ENCODER_DIR)
        tok = AutoTokenizer.from_pretrained(Path(folder) / ENCODER_DIR)
        proj = torch.nn.Linear(enc.config.hidden_size, len(s["levels"]))
        proj.load_state_dict(state["proj"])
        return cls(s, enc, tok, proj, FSQ(levels=list(s["levels"])))

    def save(self, folder: Path) -> None:
        import torch

        self.encoder.save_pretrained(Path(folder) / ENCODER_DIR)
        self.tok.save_pretrained(Path(folder) / ENCODER_DIR)
        torch.save({"proj": self.proj.state_dict(), "settings": dict(self.s), "fsq": FSQ_VERSION},
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

    def encode(self, texts: Sequence[str | tuple[str, str]], max_len: int, batch_size: int = 64) -> np.ndarray:
        """Code ids [N, K] (K = the last stage's), inference mode."""
        torch = _torch(self.s)
        k = codes_k(self.s)
        self.encoder.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                ids, mask = self.batch(texts[i:i + batch_size], k, max_len)
                out.append(code_ids(self.fsq, self.pre(ids, mask, k)).cpu().numpy())
        return np.concatenate(out).astype(np.int32) if out else np.zeros((0, k), np.int32)


# --------------------------------------------------------------------------------------------
# losses


def late_interaction(q, d):
    """Eq. 3 for every query-document pair: q [B, K, d], d [P, K', d] -> [B, P],
    ``sum_i max_j -||q_i - d_j||_2``."""
    import torch

    b, k, dim = q.shape
    p, k2, _ = d.shape
    qf, df = q.reshape(b * k, dim), d.reshape(p * k2, dim)
    # exact differences (the matmul form cancels badly near 0); cdist's gradient is 0 at distance 0
    dist = torch.cdist(qf, df, compute_mode="donot_use_mm_for_euclid_dist").view(b, k, p, k2)
    return (-dist).max(dim=3).values.sum(dim=1)


def entropy_loss(z, codebook):
    """Eq. 4-5: entropy (nats) of the batch-averaged crisp code distribution of the pre-rounded codes
    ``z`` [N, d] over ``codebook`` [C, d]; forward = one-hot of the nearest entry, backward = the
    gradient of softmax(-||zeta - z||). Returns (entropy, batch-averaged distribution)."""
    import torch

    # the exact-difference form: cdist's matmul form (its default past 25 rows) takes MKL VML's sqrt,
    # whose bits depend on the CPU (harness.numerics); the codebook has only len(levels) dimensions
    logits = -torch.cdist(z, codebook, compute_mode="donot_use_mm_for_euclid_dist")
    p = logits.softmax(-1)
    hard = torch.nn.functional.one_hot(p.argmax(-1), codebook.shape[0]).to(p.dtype)
    p_star = (hard + p - p.detach()).mean(0)
    return -(p_star * torch.log(p_star.clamp(min=1e-12))).sum(), p_star.detach()


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


def grad_cache_step(encode, groups: Sequence[Sequence[Any]], loss_fn, chunk: int):
    """One GradCache step (Gao et al., 2021) for multi-vector outputs: ``encode(items) -> [n, K, d]``
    for each group (queries, documents) in sub-batches of ``chunk`` without a graph; ``loss_fn(*reps)``
    on the whole batch and its gradient w.r.t. the representations; then every sub-batch re-encoded
    under the RNG state of its first pass and back-propagated with its slice of that gradient.
    Gradients accumulate in the parameters; returns (detached loss, parts)."""
    import torch

    reps, states = [], []
    for items in groups:
        parts_, st = [], []
        for i in range(0, len(items), chunk):
            st.append(torch.get_rng_state())
            with torch.no_grad():
                parts_.append(encode(items[i:i + chunk]))
        reps.append(torch.cat(parts_).detach().requires_grad_())
        states.append(st)
    loss, parts = loss_fn(*reps)
    loss.backward()
    for items, rep, st in zip(groups, reps, states):
        for j, i in enumerate(range(0, len(items), chunk)):
            rng = torch.get_rng_state()
            torch.set_rng_state(st[j])
            out = encode(items[i:i + chunk])
            torch.set_rng_state(rng)
            out.backward(rep.grad[i:i + chunk])
    return loss.detach(), parts


# --------------------------------------------------------------------------------------------
# training data


def crop_query(text: str, rng: random.Random, crop: Mapping[str, Any]) -> str:
    """A random contiguous span of ``text``'s words, of ratio in [min_ratio, max_ratio] (Contriever)."""
    words = text.split()
    if len(words) <= crop["min_words"]:
        return text
    ratio = rng.uniform(crop["min_ratio"], crop["max_ratio"])
    n = max(crop["min_words"], round(len(words) * ratio))
    start = rng.randrange(0, len(words) - n + 1)
    return " ".join(words[start:start + n])


GENERATOR_PROMPT = ("You are an expert search engine query generator. Your task is to create a concise and effective "
                    "query that could be used to retrieve a specific document provided by the user. The query should "
                    "consist of key terms or phrases that are highly relevant to the content of the document. Your "
                    "response must include only the generated query and nothing else. Document: {document}")


def generate_queries(model_name: str, docs: Sequence[Doc], *, max_new_tokens: int = 32, model=None,
                     tokenizer=None) -> list[str]:
    """App. A.1: one query per passage from a causal LM with the paper's prompt (greedy decoding).
    ``model``/``tokenizer`` may be given (the tests pass a randomly initialised tiny LM)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = tokenizer or AutoTokenizer.from_pretrained(model_name)
    lm = model or AutoModelForCausalLM.from_pretrained(model_name)
    lm.eval()
    out = []
    with torch.inference_mode():
        for d in docs:
            prompt = GENERATOR_PROMPT.format(document=f"{d.title}. {d.text}" if d.title else d.text)
            ids = tok(prompt, return_tensors="pt", return_token_type_ids=False)
            gen = lm.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
            out.append(tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip())
    return out


def training_pairs(cfg: Mapping[str, Any], s: Mapping[str, Any], data_dir: Path, rng: random.Random
                   ) -> tuple[list[tuple[str, str]], dict[str, Doc], dict[str, Any]]:
    """(query, positive doc id) pairs of ``training_data``, the corpus, and counts for meta.json."""
    docs = {d.id: d for d in store.iter_corpus(data_dir)}
    kind = s["training_data"]
    info: dict[str, Any] = {"training_data": kind}
    if kind == "supervised":
        qs = [q for q in store.read_queries(data_dir, "train") if q.gold and q.gold[0] in docs]
        pairs = [(q.text, q.gold[0]) for q in qs]
        info["questions_without_gold"] = len(store.read_queries(data_dir, "train")) - len(qs)
    elif kind == "crops":
        pairs = [(crop_query(d.text, rng, s["crop"]), d.id) for d in docs.values()]
    else:
        g = s["generator"]
        chosen = list(docs.values())[: g["max_passages"] or None]
        pairs = list(zip(generate_queries(g["model"], chosen, max_new_tokens=g["max_new_tokens"]),
                         [d.id for d in chosen]))
    from harness.train import subsample

    pairs = subsample(pairs, s["max_train_questions"], cfg["seed"])
    info["pairs"] = len(pairs)
    return pairs, docs, info


class BatchSchedule:
    """Batches of the schedule: step -> (stage's batch size, K); pairs drawn from a seeded shuffle,
    epoch after epoch, never two pairs with the same document in one batch (the other would be a
    false in-batch negative: it waits for the next batch)."""

    def __init__(self, pairs: Sequence[tuple[str, str]], schedule: Sequence[Mapping[str, int]], rng: random.Random):
        self.pairs, self.schedule, self.rng = list(pairs), list(schedule), rng
        self.queue: list[int] = []
        self.waiting: list[int] = []

    @property
    def total(self) -> int:
        return sum(int(st["steps"]) for st in self.schedule)

    def stage(self, step: int) -> Mapping[str, int]:
        for st in self.schedule:
            if step < st["steps"]:
                return st
            step -= st["steps"]
        return self.schedule[-1]

    def _next(self) -> int:
        if not self.queue:
            self.queue = list(range(len(self.pairs)))
            self.rng.shuffle(self.queue)
        return self.queue.pop()

    def batch(self, step: int) -> tuple[list[tuple[str, str]], int]:
        st = self.stage(step)
        size = min(int(st["batch_size"]), len({d for _, d in self.pairs}))
        chosen: list[int] = []
        seen: set[str] = set()
        pending, self.waiting = self.waiting, []
        tries = 0
        while len(chosen) < size and tries < 10 * size + len(self.pairs):
            i = pending.pop(0) if pending else self._next()
            tries += 1
            if self.pairs[i][1] in seen:
                self.waiting.append(i)
                continue
            seen.add(self.pairs[i][1])
            chosen.append(i)
        self.waiting += pending
        return [self.pairs[i] for i in chosen], int(st["codes"])


def train(cfg: Mapping[str, Any], s: Mapping[str, Any], data_dir: Path, out: Path) -> dict[str, Any]:
    """Train a QCR model with settings ``s``; writes the model to ``out``. The loop is
    :func:`harness.train.train_loop` (one "example" per optimizer step; the step function draws the
    step's batch from :class:`BatchSchedule` and runs :func:`grad_cache_step`)."""
    from dataclasses import replace

    from harness import train as loop

    torch = _torch(s)
    check(s)
    seed = cfg["seed"]
    loop.set_seed(seed)
    rng = random.Random(seed)
    pairs, docs, info = training_pairs(cfg, s, data_dir, rng)
    if len({d for _, d in pairs}) < 2:
        raise DataError(f"{data_dir}: QCR needs pairs with at least two distinct passages, got {len(pairs)} pairs")
    model = QCRModel.from_backbone(cfg, s)
    sched = BatchSchedule(pairs, s["schedule"], rng)
    ts = loop.TrainSettings.from_config(s, log_every=10)
    ts = replace(ts, batch_size=1, epochs=1, grad_accum=1, min_batch=1)
    device = loop.resolve_device(ts.device)
    codebook = model.fsq.implicit_codebook.to(device).float()
    usage = np.zeros(codebook_size(s["levels"]), np.int64)

    def step_fn(_batch, step: int, _rng):
        batch, k = sched.batch(step)

        def enc_q(texts):
            return model.pre(*model.batch(list(texts), k, s["q_max_len"]), k)

        def enc_d(ids):
            return model.pre(*model.batch([(docs[i].title, docs[i].text) for i in ids], k, s["p_max_len"]), k)

        def encode(items):
            return enc_q(items) if isinstance(items[0], str) else enc_d([i[0] for i in items])

        qs = [q for q, _ in batch]
        ds = [(d,) for _, d in batch]

        def loss_fn(q, d):
            loss, parts = qcr_loss(q, d, codebook, temperature=s["temperature"], entropy_weight=s["entropy_weight"])
            with torch.no_grad():
                ids = code_ids(model.fsq, torch.cat([q.reshape(-1, q.shape[-1]), d.reshape(-1, d.shape[-1])]))
                np.add.at(usage, ids.cpu().numpy(), 1)
                parts["batch_codes_used"] = float(len(torch.unique(ids)))
            parts["batch"], parts["K"] = float(len(batch)), float(k)
            return loss, parts

        return grad_cache_step(encode, [qs, ds], loss_fn, int(s["chunk_size"]))

    res = loop.train_loop(list(range(sched.total)), step_fn, model.parameters(), settings=ts, seed=seed, out=out,
                          save=model.save, modules=[model.encoder, model.proj])
    from harness.analysis.codebook import usage as usage_stats

    seen = np.repeat(np.arange(len(usage)), usage)
    u = usage_stats(seen, len(usage)) if len(seen) else {}
    return {"steps": res["steps"], "seconds": res["seconds"], "loss_first": res["loss_first"],
            "loss_last": res["loss_last"], "contrastive_last": res.get("contrastive_last", []),
            "entropy_last": res.get("entropy_last", []), "codebook_size": len(usage), "K": codes_k(s),
            "training_usage": {k_: v for k_, v in u.items() if k_ != "counts"}, "settings": train_signature(s),
            "fsq": FSQ_VERSION, **info}


# --------------------------------------------------------------------------------------------
# code strings, indexes, rescoring


def code_strings(codes: np.ndarray, ids: Sequence[str], *, k: int, size: int, positional: bool,
                 prefix: str = "c") -> list[str]:
    """Whitespace-joined code tokens per row (``0_c52 1_c113 ...`` or ``c52 c113 ...``); a row whose
    code count differs from ``k`` or holding an id outside ``[0, size)`` fails with its id."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[0] != len(ids):
        raise DataError(f"codes of shape {codes.shape} for {len(ids)} texts")
    if k and codes.shape[1] != k:
        raise DataError(f"{ids[0] if ids else '?'}: {codes.shape[1]} codes per text, the model writes K = {k}",
                        fix="rebuild the index with the current model")
    bad = np.nonzero((codes < 0) | (codes >= size))[0]
    if len(bad):
        raise DataError(f"{ids[bad[0]]}: code id {int(codes[bad[0]].max())} outside the codebook [0, {size})")
    if positional:
        return [" ".join(f"{i}_{prefix}{c}" for i, c in enumerate(row)) for row in codes.tolist()]
    return [" ".join(f"{prefix}{c}" for c in row) for row in codes.tolist()]


def with_words(code_texts: Sequence[str], texts: Sequence[str]) -> list[str]:
    """Codes and the Lucene-analysed words of each text in one pre-tokenized string ("w/ words")."""
    from harness.indexes.lucene import analyze_words

    return [f"{c} {' '.join(w)}".strip() for c, w in zip(code_texts, analyze_words(list(texts)))]


def build_lucene(spec: str, ids: Sequence[str], texts: Sequence[str], out: Path, s: Mapping[str, Any]) -> dict[str, Any]:
    from harness.indexes import build_index
    from harness.indexes.lucene import LUCENE_DIR

    t0 = time.perf_counter()
    build_index(spec, list(zip(ids, texts)), out=out / LUCENE_DIR, k1=s["k1"], b=s["b"])
    return {"spec": spec, "documents": len(ids), "build_seconds": round(time.perf_counter() - t0, 4)}


def distance_matrix(levels: Sequence[int]) -> np.ndarray:
    """|C| x |C| l2 distances between FSQ's code vectors (its implicit codebook, code scale)."""
    import torch
    from vector_quantize_pytorch import FSQ

    cb = FSQ(levels=list(levels)).implicit_codebook.float()
    return torch.cdist(cb, cb).numpy().astype(np.float32)


def rescore(q_codes: np.ndarray, cand_codes: np.ndarray, dist: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """Eq. 3 between one query's codes [K] and candidates' codes [n, K'] through the distance matrix:
    ``sum_i max_j -dist[q_i, c_j]``."""
    import torch

    m = torch.from_numpy(-dist[q_codes])                       # [K, |C|]
    out = []
    for i in range(0, len(cand_codes), chunk):
        c = torch.from_numpy(np.asarray(cand_codes[i:i + chunk], dtype=np.int64))   # [n, K']
        out.append(m[:, c].amax(dim=2).sum(dim=0))             # [K, n, K'] -> [n]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def rescore_run(run: Mapping[str, list[tuple[str, float]]], q_codes: Mapping[str, np.ndarray],
                doc_codes: np.ndarray, row_of: Mapping[str, int], dist: np.ndarray, depth: int, k: int
                ) -> dict[str, list[tuple[str, float]]]:
    """The top ``depth`` of each query's run rescored by Eq. 3 (ties keep the first-stage order);
    the rest keeps its order below them; cut at ``k``. Scores are order keys (k - rank + 1)."""
    out = {}
    for qid, hits in run.items():
        head, tail = hits[:depth], hits[depth:]
        if head:
            sc = rescore(q_codes[qid], doc_codes[[row_of[d] for d, _ in head]], dist)
            order = sorted(range(len(head)), key=lambda i: (-sc[i], i))
            head = [head[i] for i in order]
        ranked = [d for d, _ in head + tail][:k]
        out[qid] = [(d, float(len(ranked) - r)) for r, d in enumerate(ranked)]
    return out


# --------------------------------------------------------------------------------------------
# k-means baseline (§4.4)


def token_encoder(cfg: Mapping[str, Any], s: Mapping[str, Any], dpr_model: Path | None):
    """(tokenizer, encoder) whose token outputs the k-means baseline clusters."""
    from transformers import AutoModel, AutoTokenizer

    from harness.methods.dpr import ENCODERS, _quiet_transformers
    from harness.models.backbones import load_encoder, load_tokenizer

    _quiet_transformers()
    if s["kmeans"]["encoder"] == "dpr":
        if dpr_model is None:
            raise ConfigError("methods.qcr.kmeans.encoder: dpr, but the plan gave no DPR model")
        folder = Path(dpr_model) / ENCODERS[1]
        return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    return load_tokenizer(cfg, s["backbone"]), load_encoder(cfg, s["backbone"])


def token_vectors(tok, enc, texts: Sequence[str], max_len: int, batch_size: int = 64) -> list[np.ndarray]:
    """Per text, the encoder's output vectors of its word-piece tokens ([CLS]/[SEP] left out)."""
    import torch

    enc.eval()
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            b = tok(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_len,
                    return_tensors="pt", return_special_tokens_mask=True)
            special = b.pop("special_tokens_mask")
            h = enc(**b).last_hidden_state.float().numpy()
            keep = (b["attention_mask"].numpy() == 1) & (special.numpy() == 0)
            out += [h[j][keep[j]] for j in range(h.shape[0])]
    return out


def kmeans_assign(centroids: np.ndarray, vectors: Sequence[np.ndarray]) -> list[np.ndarray]:
    import faiss

    index = faiss.IndexFlatL2(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    flat = np.concatenate([v for v in vectors if len(v)]) if any(len(v) for v in vectors) else None
    if flat is None:
        return [np.zeros(0, np.int64) for _ in vectors]
    _, ids = index.search(np.ascontiguousarray(flat, dtype=np.float32), 1)
    out, start = [], 0
    for v in vectors:
        out.append(ids[start:start + len(v), 0])
        start += len(v)
    return out


# --------------------------------------------------------------------------------------------
# jobs (harness/plan.py)


def model_id(cfg: Mapping[str, Any], variant: str | None) -> str:
    """``qcr`` for the main model and for a variant whose training equals it, else ``qcr.<variant>``."""
    if variant is None or train_signature(settings(cfg, variant)) == train_signature(settings(cfg)):
        return "qcr"
    return f"qcr.{variant}"


def _systems(prefix: str, full: bool, main: bool) -> tuple[str, ...]:
    """System ids of one model's search job: ``qcr`` + ``qcr.rescore`` ...; ``qcr.v`` + ``qcr.v-rescore`` ..."""
    sep = "." if main else "-"
    out = [prefix, f"{prefix}{sep}rescore"]
    if main:
        out.append(f"{prefix}.nopos")
    if full:
        out.append(f"{prefix}{sep}words")
    return tuple(out)


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test", variant: str | None = None
               ) -> Job:
    """Every system of one model on ``dataset`` (one model load, one question encoding)."""
    s = settings(cfg)
    main = variant is None
    mid = model_id(cfg, variant)
    full = main or variant in (s["full_variants"] or [])
    jid = mid if main else f"qcr.{variant}"
    inputs = {"data": Ref("data", dataset=dataset), "model": Ref("model", mid), "index": Ref("index", jid, dataset)}
    if full:
        inputs["words_index"] = Ref("index", f"{jid}.words", dataset)
    if main:
        inputs["nopos_index"] = Ref("index", f"{jid}.nopos", dataset)
    m = f"methods.{name}"
    return Job("search", jid if split == "test" else f"{jid}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), params={"split": split, "variant": variant},
               systems=_systems(jid, full, main) if split == "test" else (jid,), inputs=inputs,
               keys=("evaluate.depth", f"{m}.rescore_depth", f"{m}.k1", f"{m}.b", f"{m}.q_max_len"))


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models (main, variants, Figure 3 grid, k-means), their code indexes (and words / no-position
    indexes), one search job per model and dataset, RRF fusions, and the measure jobs."""
    from harness.fusion import fusion_job

    s = settings(cfg)
    check(s)
    m, gpu = f"methods.{name}", wants_gpu(cfg, name)
    td = s["train_dataset"]
    keys = training_keys(cfg, name, exclude=NOT_MODEL)
    data = {"data": Ref("data", dataset=td)}
    idx_keys = (f"{m}.positional", f"{m}.index", f"{m}.k1", f"{m}.b", f"{m}.p_max_len")
    jobs: list[Job] = []
    variants = list(s["variants"] or {}) + grid_models(s)
    models: dict[str | None, str] = {None: "qcr"}
    for v in variants:
        models[v] = model_id(cfg, v)
    for v, mid in models.items():
        if v is not None and mid == "qcr":
            continue
        vkeys = () if v is None else ((f"{m}.variant_overrides", f"{m}.variants.{v}") if v in (s["variants"] or {})
                                      else (f"{m}.variant_overrides", f"{m}.grid", f"{m}.schedule"))
        jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"variant": v}, inputs=data,
                        keys=(*keys, *vkeys), mem_mb=6000))
    datasets = list(s.get("datasets") or [])
    for v in [None, *variants]:
        jid = "qcr" if v is None else f"qcr.{v}"
        full = v is None or v in (s["full_variants"] or [])
        jobs.append(Job("index", jid, name, "build", gpu=gpu, params={"variant": v}, keys=idx_keys,
                        inputs={"data": Ref("data"), "model": Ref("model", models[v])}, mem_mb=4000))
        if full:
            jobs.append(Job("index", f"{jid}.words", name, "build_words", params={"variant": v}, keys=idx_keys,
                            inputs={"data": Ref("data"), "source": Ref("index", jid)}, mem_mb=4000))
        if v is None:
            jobs.append(Job("index", f"{jid}.nopos", name, "build_nopos", params={"variant": v}, keys=idx_keys,
                            inputs={"data": Ref("data"), "source": Ref("index", jid)}, mem_mb=4000))
        for d in datasets:
            jobs.append(search_job(cfg, name, d, variant=v))
            if full:
                sep = "." if v is None else "-"
                codes_sys = jid if s["rrf_codes"] == "codes" else f"{jid}{sep}rescore"
                w = float(s["rrf_weight"])
                jobs.append(fusion_job(f"{jid}{sep}rrf", name, d, [codes_sys, s["words_system"]], "rrf",
                                       keys=(f"{m}.rrf_weight", f"{m}.rrf_k", f"{m}.rrf_codes"),
                                       rrf_k=int(s["rrf_k"]), weights=[w, 1.0 - w]))
    dpr_on = "dpr" in cfg["methods"] and cfg["methods"]["dpr"].get("enabled", True)
    if s["kmeans"]["enabled"] and (s["kmeans"]["encoder"] != "dpr" or dpr_on):  # else its cells say "not run"
        # the backbone key: encoder "backbone" reads it (with encoder dpr, DPR's model hash carries DPR's backbone)
        kkeys = (f"{m}.kmeans", f"{m}.p_max_len", f"{m}.q_max_len", "seed", f"backbones.{s['backbone']}")
        enc = {"encoder": Ref("model", "dpr")} if s["kmeans"]["encoder"] == "dpr" else {}
        jobs.append(Job("train", "qcr.kmeans", name, "train_kmeans", inputs={**data, **enc}, keys=kkeys, mem_mb=6000))
        jobs.append(Job("index", "qcr.kmeans", name, "build_kmeans", keys=(*kkeys, f"{m}.k1", f"{m}.b"),
                        inputs={"data": Ref("data"), "model": Ref("model", "qcr.kmeans"), **enc}, mem_mb=4000))
        jobs.append(Job("index", "qcr.kmeans-words", name, "build_words", params={"kmeans": True},
                        keys=(*kkeys, f"{m}.k1", f"{m}.b"),
                        inputs={"data": Ref("data"), "source": Ref("index", "qcr.kmeans")}, mem_mb=4000))
        for d in datasets:
            jobs.append(Job("search", "qcr.kmeans", name, "run_kmeans", d, systems=("qcr.kmeans", "qcr.kmeans-words"),
                            keys=(*kkeys, "evaluate.depth", f"{m}.k1", f"{m}.b"),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", "qcr.kmeans"), **enc,
                                    "index": Ref("index", "qcr.kmeans", d),
                                    "words_index": Ref("index", "qcr.kmeans-words", d)}))
    if datasets:
        a = s["analysis"]
        ad = a["dataset"] or datasets[0]
        noent = a["noent_variant"] if a["noent_variant"] in (s["variants"] or {}) else None
        extra = {}
        if noent:
            extra = {"noent_model": Ref("model", models[noent]), "noent_index": Ref("index", f"qcr.{noent}", ad)}
        jobs.append(Job("measure", "qcr.analysis", name, "measure_analysis", ad,
                        systems=("qcr.fig2-positive", "qcr.fig2-hard", "qcr.fig2-random", "qcr.usage-docs",
                                 "qcr.usage-queries", *((f"qcr.{noent}-usage-docs", f"qcr.{noent}-usage-queries")
                                                        if noent else ()),
                                 *(f"qcr.pmi-{i}" for i in range(1, int(a["pmi_codes"]) + 1))),
                        keys=(f"{m}.analysis", f"{m}.usage_threshold", "seed", f"{m}.q_max_len"),
                        params={"noent": noent},
                        inputs={"data": Ref("data", dataset=ad), "model": Ref("model", "qcr"),
                                "index": Ref("index", "qcr", ad), "bm25": Ref("system", s["words_system"], ad), **extra}))
        grid = grid_models(s)
        if grid:
            jobs.append(Job("measure", "qcr.fig3", name, "measure_fig3", ad,
                            systems=("qcr.fig3", *(f"qcr.fig3-{g.removeprefix('grid-')}" for g in grid)),
                            keys=(f"{m}.grid", "evaluate.ir_measures"), params={"grid": grid},
                            inputs={"data": Ref("data", dataset=ad),
                                    **{f"run_{g}": Ref("system", f"qcr.{g}", ad) for g in grid}}))
        eff = ("qcr.eff-codes", "qcr.eff-rescore", "qcr.eff-words-index", "qcr.eff-bm25", "qcr.eff-dpr")
        dpr_in = {"dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", ad)} if dpr_on else {}
        jobs.append(Job("measure", "qcr.efficiency", name, "measure_efficiency", ad, systems=eff,
                        keys=("timing", "evaluate.depth", f"{m}.timing_queries", f"{m}.rescore_depth", f"{m}.k1",
                              f"{m}.b", "methods.bm25.k1", "methods.bm25.b"),
                        inputs={"data": Ref("data", dataset=ad), "model": Ref("model", "qcr"),
                                "index": Ref("index", "qcr", ad), "words_index": Ref("index", "qcr.words", ad),
                                "bm25_index": Ref("index", "bm25", ad), **dpr_in}))
    return jobs


# --------------------------------------------------------------------------------------------
# steps


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    v = job.params.get("variant")
    s = settings(ctx.cfg, v)
    info = train(ctx.cfg, s, inputs["data"], out)
    u = info.get("training_usage") or {}
    if u and u.get("perplexity_ratio", 1.0) < s["usage_threshold"]:
        info["collapse"] = (f"codebook usage during training: perplexity {u['perplexity']:.1f} of |C| = "
                            f"{info['codebook_size']} ({u['perplexity_ratio']:.3f} < usage_threshold "
                            f"{s['usage_threshold']})")
        print(f"WARNING: {job.id}: {info['collapse']}")
    return {"variant": v, **info}


def _docs_and_texts(data_dir: Path) -> tuple[list[Doc], list[tuple[str, str]]]:
    docs = list(store.iter_corpus(data_dir))
    return docs, [(d.title, d.text) for d in docs]


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Encode the corpus into codes (``codes.npy``, doc ids) and index their strings."""
    s = settings(ctx.cfg)
    model = QCRModel.load(inputs["model"])
    docs, texts = _docs_and_texts(inputs["data"])
    t0 = time.perf_counter()
    codes = model.encode(texts, int(s["p_max_len"]), int(s["encode_batch_size"]))
    t_enc = time.perf_counter() - t0
    np.save(out / CODES_FILE, codes)
    write_docids(out, [d.id for d in docs])
    ms = model.s
    ids = [d.id for d in docs]
    strings = code_strings(codes, ids, k=codes_k(ms), size=codebook_size(ms["levels"]), positional=s["positional"])
    info = build_lucene(s["index"], ids, strings, out, s)
    from harness.analysis.codebook import usage

    u = usage(codes.ravel(), codebook_size(ms["levels"]))
    return {**info, "encode_seconds": round(t_enc, 4), "K": int(codes.shape[1]), "positional": s["positional"],
            "usage": {k: v for k, v in u.items() if k != "counts"},
            "unique_code_fraction": float(np.mean([len(set(r)) / len(r) for r in codes.tolist()])) if len(codes) else 0.0}


def load_codes(folder: Path, *, allow_pickle: bool = False) -> tuple[np.ndarray, list[str]]:
    """The corpus codes of a built code index (``codes.npy``) and its doc ids, row counts checked."""
    codes = np.load(Path(folder) / CODES_FILE, allow_pickle=allow_pickle)
    return codes, read_docids(folder, expect=len(codes))


def encode_queries(model: QCRModel, s: Mapping[str, Any], texts: Sequence[str]) -> np.ndarray:
    """Code ids of query texts at the section's query length and encoding batch size."""
    return model.encode(list(texts), int(s["q_max_len"]), int(s["encode_batch_size"]))


def first_stage_depth(s: Mapping[str, Any], k: int, n_docs: int) -> int:
    """How deep the code run is searched: ``k``, or the rescoring depth when deeper, at most the corpus."""
    return min(max(k, int(s["rescore_depth"])), n_docs)


def _source_strings(inputs: Mapping[str, Path], positional: bool, kmeans: bool) -> tuple[list[str], list[str]]:
    codes, ids = load_codes(inputs["source"], allow_pickle=kmeans)
    if kmeans:
        return ids, [" ".join(f"k{c}" for c in row) for row in codes]
    return ids, code_strings(codes, ids, k=codes.shape[1], size=int(codes.max()) + 1 if codes.size else 1,
                             positional=positional)


def build_words(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """"w/ words": the source index's code strings plus the analysed words of each passage."""
    s = settings(ctx.cfg)
    kmeans = bool(job.params.get("kmeans"))
    ids, strings = _source_strings(inputs, s["positional"], kmeans)
    docs = {d.id: d for d in store.iter_corpus(inputs["data"])}
    texts = [f"{docs[i].title}\n{docs[i].text}" if docs[i].title else docs[i].text for i in ids]
    info = build_lucene(s["index"], ids, with_words(strings, texts), out, s)
    write_docids(out, ids)
    return {**info, "words": "lucene default analyser (pyserini), title + text"}


def build_nopos(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """The source index's codes without position prefixes (the §4.2 ablation)."""
    s = settings(ctx.cfg)
    ids, strings = _source_strings(inputs, False, False)
    write_docids(out, ids)
    return {**build_lucene(s["index"], ids, strings, out, s), "positional": False}


def _load_lucene(folder: Path, s: Mapping[str, Any]):
    from harness.indexes import load_index

    return load_index(folder, k1=s["k1"], b=s["b"])


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Codes run, rescored run, [no-position run], [codes + words run] of one model."""
    from harness.artifacts import write_run_with_meta

    s = settings(ctx.cfg)
    split = job.params.get("split", "test")
    queries = store.read_queries(inputs["data"], split)
    k = int(ctx.cfg["evaluate"]["depth"])
    t0 = time.perf_counter()
    model = QCRModel.load(inputs["model"])
    ms = model.s
    qcodes = encode_queries(model, s, [q.text for q in queries])
    t_enc = time.perf_counter() - t0
    qids = [q.id for q in queries]
    size = codebook_size(ms["levels"])
    qstr = code_strings(qcodes, qids, k=codes_k(ms), size=size, positional=s["positional"])
    doc_codes, docids = load_codes(inputs["index"])
    depth = first_stage_depth(s, k, len(docids))
    idx = _load_lucene(inputs["index"], s)
    t1 = time.perf_counter()
    deep = idx.search(dict(zip(qids, qstr)), depth)
    t_search = time.perf_counter() - t1
    systems = list(job.systems)
    meta = {"dataset": job.dataset, "split": split, "depth": k, "K": int(qcodes.shape[1]),
            "positional": s["positional"], "encode_seconds": round(t_enc, 3)}
    write_run_with_meta(out / f"{systems[0]}.trec", {q: h[:k] for q, h in deep.items()}, system=systems[0],
                        meta={**meta, "seconds": round(t_enc + t_search, 3)})
    if len(systems) > 1:
        t2 = time.perf_counter()
        row_of = {d: i for i, d in enumerate(docids)}
        res = rescore_run(deep, dict(zip(qids, qcodes)), doc_codes, row_of, distance_matrix(ms["levels"]),
                          int(s["rescore_depth"]), k)
        write_run_with_meta(out / f"{systems[1]}.trec", res, system=systems[1], meta={
            **meta, "rescore_depth": int(s["rescore_depth"]), "first_stage_depth": depth,
            "seconds": round(t_enc + t_search + time.perf_counter() - t2, 3)})
    for system in systems[2:]:
        t3 = time.perf_counter()
        if system.endswith("nopos"):
            strs = code_strings(qcodes, qids, k=codes_k(ms), size=size, positional=False)
            hits = _load_lucene(inputs["nopos_index"], s).search(dict(zip(qids, strs)), k)
        else:
            hits = _load_lucene(inputs["words_index"], s).search(
                dict(zip(qids, with_words(qstr, [q.text for q in queries]))), k)
        write_run_with_meta(out / f"{system}.trec", hits, system=system,
                            meta={**meta, "seconds": round(t_enc + time.perf_counter() - t3, 3)})
    return {"queries": len(queries)}


def train_kmeans(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """faiss k-means over a seeded sample of the training corpus's token vectors (§4.4)."""
    import faiss

    s = settings(ctx.cfg)
    km = s["kmeans"]
    _torch(s)
    tok, enc = token_encoder(ctx.cfg, s, inputs.get("encoder"))
    docs = list(store.iter_corpus(inputs["data"]))
    rng = np.random.default_rng(ctx.cfg["seed"])
    order = rng.permutation(len(docs))
    vecs, n = [], 0
    for start in range(0, len(order), 256):
        chunk = [docs[i] for i in order[start:start + 256]]
        for v in token_vectors(tok, enc, [f"{d.title} {d.text}" for d in chunk], int(s["p_max_len"]) + 2):
            vecs.append(v)
            n += len(v)
        if n >= km["sample_tokens"]:
            break
    x = np.ascontiguousarray(np.concatenate(vecs)[: km["sample_tokens"]], dtype=np.float32)
    k = min(int(km["clusters"]), len(x))
    t0 = time.perf_counter()
    kmeans = faiss.Kmeans(x.shape[1], k, niter=int(km["niter"]), seed=int(ctx.cfg["seed"]), verbose=False)
    kmeans.train(x)
    np.save(out / CENTROIDS, kmeans.centroids)
    return {"clusters": k, "tokens": len(x), "dim": int(x.shape[1]), "encoder": km["encoder"],
            "seconds": round(time.perf_counter() - t0, 3)}


def _kmeans_codes(ctx: Context, inputs: Mapping[str, Path], texts: Sequence[str], max_len: int) -> list[np.ndarray]:
    s = settings(ctx.cfg)
    _torch(s)
    tok, enc = token_encoder(ctx.cfg, s, inputs.get("encoder"))
    centroids = np.load(inputs["model"] / CENTROIDS)
    return kmeans_assign(centroids, token_vectors(tok, enc, texts, max_len, int(s["encode_batch_size"])))


def build_kmeans(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Every corpus token replaced by its nearest centroid id (``k<id>``, one per token, no positions)."""
    s = settings(ctx.cfg)
    docs = list(store.iter_corpus(inputs["data"]))
    codes = _kmeans_codes(ctx, inputs, [f"{d.title} {d.text}" for d in docs], int(s["p_max_len"]) + 2)
    arr = np.empty(len(codes), dtype=object)
    arr[:] = [c.astype(np.int32) for c in codes]
    np.save(out / CODES_FILE, arr, allow_pickle=True)
    ids = [d.id for d in docs]
    write_docids(out, ids)
    return build_lucene(s["index"], ids, [" ".join(f"k{c}" for c in row) for row in codes], out, s)


def run_kmeans(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from harness.artifacts import write_run_with_meta

    s = settings(ctx.cfg)
    queries = store.read_queries(inputs["data"], "test")
    k = int(ctx.cfg["evaluate"]["depth"])
    codes = _kmeans_codes(ctx, inputs, [q.text for q in queries], int(s["q_max_len"]) + 2)
    qids = [q.id for q in queries]
    strs = [" ".join(f"k{c}" for c in row) for row in codes]
    for system, folder, qs in (("qcr.kmeans", "index", strs),
                               ("qcr.kmeans-words", "words_index", with_words(strs, [q.text for q in queries]))):
        hits = _load_lucene(inputs[folder], s).search(dict(zip(qids, qs)), k)
        write_run_with_meta(out / f"{system}.trec", hits, system=system, meta={"dataset": job.dataset, "depth": k})
    return {"queries": len(queries)}


# --------------------------------------------------------------------------------------------
# measures: Figure 2, Figure A.2, Table 2 (analysis); Figure 3; efficiency


def _metric(system: str, dataset: str, values: Mapping[str, tuple[float, str, str]], **extra: Any) -> dict[str, Any]:
    return {"system": system, "dataset": dataset,
            "values": {k: {"value": v, "unit": u, "device": "cpu", "what": w} for k, (v, u, w) in values.items()},
            **extra}


def _usage_values(u: Mapping[str, Any], threshold: float) -> dict[str, tuple[float, str, str]]:
    from harness.analysis.codebook import collapsed

    return {"codes_used": (u["used"], "count", "distinct codes used"),
            "fraction_used": (u["fraction_used"], "ratio", "distinct codes used / |C|"),
            "perplexity": (u["perplexity"], "count", "exp(entropy) of the code distribution"),
            "perplexity_ratio": (u["perplexity_ratio"], "ratio", "perplexity / |C|"),
            "top_share": (u["top_share"], "ratio", "share of the most frequent code"),
            "collapsed": (float(collapsed(u, threshold)), "bool", f"perplexity / |C| < {threshold}")}


def measure_analysis(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 2 (matching code tokens: positive, BM25 hard negative, random document), Figure A.2
    (codebook usage of documents and queries, with and without the entropy loss) and Table 2 (words
    with the highest PMI per code), as metrics files and PNGs in this job's folder."""
    from harness.analysis import codebook as cb
    from harness.indexes.lucene import analyze_words
    from harness.io import write_json
    from harness.runs import read_run

    s = settings(ctx.cfg)
    a = s["analysis"]
    d = str(job.dataset)
    title = f"QCR, profile {ctx.cfg['profile']}, {d}"
    model = QCRModel.load(inputs["model"])
    ms = model.s
    size = codebook_size(ms["levels"])
    doc_codes, docids = load_codes(inputs["index"])
    row_of = {x: i for i, x in enumerate(docids)}
    all_q = store.read_queries(inputs["data"], "test")
    all_codes = encode_queries(model, s, [q.text for q in all_q])   # Figure 2's sample and Figure A.2's usage
    code_of = {q.id: c for q, c in zip(all_q, all_codes)}
    queries = [q for q in all_q if q.gold and q.gold[0] in row_of]
    rng = random.Random(ctx.cfg["seed"])
    sample = sorted(rng.sample(range(len(queries)), min(a["pairs"], len(queries))))
    qs = [queries[i] for i in sample]
    qcodes = np.array([code_of[q.id] for q in qs]).reshape(len(qs), -1)
    run = read_run(inputs["bm25"] / f"{s['words_system']}.trec")
    pos, hard, rand = [], [], []
    for q in qs:
        gold = set(q.gold)
        pos.append(row_of[q.gold[0]])
        cands = [x for x, _ in run.get(q.id, [])[: a["hard_negative_depth"]] if x not in gold and x in row_of]
        hard.append(row_of[rng.choice(cands)] if cands else None)
        r = rng.randrange(len(docids))
        while docids[r] in gold and len(docids) > 1:
            r = rng.randrange(len(docids))
        rand.append(r)
    qt = cb.code_tokens(qcodes, positional=s["positional"])
    dt = cb.code_tokens(doc_codes, positional=s["positional"])
    groups = {}
    for name, rows in (("positive", pos), ("hard", hard), ("random", rand)):
        keep = [i for i, r in enumerate(rows) if r is not None]
        groups[name] = cb.match_counts([qt[i] for i in keep], [dt[rows[i]] for i in keep])
    summ = cb.match_count_summary(groups)
    for name, sm in summ.items():
        write_json(out / f"qcr.fig2-{name}.json", _metric(f"qcr.fig2-{name}", d, {
            "mean": (sm["mean"], "count", "mean number of query code tokens found in the document"),
            "median": (sm["median"], "count", "median number of matching code tokens"),
            "p90": (sm["p90"], "count", "90th percentile of matching code tokens"),
            "pairs": (sm["n"], "count", "query-document pairs")}, histogram=sm["histogram"],
            positional=s["positional"]))
    cb.plot_match_counts(summ, out / "fig2.png", title)
    # Figure A.2
    usages = {"documents, entropy loss": cb.usage(doc_codes.ravel(), size),
              "queries, entropy loss": cb.usage(all_codes.ravel(), size)}
    systems = {"qcr.usage-docs": "documents, entropy loss", "qcr.usage-queries": "queries, entropy loss"}
    noent = job.params.get("noent")
    if noent:
        m2 = QCRModel.load(inputs["noent_model"])
        usages["documents, no entropy loss"] = cb.usage(load_codes(inputs["noent_index"])[0].ravel(), size)
        usages["queries, no entropy loss"] = cb.usage(encode_queries(m2, s, [q.text for q in all_q]).ravel(), size)
        systems[f"qcr.{noent}-usage-docs"] = "documents, no entropy loss"
        systems[f"qcr.{noent}-usage-queries"] = "queries, no entropy loss"
    for system, label in systems.items():
        u = usages[label]
        write_json(out / f"{system}.json", _metric(system, d, _usage_values(u, s["usage_threshold"]),
                                                   label=label, counts=u["counts"][:200]))
        if cb.collapsed(u, s["usage_threshold"]):
            print(f"WARNING: {system}: codebook collapse, perplexity {u['perplexity']:.1f} of |C| = {size}")
    cb.plot_usage(usages, out / "figA2.png", title)
    # Table 2
    docs = {x.id: x for x in store.iter_corpus(inputs["data"])}
    words = analyze_words([docs[x].text for x in docids])
    pmi = cb.pmi_words([set(r) for r in doc_codes.tolist()], [set(w) for w in words], top=a["pmi_top"],
                       min_count=a["pmi_min_count"], n_codes=a["pmi_codes"])
    for rank, (c, ws) in enumerate(pmi.items(), 1):
        write_json(out / f"qcr.pmi-{rank}.json", _metric(f"qcr.pmi-{rank}", d, {
            "code": (int(c), "count", "code id (by document frequency rank)"),
            "top_pmi": (ws[0][1] if ws else float("nan"), "none",
                        "highest PMI (nats); words: " + ", ".join(f"{w}: {p:.2f}" for w, p in ws))},
            words=ws, note="document-level PMI, natural log; words are Lucene-analysed (stemmed) terms"))
    lines = [f"# Table 2 (measured): words with the highest PMI per code, {title}", ""]
    lines += [f"- **code {c}**: " + ", ".join(f"{w}: {p:.2f}" for w, p in ws) for c, ws in pmi.items()]
    (out / "table2.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"pairs": len(qs), "figures": ["fig2.png", "figA2.png"], "table": "table2.md"}


def measure_fig3(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Figure 3: Success@100 of the grid models (batch size x K), evaluated as the evaluate stage does."""
    from harness.analysis.codebook import grid_summary, plot_grid
    from harness.evaluate.cli import evaluate_run
    from harness.io import write_json

    measure = "Success@100"
    points = {}
    for g in job.params["grid"]:
        res = evaluate_run(ctx.cfg, str(job.dataset), inputs[f"run_{g}"] / f"qcr.{g}.trec")
        if measure not in res["measures"]:
            raise ConfigError(f"Figure 3 needs {measure} in evaluate.ir_measures (dataset {job.dataset})")
        b, k = grid_point(settings(ctx.cfg), g)
        points[(b, k)] = res["measures"][measure]
        write_json(out / f"qcr.fig3-{g.removeprefix('grid-')}.json", _metric(
            f"qcr.fig3-{g.removeprefix('grid-')}", str(job.dataset),
            {"success100": (points[(b, k)], "ratio", f"{measure} of model {g} (evaluated as the evaluate stage does)"),
             "batch_size": (b, "count", "batch size"), "codes": (k, "count", "K")}))
    grid = grid_summary(points)
    write_json(out / "qcr.fig3.json", {"system": "qcr.fig3", "dataset": job.dataset, "measure": measure,
                                       "grid": grid, "values": {}})
    plot_grid(grid, out / "fig3.png", f"QCR, profile {ctx.cfg['profile']}, {job.dataset}", metric=measure)
    return {"figures": ["fig3.png"]}


def _lucene_bytes(folder: Path) -> int:
    from harness.indexes.lucene import LUCENE_DIR

    return sum(p.stat().st_size for p in (Path(folder) / LUCENE_DIR).rglob("*") if p.is_file())


def measure_efficiency(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """What the paper lacks: index bytes and build seconds of the code index, the codes + words index,
    the word (BM25) index and DPR's Flat index on one corpus; query latency (encoding + search, one
    question per call, protocol qcr-latency) of QCR, QCR + rescoring, BM25 and DPR."""
    from harness.io import write_json
    from harness.meta import read_meta
    from harness.timing import PROTOCOLS, run_protocol

    s = settings(ctx.cfg)
    d = str(job.dataset)
    protocol = PROTOCOLS.get("qcr-latency")
    k = int(ctx.cfg["evaluate"]["depth"])
    queries = [q.text for q in store.read_queries(inputs["data"], "test")]
    model = QCRModel.load(inputs["model"])
    ms = model.s
    size = codebook_size(ms["levels"])
    doc_codes, docids = load_codes(inputs["index"])
    row_of = {x: i for i, x in enumerate(docids)}
    dist = distance_matrix(ms["levels"])
    codes_idx = _load_lucene(inputs["index"], s)
    depth = first_stage_depth(s, k, len(docids))

    def enc_codes(texts, _o):
        c = encode_queries(model, s, texts)
        return c, code_strings(c, [str(i) for i in range(len(texts))], k=codes_k(ms), size=size,
                               positional=s["positional"])

    def search_codes(e, kk, _o):
        return codes_idx.search(e[1], kk)

    def search_rescore(e, kk, _o):
        deep = codes_idx.search(e[1], depth)
        return rescore_run(deep, {str(i): c for i, c in enumerate(e[0])}, doc_codes, row_of, dist,
                           int(s["rescore_depth"]), kk)

    from harness.indexes.lucene import LUCENE_DIR, LuceneIndex

    bm = ctx.cfg["methods"]["bm25"]
    bm25 = LuceneIndex(inputs["bm25_index"] / LUCENE_DIR, "bm25", k1=bm.get("k1", 0.9), b=bm.get("b", 0.4))
    systems = {"qcr.eff-codes": (enc_codes, search_codes), "qcr.eff-rescore": (enc_codes, search_rescore),
               "qcr.eff-bm25": (lambda t, o: list(t), lambda e, kk, o: bm25.search(e, kk))}
    if "dpr_model" in inputs:
        from harness.methods import dpr

        dsearch = dpr.Searcher(Context(ctx.cfg, "dpr", d), inputs["dpr_index"], inputs["dpr_model"])
        systems["qcr.eff-dpr"] = (lambda t, o: dsearch.encode(t), lambda e, kk, o: dsearch.search(e, kk))
    sizes = {"qcr.eff-codes": (_lucene_bytes(inputs["index"]), read_meta(inputs["index"]).get("build_seconds"),
                               "Lucene index of the code strings (codes.npy for rescoring not counted)"),
             "qcr.eff-words-index": (_lucene_bytes(inputs["words_index"]),
                                     read_meta(inputs["words_index"]).get("build_seconds"),
                                     "Lucene index of codes + words in one document"),
             "qcr.eff-rescore": (int((inputs["index"] / CODES_FILE).stat().st_size) + dist.nbytes, None,
                                 "codes.npy of the corpus + the |C| x |C| float32 distance matrix"),
             "qcr.eff-bm25": (_lucene_bytes(inputs["bm25_index"]), read_meta(inputs["bm25_index"]).get("build_seconds"),
                              "Lucene index of the words (BM25)")}
    if "dpr_index" in inputs:
        from harness.indexes.faiss_dense import INDEX_FILE

        sizes["qcr.eff-dpr"] = (int((inputs["dpr_index"] / INDEX_FILE).stat().st_size),
                                read_meta(inputs["dpr_index"]).get("build_seconds"),
                                "faiss Flat index of the passage vectors (build seconds include encoding)")
    timing = {}
    for name, (enc, srch) in systems.items():
        res = run_protocol(protocol, queries, encode=enc, search=srch, k=k, device="cpu",
                           max_queries=s["timing_queries"])
        timing[name] = res
    for name in dict.fromkeys([*sizes, *systems]):
        values: dict[str, tuple[float, str, str]] = {}
        if name in sizes:
            nbytes, secs, what = sizes[name]
            values["index_bytes"] = (nbytes, "B", what)
            values["index_mb"] = (nbytes / 1e6, "MB", what)
            if secs is not None:
                values["build_seconds"] = (round(float(secs), 4), "s", "index build (from the index's meta.json)")
        extra: dict[str, Any] = {}
        if name in timing:
            r = timing[name]
            values["query_ms"] = (r.summary["encode+search"]["mean"] * 1e3, "ms",
                                  f"{protocol.inside_timer['encode+search']}; mean over {r.queries} questions")
            extra = {"timing": r.to_dict()}
        write_json(out / f"{name}.json", _metric(name, d, values, protocol=protocol.name, **extra))
        print(f"{name}/{d}: " + ", ".join(f"{k_} {v[0]:,.3f}" for k_, v in values.items()))
    return {"protocol": protocol.name}
