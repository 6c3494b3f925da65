"""BPR (Yamada et al., 2021): DPR's two encoders plus a hash layer; binary passage codes and a
two-stage search (Hamming candidates, then a rerank with the continuous question embedding).

Training (§3.2-3.4), on top of :mod:`harness.methods.dpr` (its encoders, question preparation and
training examples are reused): the hash layer is ``tanh(β·e)`` with ``β = sqrt(γ·step + 1)``
(``step`` = finished training steps, ``methods.bpr.gamma``, γ = 0.1); the loss is
``L = L_cand + L_rerank`` over in-batch negatives plus one BM25 hard negative per question:

- ``L_cand`` (Eq. 6): ranking loss between the approximated codes of the question and of the
  passages, ``max(0, -(<h~q, h~p+> - <h~q, h~p->) + α)`` summed over the negatives and averaged over
  the questions (``cand_reduction: sum``, the paper; the authors' code averages over all pairs,
  ``mean``, with margin 0.1); ``methods.bpr.margin`` is α (paper 2). ``cand_loss: ce`` is the
  cross-entropy variant of Appendix D / Table 9.
- ``L_rerank`` (Eq. 7): cross-entropy of ``<e_q, h~p>`` (continuous question, approximated
  passage codes).

Inference: ``h = sign(e)`` packed to bits (:func:`harness.indexes.faiss_binary.binarize`); the
question keeps ``e_q`` for the rerank. Search = :func:`faiss_binary.two_stage_search`: top ``l``
(``n_candidates``, paper 1000; the authors' code defaults to 2048) by Hamming distance with a
linear scan (``faiss-binary:BFlat``) or a hash lookup (``hash_index``, e.g. ``BHash768``), then
``<e_q, ±1 code>``.

System ids (workflow/rules/bpr.smk): ``bpr.bflat`` / ``bpr.bhash`` (Table 1), ``bpr.no-rerank``
(hash lookup, Hamming order) and ``bpr.no-cand`` (rerank every passage) (Table 2), ``bpr.l<n>``
(linear scan with l = n, Table 8), ``bpr.<train variant>`` (one training per setting of
``train_variants``, Tables 7 and 9), and the DPR baselines on the same passages ``dpr.hnsw``,
``dpr.lsh``, ``dpr.pq`` (specs ``dpr_baselines``; vectors read back from DPR's Flat index).
Index sizes and query times (protocol ``bpr-query-time``) go to metrics files.

Commands: ``python -m harness.methods.bpr {train,hash-index,dpr-index,search,dpr-search,
efficiency,merge-metrics} ...`` (the generic ``python -m harness train|index|search|timing``
also work with ``--method bpr``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Query, store
from harness.errors import ConfigError, HarnessError
from harness.methods import dpr
from harness.methods.base import Context

CODES_FILE = "codes.npy"
DOCIDS_FILE = "docids.txt"
#: settings that change a trained BPR model (hash of the train rules; variant equality)
TRAIN_KEYS = ("backbone", "train_dataset", "pooling", "shared_encoder", "epochs", "batch_size", "lr",
              "weight_decay", "warmup_ratio", "q_max_len", "p_max_len", "hard_negatives", "strip_question_mark",
              "gamma", "cand_loss", "margin", "cand_reduction", "max_train_questions")
DEFAULTS: dict[str, Any] = {
    "gamma": 0.1, "cand_loss": "ranking", "margin": 2.0, "cand_reduction": "sum", "n_candidates": 1000,
    "candidate_grid": [200, 500, 1000, 2000], "index": "faiss-binary:BFlat", "hash_index": "faiss-binary:BHash768",
    "hash_nflip": 0,
    "dpr_baselines": {}, "train_variants": {}, "train_variant_overrides": {}, "timing_queries": None,
    "baseline_train_size": None, "max_train_questions": None,
}
#: search variants of the trained main model: name -> (index kind, rerank, candidates)
SEARCH_VARIANTS = {
    "bflat": ("flat", True, None),
    "bhash": ("hash", True, None),
    "no-rerank": ("hash", False, None),
    "no-cand": (None, True, None),
}
_L_VARIANT = re.compile(r"^l(\d+)$")


# --------------------------------------------------------------------------------------------
# settings


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.bpr with defaults; for a train variant, ``train_variant_overrides`` and the
    variant's own settings on top (the variant's scale and its change)."""
    base = {**DEFAULTS, **cfg["methods"]["bpr"]}
    if variant is None:
        return base
    variants = base["train_variants"] or {}
    if variant not in variants:
        raise ConfigError(f"unknown BPR train variant {variant!r}; methods.bpr.train_variants defines: "
                          f"{', '.join(variants) or '(none)'}")
    return {**base, **(base["train_variant_overrides"] or {}), **(variants[variant] or {})}


def variant_context(cfg: Mapping[str, Any], variant: str | None, dataset: str | None = None) -> Context:
    """A Context whose ``mcfg`` is the (variant's) effective methods.bpr section."""
    cfg2 = {**cfg, "methods": {**cfg["methods"], "bpr": settings(cfg, variant)}}
    return Context(cfg2, "bpr", dataset)


def train_signature(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in TRAIN_KEYS}


def train_hash(cfg: Mapping[str, Any], variant: str | None = None) -> str:
    """Hash of what a BPR training reads: its effective settings, the seed, the training data's config."""
    s = settings(cfg, variant)
    blob = {"train": train_signature(s), "seed": cfg["seed"], "data": cfg["datasets"].get(s["train_dataset"])}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:12]


def model_source(cfg: Mapping[str, Any], variant: str) -> str:
    """Folder name under models/ of a train variant: ``bpr`` when its settings equal the main
    model's (e.g. ``ref`` with empty ``train_variant_overrides``), else ``bpr-variant/<name>``."""
    if train_signature(settings(cfg, variant)) == train_signature(settings(cfg)):
        return "bpr"
    return f"bpr-variant/{variant}"


def search_variants(cfg: Mapping[str, Any]) -> list[str]:
    """Search variants of the main model: bflat, bhash, no-rerank, no-cand and l<n> (Table 8)."""
    return list(SEARCH_VARIANTS) + [f"l{n}" for n in settings(cfg)["candidate_grid"]]


def train_variants(cfg: Mapping[str, Any]) -> list[str]:
    return list(settings(cfg)["train_variants"] or {})


def measured_variants(cfg: Mapping[str, Any]) -> list[str]:
    """The variants of ``methods.bpr.variants`` (default: every search and train variant)."""
    known = search_variants(cfg) + train_variants(cfg)
    listed = cfg["methods"]["bpr"].get("variants")
    if listed is None:
        return known
    bad = [v for v in listed if v not in known]
    if bad:
        raise ConfigError(f"methods.bpr.variants: unknown variant(s) {', '.join(bad)}; known: {', '.join(known)}")
    return list(listed)


def dpr_baselines(cfg: Mapping[str, Any]) -> dict[str, str]:
    """DPR baselines on the same passages: variant -> dense index spec (e.g. hnsw -> faiss:HNSW512)."""
    out = dict(settings(cfg)["dpr_baselines"] or {})
    for name, spec in out.items():
        if not spec.startswith("faiss:"):
            raise ConfigError(f"methods.bpr.dpr_baselines.{name}: {spec!r} is not a faiss:<factory> spec")
    return out


def efficiency_systems(cfg: Mapping[str, Any]) -> list[str]:
    """Systems whose index size and query time the efficiency rule measures (Tables 1 and 2)."""
    return ["dpr"] + [f"dpr.{v}" for v in dpr_baselines(cfg)] + [f"bpr.{v}" for v in SEARCH_VARIANTS]


def _variant_search(cfg: Mapping[str, Any], variant: str) -> tuple[str | None, bool, int | None]:
    """(index kind: flat | hash | None, rerank, l) of a search variant."""
    s = settings(cfg)
    m = _L_VARIANT.match(variant)
    if m:
        return "flat", True, int(m.group(1))
    if variant not in SEARCH_VARIANTS:
        raise ConfigError(f"unknown BPR search variant {variant!r}; known: {', '.join(search_variants(cfg))}")
    kind, rerank, _ = SEARCH_VARIANTS[variant]
    return kind, rerank, (None if kind is None else int(s["n_candidates"]))


def _check(s: Mapping[str, Any]) -> None:
    if s["cand_loss"] not in ("ranking", "ce"):
        raise ConfigError(f"methods.bpr.cand_loss must be 'ranking' or 'ce', got {s['cand_loss']!r}")
    if s["cand_reduction"] not in ("sum", "mean"):
        raise ConfigError(f"methods.bpr.cand_reduction must be 'sum' or 'mean', got {s['cand_reduction']!r}")
    if s["gamma"] < 0:
        raise ConfigError(f"methods.bpr.gamma must be >= 0, got {s['gamma']}")


# --------------------------------------------------------------------------------------------
# training


def beta(gamma: float, step: int) -> float:
    """The hash layer's scale after ``step`` finished training steps: sqrt(γ·step + 1) (§3.2)."""
    return math.sqrt(gamma * step + 1.0)


def bpr_loss(eq, ep, step: int, *, gamma: float, cand_loss: str = "ranking", margin: float = 2.0,
             reduction: str = "sum"):
    """L_cand + L_rerank for questions ``eq`` [B, d] and passages ``ep`` [P, d]; passage i is the
    positive of question i (P >= B: in-batch positives, then hard negatives). Returns (loss, parts)."""
    import torch
    import torch.nn.functional as F

    b = beta(gamma, step)
    hq, hp = torch.tanh(b * eq), torch.tanh(b * ep)
    n = eq.shape[0]
    target = torch.arange(n)
    rerank = F.cross_entropy(eq @ hp.T, target)
    scores = hq @ hp.T
    if cand_loss == "ce":
        cand = F.cross_entropy(scores, target)
    else:
        pos = scores.gather(1, target[:, None])
        neg_mask = torch.ones_like(scores, dtype=torch.bool)
        neg_mask[target, target] = False
        hinge = (margin - (pos - scores)).clamp(min=0.0)[neg_mask].view(n, -1)
        cand = hinge.sum(1).mean() if reduction == "sum" else hinge.mean()
    return cand + rerank, {"cand": float(cand.detach()), "rerank": float(rerank.detach()), "beta": b}


def train(ctx: Context, out: Path, negatives_file: Path) -> dict[str, Any]:
    """Train BPR (``ctx.mcfg`` = the effective methods.bpr settings); writes the encoders to ``out``."""
    torch = dpr._torch(ctx)
    m = {**DEFAULTS, **ctx.mcfg}
    _check(m)
    seed = ctx.cfg["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tctx = Context(ctx.cfg, ctx.method, m["train_dataset"])
    examples = dpr._training_examples(tctx, negatives_file)
    if m["max_train_questions"] and m["max_train_questions"] < len(examples):
        keep = sorted(random.Random(seed).sample(range(len(examples)), m["max_train_questions"]))
        examples = [examples[i] for i in keep]
    docs = {d.id: d for d in store.iter_corpus(tctx.data_dir())}
    model = dpr.BiEncoder.from_backbone(ctx)
    params = list({id(p): p for p in list(model.q.parameters()) + list(model.p.parameters())}.values())
    opt = torch.optim.AdamW(params, lr=m.get("lr", 2e-5), weight_decay=m.get("weight_decay", 0.0))
    bs, n_hard = m.get("batch_size", 16), m.get("hard_negatives", 1)
    total = max(1, int(round(math.ceil(len(examples) / bs) * m.get("epochs", 1))))
    warm = int(total * m.get("warmup_ratio", 0.1))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm)))
    rng = random.Random(seed)
    doc_ids = list(docs)
    losses: list[float] = []
    parts: list[dict[str, float]] = []
    step, t0 = 0, time.perf_counter()
    model.q.train()
    model.p.train()
    while step < total:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for i in range(0, len(order), bs):
            if step >= total:
                break
            batch = [examples[j] for j in order[i:i + bs]]
            if len(batch) < 2:
                continue
            pids = [q.gold[0] for q, _ in batch]
            for q, negs in batch:  # one BM25 negative per question (a random passage if none), as DPR
                pool_ = [d for d in negs if d not in pids] or [rng.choice(doc_ids)]
                pids += pool_[:n_hard]
            qb = model._batch_q([q.text for q, _ in batch])
            pb = model._batch_p([docs[p].title for p in pids], [docs[p].text for p in pids])
            loss, part = bpr_loss(model.embed_q(qb), model.embed_p(pb), step, gamma=m["gamma"],
                                  cand_loss=m["cand_loss"], margin=m["margin"], reduction=m["cand_reduction"])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
            parts.append(part)
            step += 1
            if step % 50 == 0 or step == total:
                r = parts[-50:]
                print(f"step {step}/{total} loss {sum(losses[-50:]) / len(r):.4f} "
                      f"(cand {sum(p['cand'] for p in r) / len(r):.4f}, rerank {sum(p['rerank'] for p in r) / len(r):.4f}, "
                      f"beta {part['beta']:.2f}) {time.perf_counter() - t0:.0f}s", flush=True)
    model.save(out)
    return {"steps": step, "examples": len(examples), "train_dataset": m["train_dataset"],
            "seconds": time.perf_counter() - t0, "loss_first": losses[:5], "loss_last": losses[-5:],
            "cand_first": [p["cand"] for p in parts[:5]], "cand_last": [p["cand"] for p in parts[-5:]],
            "rerank_first": [p["rerank"] for p in parts[:5]], "rerank_last": [p["rerank"] for p in parts[-5:]],
            "beta_last": parts[-1]["beta"] if parts else 1.0, "backbone": m["backbone"],
            "settings": train_signature(m)}


# --------------------------------------------------------------------------------------------
# indexes


def _binary_spec(spec: str) -> str:
    backend, _, factory = spec.partition(":")
    if backend != "faiss-binary" or not factory:
        raise ConfigError(f"BPR index spec {spec!r} must read faiss-binary:<spec> (BFlat, BHash768, ...)")
    return factory


def build_index(ctx: Context, out: Path, model_dir: Path) -> dict[str, Any]:
    """Encode the corpus with the passage encoder, binarize (sign), build ``methods.bpr.index``.

    Writes the faiss binary index, the packed codes (``codes.npy``, the rerank's ±1 passage
    vectors; the index file holds the same codes) and ``docids.txt``."""
    from harness.indexes.faiss_binary import BinaryFaissIndex, binarize

    spec = {**DEFAULTS, **ctx.mcfg}["index"]
    factory = _binary_spec(spec)
    model = dpr.BiEncoder.load(ctx, model_dir)
    docs = list(store.iter_corpus(ctx.data_dir()))
    t0 = time.perf_counter()
    vecs = model.encode_passages([d.title for d in docs], [d.text for d in docs])
    t_enc = time.perf_counter() - t0
    t1 = time.perf_counter()
    codes = binarize(vecs)
    index = BinaryFaissIndex.build(factory, codes)
    build_seconds = time.perf_counter() - t1
    index_file = index.save(out)
    np.save(out / CODES_FILE, codes)
    (out / DOCIDS_FILE).write_text("".join(d.id + "\n" for d in docs), encoding="utf-8")
    return {"spec": spec, "documents": len(docs), "dim": int(vecs.shape[1]), "code_bytes": int(codes.shape[1]),
            "encode_seconds": t_enc, "build_seconds": build_seconds, "index_file_bytes": index_file.stat().st_size,
            "bits_set_fraction": float(np.unpackbits(codes).mean())}


def build_binary_index(spec: str, source: Path, out: Path, *, nflip: int = 0) -> dict[str, Any]:
    """Another binary index (e.g. the hash lookup) over the codes of a built BPR index."""
    from harness.indexes.faiss_binary import BinaryFaissIndex

    codes = np.load(Path(source) / CODES_FILE)
    t0 = time.perf_counter()
    index = BinaryFaissIndex.build(_binary_spec(spec), codes, nflip=nflip)
    seconds = time.perf_counter() - t0
    index_file = index.save(out)
    shutil.copyfile(Path(source) / CODES_FILE, out / CODES_FILE)
    shutil.copyfile(Path(source) / DOCIDS_FILE, out / DOCIDS_FILE)
    return {"spec": spec, "nflip": nflip, "documents": int(codes.shape[0]), "build_seconds": seconds,
            "index_file_bytes": index_file.stat().st_size, "source": str(source)}


def build_dpr_baseline(spec: str, dpr_index: Path, out: Path, *, train_size: int | None = None,
                       seed: int = 0) -> dict[str, Any]:
    """A DPR baseline index (HNSW, LSH, PQ) over the vectors of DPR's Flat index (no re-encoding)."""
    import faiss

    from harness.indexes.faiss_dense import INDEX_FILE, DenseFaissIndex

    flat = faiss.read_index(str(Path(dpr_index) / INDEX_FILE))
    if not isinstance(flat, faiss.IndexFlat):
        raise ConfigError(f"{dpr_index}: the DPR baselines read the passage vectors back from DPR's index, "
                          f"which must be faiss:Flat (methods.dpr.index)")
    vecs = flat.reconstruct_n(0, flat.ntotal)
    factory = spec.partition(":")[2]
    t0 = time.perf_counter()
    index = DenseFaissIndex.build(factory, vecs, train_size=train_size, seed=seed)
    seconds = time.perf_counter() - t0
    index_file = index.save(out)
    shutil.copyfile(Path(dpr_index) / DOCIDS_FILE, out / DOCIDS_FILE)
    return {"spec": spec, "documents": int(vecs.shape[0]), "dim": int(vecs.shape[1]), "build_seconds": seconds,
            "index_file_bytes": index_file.stat().st_size, "source": str(dpr_index)}


# --------------------------------------------------------------------------------------------
# search


class Searcher:
    """A trained BPR model with its binary index: ``encode`` (e_q) and ``search`` (two stages) apart.

    ``variant`` picks the search: a SEARCH_VARIANTS name or ``l<n>``; ``hash_dir`` holds the hash
    index (variants bhash and no-rerank). The default is the linear scan (bflat)."""

    def __init__(self, ctx: Context, index_dir: Path, model_dir: Path | None, *, variant: str = "bflat",
                 hash_dir: Path | None = None) -> None:
        from harness.indexes.faiss_binary import BinaryFaissIndex

        self.ctx = ctx
        self.variant = variant
        self.kind, self.rerank, self.n_candidates = _variant_search(ctx.cfg, variant)
        self.model = dpr.BiEncoder.load(ctx, model_dir) if model_dir is not None else None
        self.codes = np.load(Path(index_dir) / CODES_FILE)
        self.docids = (Path(index_dir) / DOCIDS_FILE).read_text(encoding="utf-8").split()
        s = {**DEFAULTS, **ctx.mcfg}
        self.index = None
        self.index_file: Path | None = None
        if self.kind == "hash":
            if hash_dir is None:
                raise ConfigError(f"BPR variant {variant!r} needs the hash index (hash_dir)")
            self.index = BinaryFaissIndex.load(hash_dir, _binary_spec(s["hash_index"]))
            self.index.set_nflip(int(s["hash_nflip"]))  # a search-time setting (methods.bpr.hash_nflip)
            self.index_file = Path(hash_dir) / "index.faissb"
        else:
            from harness.indexes.faiss_binary import INDEX_FILE

            self.index_file = Path(index_dir) / INDEX_FILE
            if self.kind == "flat":
                self.index = BinaryFaissIndex.load(index_dir, _binary_spec(s["index"]))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.model is None:
            raise ConfigError("this BPR searcher was built without a model")
        return self.model.encode_questions(list(texts))

    def search(self, qvecs: np.ndarray, k: int, qcodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, rows); ``qcodes`` = binarize(qvecs) when the caller has them (timing)."""
        from harness.indexes.faiss_binary import binarize, two_stage_search

        if self.kind is None:
            return two_stage_search(None, None, qvecs, self.codes, k, n_candidates=None)
        if qcodes is None:
            qcodes = binarize(qvecs)
        return two_stage_search(self.index, qcodes, qvecs, self.codes, k, n_candidates=self.n_candidates,
                                rerank=self.rerank)

    def results(self, qids: Sequence[str], scores: np.ndarray, rows: np.ndarray) -> dict[str, list[tuple[str, float]]]:
        return {q: [(self.docids[r], float(s)) for s, r in zip(srow, rrow) if r >= 0]
                for q, srow, rrow in zip(qids, scores, rows)}


def search(ctx: Context, index_dir: Path, queries: Sequence[Query], k: int, model_dir: Path) -> dict[str, list[tuple[str, float]]]:
    """The default search (generic ``python -m harness search``): linear scan + rerank, l = n_candidates."""
    s = Searcher(ctx, index_dir, model_dir)
    scores, rows = s.search(s.encode([q.text for q in queries]), k)
    return s.results([q.id for q in queries], scores, rows)


def describe(model_dir: Path) -> dict[str, Any]:
    return json.loads((Path(model_dir) / "meta.json").read_text())


# --------------------------------------------------------------------------------------------
# efficiency: index bytes (file size) and query time (bpr-query-time protocol)


class _DenseSystem:
    def __init__(self, index_dir: Path, spec: str) -> None:
        from harness.indexes.faiss_dense import INDEX_FILE, DenseFaissIndex

        self.index = DenseFaissIndex.load(index_dir, spec.partition(":")[2])
        self.index_file = Path(index_dir) / INDEX_FILE

    def search(self, qvecs: np.ndarray, k: int, qcodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(qvecs, k)


def time_per_question(systems: Mapping[str, tuple[Any, np.ndarray, np.ndarray | None]], k: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per question for each system (batch of one question, search only), round-robin per
    question so that every system sees the same machine load. ``systems``: name -> (searcher,
    question vectors, question codes or None)."""
    from harness.timing import time_calls

    out: dict[str, list[float]] = {name: [] for name in systems}
    n = min(len(v[1]) for v in systems.values())
    for i in range(n):
        for name, (s, qv, qc) in systems.items():
            q = qv[i:i + 1]
            c = None if qc is None else qc[i:i + 1]
            out[name] += time_calls(lambda s=s, q=q, c=c: s.search(q, k, c), repeats)
    return out


def efficiency(cfg: Mapping[str, Any], dataset: str, *, dpr_model: Path, bpr_model: Path, dpr_index: Path,
               bpr_index: Path, hash_index: Path, baseline_indexes: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """Index bytes and per-question query time of every Table 1/2 system: system -> metrics JSON."""
    import faiss

    from harness.indexes.faiss_binary import binarize
    from harness.meta import hardware, versions
    from harness.timing import PROTOCOLS, summarize

    protocol = PROTOCOLS.get("bpr-query-time")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    device = cfg["timing"]["device"]
    s = settings(cfg)
    dctx, bctx = Context(cfg, "dpr", dataset), variant_context(cfg, None, dataset)
    queries = store.read_queries(dctx.data_dir(), "test")
    if s["timing_queries"]:
        queries = queries[: s["timing_queries"]]
    texts = [q.text for q in queries]
    qd = dpr.BiEncoder.load(dctx, dpr_model).encode_questions(texts)
    qb = dpr.BiEncoder.load(bctx, bpr_model).encode_questions(texts)
    qc = binarize(qb)  # the hash layer on the question: part of encoding, outside the timer
    systems: dict[str, tuple[Any, np.ndarray, np.ndarray | None]] = {
        "dpr": (_DenseSystem(dpr_index, Context(cfg, "dpr").mcfg.get("index", "faiss:Flat")), qd, None)}
    for name, spec in dpr_baselines(cfg).items():
        systems[f"dpr.{name}"] = (_DenseSystem(baseline_indexes[name], spec), qd, None)
    for v in SEARCH_VARIANTS:
        systems[f"bpr.{v}"] = (Searcher(bctx, bpr_index, None, variant=v, hash_dir=hash_index), qb, qc)
    k = cfg["evaluate"]["depth"]
    for sys_, qv, c in systems.values():  # warm caches once, outside the samples
        sys_.search(qv[:1], k, None if c is None else c[:1])
    samples = time_per_question(systems, k, repeats)
    out = {}
    for name, (sys_, _, _) in systems.items():
        summ = summarize(samples[name], protocol.trim)
        out[name] = {
            "system": name, "dataset": dataset,
            "values": {
                "index_bytes": {"value": sys_.index_file.stat().st_size, "unit": "B", "device": device,
                                "what": f"size of {sys_.index_file.name} written by faiss"},
                "query_ms": {"value": summ["mean"] * 1e3, "unit": "ms", "device": device,
                             "what": "search only, one question per call, encoding excluded; mean over questions x repeats"},
            },
            "protocol": protocol.name, "inside_timer": protocol.inside_timer["search"], "repeats": repeats,
            "questions": len(queries), "k": k, "summary_ms": {a: (b * 1e3 if a != "n" else b) for a, b in summ.items()},
            "faiss_threads": faiss.omp_get_max_threads(), "hardware": hardware(), "versions": versions(),
        }
    return out


def merge_metrics(parts: Sequence[Path], out: Path, *, system: str, dataset: str,
                  not_run: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One metrics file from partial ones (efficiency, reader EM): values and not_run merged."""
    from harness.io import read_json, write_json

    doc: dict[str, Any] = {"system": system, "dataset": dataset, "values": {}, "not_run": dict(not_run or {}), "parts": {}}
    for p in parts:
        part = read_json(p)
        doc["values"].update(part.get("values", {}))
        doc["not_run"].update(part.get("not_run", {}))
        doc["parts"][str(p)] = {k: v for k, v in part.items() if k not in ("values", "not_run")}
    for name in doc["values"]:
        doc["not_run"].pop(name, None)
    write_json(out, doc)
    return doc


# --------------------------------------------------------------------------------------------
# command line


def _write_run(out: Path, results: Mapping[str, list[tuple[str, float]]], *, system: str, dataset: str,
               seconds: float, cfg_hash: str, extra: Mapping[str, Any]) -> None:
    from harness.io import write_json
    from harness.meta import git_commit, hardware, versions
    from harness.runs import write_run

    write_run(out, results, tag=system)
    write_json(Path(f"{out}.meta.json"), {
        "kind": "run", "system": system, "dataset": dataset, "split": "test", "queries": len(results),
        "seconds": round(seconds, 3), "config_hash": cfg_hash, "git_commit": git_commit(), "versions": versions(),
        "hardware": hardware(), **extra,
        "note": "wall time of the whole search (query encoding included); see metrics/ for the protocol's query time",
    })


def _cmd_train(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    from harness.io import atomic_path
    from harness.meta import write_meta

    ctx = variant_context(cfg, a.variant)
    t0 = time.perf_counter()
    with atomic_path(a.out) as tmp:
        tmp.mkdir()
        info = train(ctx, tmp, a.negatives)
        write_meta(tmp, "model", spec=f"bpr{'.' + a.variant if a.variant else ''}", config_hash=train_hash(cfg, a.variant),
                   seconds=time.perf_counter() - t0, extra={"variant": a.variant, **info})
    print(f"trained bpr{' variant ' + a.variant if a.variant else ''}: {info['steps']} steps in {time.perf_counter() - t0:.1f}s")
    return 0


def _cmd_index(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    """Binary index of a train variant (``--variant``) or the hash index over built codes (``--source``)."""
    from harness.io import atomic_path
    from harness.meta import write_meta

    t0 = time.perf_counter()
    with atomic_path(a.out) as tmp:
        tmp.mkdir()
        if a.source is not None:
            info = build_binary_index(settings(cfg)["hash_index"], a.source, tmp, nflip=int(settings(cfg)["hash_nflip"]))
        else:
            info = build_index(variant_context(cfg, a.variant, a.dataset), tmp, a.model)
        write_meta(tmp, "index", spec=info.pop("spec"), config_hash=train_hash(cfg, a.variant),
                   seconds=time.perf_counter() - t0, extra={"method": "bpr", "variant": a.variant, "dataset": a.dataset, **info})
    print(f"index bpr/{a.dataset}: {info['documents']} codes in {time.perf_counter() - t0:.1f}s")
    return 0


def _cmd_dpr_index(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    from harness.config import section_hash
    from harness.io import atomic_path
    from harness.meta import write_meta

    specs = dpr_baselines(cfg)
    if a.variant not in specs:
        raise ConfigError(f"unknown DPR baseline {a.variant!r}; methods.bpr.dpr_baselines defines: {', '.join(specs)}")
    t0 = time.perf_counter()
    with atomic_path(a.out) as tmp:
        tmp.mkdir()
        info = build_dpr_baseline(specs[a.variant], a.dpr_index, tmp, train_size=settings(cfg)["baseline_train_size"],
                                  seed=cfg["seed"])
        write_meta(tmp, "index", spec=info.pop("spec"), config_hash=section_hash(cfg, "methods.dpr", "seed"),
                   seconds=time.perf_counter() - t0, extra={"method": "dpr", "variant": a.variant, "dataset": a.dataset, **info})
    print(f"index dpr.{a.variant}/{a.dataset}: {info['documents']} vectors in {time.perf_counter() - t0:.1f}s")
    return 0


def _cmd_search(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    """Runs of BPR search variants (one model load and one question encoding for all)."""
    ctx = variant_context(cfg, a.variant, a.dataset)
    queries = store.read_queries(ctx.data_dir(), "test")
    k = cfg["evaluate"]["depth"]
    if len(a.systems) != len(a.out):
        raise ConfigError("bpr search: give one --out per --systems entry")
    t0 = time.perf_counter()
    model = dpr.BiEncoder.load(ctx, a.model)
    qvecs = model.encode_questions([q.text for q in queries])
    t_enc = time.perf_counter() - t0
    index_dir = a.index
    if index_dir is None:  # a train variant's index lives only as long as its search (nothing else reads it)
        index_dir = Path(tempfile.mkdtemp(prefix="bpr-index-"))
        build_index(ctx, index_dir, a.model)
    try:
        _search_systems(a, cfg, ctx, queries, qvecs, t_enc, index_dir, k)
    finally:
        if a.index is None:
            shutil.rmtree(index_dir, ignore_errors=True)
    return 0


def _search_systems(a: argparse.Namespace, cfg: dict[str, Any], ctx: Context, queries: Sequence[Query],
                    qvecs: np.ndarray, t_enc: float, index_dir: Path, k: int) -> None:
    for system, out in zip(a.systems, a.out):
        method, _, v = system.partition(".")
        if method != "bpr" or not v:
            raise ConfigError(f"bpr search: system {system!r} is not bpr.<variant>")
        search_variant = "bflat" if a.variant else v
        t1 = time.perf_counter()
        s = Searcher(ctx, index_dir, None, variant=search_variant, hash_dir=a.hash_index)
        scores, rows = s.search(qvecs, k)
        _write_run(out, s.results([q.id for q in queries], scores, rows), system=system, dataset=a.dataset,
                   seconds=t_enc + time.perf_counter() - t1, cfg_hash=train_hash(cfg, a.variant),
                   extra={"search_variant": search_variant, "train_variant": a.variant, "n_candidates": s.n_candidates,
                          "rerank": s.rerank, "depth": k})
        print(f"search {system}/{a.dataset}: {len(queries)} queries")


def _cmd_dpr_search(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    from harness.config import section_hash

    specs = dpr_baselines(cfg)
    if a.variant not in specs:
        raise ConfigError(f"unknown DPR baseline {a.variant!r}; methods.bpr.dpr_baselines defines: {', '.join(specs)}")
    ctx = Context(cfg, "dpr", a.dataset)
    queries = store.read_queries(ctx.data_dir(), "test")
    k = cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    qvecs = dpr.BiEncoder.load(ctx, a.model).encode_questions([q.text for q in queries])
    s = _DenseSystem(a.index, specs[a.variant])
    scores, rows = s.search(qvecs, k)
    docids = (Path(a.index) / DOCIDS_FILE).read_text(encoding="utf-8").split()
    results = {q.id: [(docids[r], float(x)) for x, r in zip(srow, rrow) if r >= 0]
               for q, srow, rrow in zip(queries, scores, rows)}
    _write_run(a.out, results, system=f"dpr.{a.variant}", dataset=a.dataset, seconds=time.perf_counter() - t0,
               cfg_hash=section_hash(cfg, "methods.dpr", "methods.bpr.dpr_baselines", "seed"),
               extra={"spec": specs[a.variant], "depth": k})
    print(f"search dpr.{a.variant}/{a.dataset}: {len(queries)} queries")
    return 0


def _cmd_efficiency(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    from harness.io import write_json

    names = dpr_baselines(cfg)
    if len(a.baseline_index) != len(names):
        raise ConfigError(f"bpr efficiency: give one --baseline-index per DPR baseline ({', '.join(names)})")
    res = efficiency(cfg, a.dataset, dpr_model=a.dpr_model, bpr_model=a.bpr_model, dpr_index=a.dpr_index,
                     bpr_index=a.bpr_index, hash_index=a.hash_index,
                     baseline_indexes=dict(zip(names, a.baseline_index)))
    for system, doc in res.items():
        write_json(Path(a.out_dir) / f"{system}.efficiency.json", doc)
        v = doc["values"]
        print(f"{system}/{a.dataset}: index {v['index_bytes']['value']:,} B, query {v['query_ms']['value']:.3f} ms")
    return 0


def _cmd_merge(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    not_run = dict(x.split("=", 1) for x in a.not_run)
    doc = merge_metrics(a.parts, a.out, system=a.system, dataset=a.dataset, not_run=not_run)
    print(f"metrics {a.system}/{a.dataset}: {', '.join(doc['values'])}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from harness.config import add_config_argument, load_config

    ap = argparse.ArgumentParser(prog="python -m harness.methods.bpr", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train the main model or a train variant (--variant)")
    add_config_argument(p)
    p.add_argument("--variant")
    p.add_argument("--negatives", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("index", help="binary index of a train variant, or the hash index over built codes (--source)")
    add_config_argument(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--variant")
    p.add_argument("--model", type=Path)
    p.add_argument("--source", type=Path, help="a built BPR index whose codes the hash index (methods.bpr.hash_index) takes")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("dpr-index", help="a DPR baseline index (methods.bpr.dpr_baselines) from DPR's Flat index")
    add_config_argument(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--variant", required=True)
    p.add_argument("--dpr-index", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("search", help="runs of BPR systems (search variants, or a train variant's linear scan)")
    add_config_argument(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--variant", help="train variant (its model and index); default the main model")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--index", type=Path, help="the model's binary index (default: built in a temporary folder)")
    p.add_argument("--hash-index", type=Path)
    p.add_argument("--systems", nargs="+", required=True)
    p.add_argument("--out", type=Path, nargs="+", required=True)
    p = sub.add_parser("dpr-search", help="run of a DPR baseline index")
    add_config_argument(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--variant", required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("efficiency", help="index bytes and query time of every Table 1/2 system")
    add_config_argument(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--dpr-model", type=Path, required=True)
    p.add_argument("--bpr-model", type=Path, required=True)
    p.add_argument("--dpr-index", type=Path, required=True)
    p.add_argument("--bpr-index", type=Path, required=True)
    p.add_argument("--hash-index", type=Path, required=True)
    p.add_argument("--baseline-index", type=Path, nargs="*", default=[])
    p.add_argument("--out-dir", type=Path, required=True)
    p = sub.add_parser("merge-metrics", help="one metrics file from partial ones")
    add_config_argument(p)
    p.add_argument("--system", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--parts", type=Path, nargs="+", required=True)
    p.add_argument("--not-run", nargs="*", default=[], metavar="NAME=REASON")
    p.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    cfg = load_config(a.config)
    _check(settings(cfg))
    cmds = {"train": _cmd_train, "index": _cmd_index, "dpr-index": _cmd_dpr_index, "search": _cmd_search,
            "dpr-search": _cmd_dpr_search, "efficiency": _cmd_efficiency, "merge-metrics": _cmd_merge}
    try:
        return cmds[a.cmd](a, cfg)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from harness.methods import bpr as _bpr  # run the canonical module, not a second copy named __main__

    sys.exit(_bpr.main())
