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

System ids (declared by :func:`declare`): ``bpr.bflat`` / ``bpr.bhash`` (Table 1), ``bpr.no-rerank``
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

import hashlib
import json
import math
import random
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts import DOCIDS, hits_from_rows, read_docids, write_docids
from harness.config import fragment_defaults
from harness.datasets import Query, store
from harness.errors import ConfigError
from harness.methods import dpr
from harness.methods.base import Context, training_keys, wants_gpu
from harness.plan import Job, Ref

CODES_FILE = "codes.npy"
DOCIDS_FILE = DOCIDS  # the shared doc-id file (harness.artifacts)
#: settings that change a trained BPR model (hash of the train rules; variant equality)
TRAIN_KEYS = ("backbone", "train_dataset", "pooling", "shared_encoder", "epochs", "batch_size", "lr",
              "weight_decay", "warmup_ratio", "q_max_len", "p_max_len", "hard_negatives", "strip_question_mark",
              "gamma", "cand_loss", "margin", "cand_reduction", "max_train_questions")
SCHEMA = "bpr.schema.yaml"
#: defaults of methods.bpr: written once, in the schema
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)
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
    target = torch.arange(n, device=eq.device)
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
    """Train BPR (``ctx.mcfg`` = the effective methods.bpr settings); writes the encoders to ``out``.
    The loop is :func:`harness.train.train_loop`."""
    from harness import train as loop

    dpr._torch(ctx)
    m = {**DEFAULTS, **ctx.mcfg}
    _check(m)
    seed = ctx.cfg["seed"]
    loop.set_seed(seed)
    tctx = Context(ctx.cfg, ctx.method, m["train_dataset"])
    examples = loop.subsample(dpr._training_examples(tctx, negatives_file), m["max_train_questions"], seed)
    docs = {d.id: d for d in store.iter_corpus(tctx.data_dir())}
    model = dpr.BiEncoder.from_backbone(ctx)
    params = list({id(p): p for p in list(model.q.parameters()) + list(model.p.parameters())}.values())
    ts = loop.TrainSettings.from_config(m)
    device = loop.resolve_device(ts.device)
    n_hard = m.get("hard_negatives", 1)
    doc_ids = list(docs)

    def step_fn(batch: list[tuple[Query, list[str]]], step: int, rng: random.Random):
        pids = [q.gold[0] for q, _ in batch]
        for q, negs in batch:  # one BM25 negative per question (a random passage if none), as DPR
            pool_ = [d for d in negs if d not in pids] or [rng.choice(doc_ids)]
            pids += pool_[:n_hard]
        qb = model._batch_q([q.text for q, _ in batch]).to(device)
        pb = model._batch_p([docs[p].title for p in pids], [docs[p].text for p in pids]).to(device)
        return bpr_loss(model.embed_q(qb), model.embed_p(pb), step, gamma=m["gamma"], cand_loss=m["cand_loss"],
                        margin=m["margin"], reduction=m["cand_reduction"])

    info = loop.train_loop(examples, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=[model.q, model.p])
    return {"steps": info["steps"], "examples": len(examples), "train_dataset": m["train_dataset"],
            "seconds": info["seconds"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
            "cand_first": info.get("cand_first", []), "cand_last": info.get("cand_last", []),
            "rerank_first": info.get("rerank_first", []), "rerank_last": info.get("rerank_last", []),
            "beta_last": info["beta_last"][-1] if info.get("beta_last") else 1.0, "backbone": m["backbone"],
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
    write_docids(out, [d.id for d in docs])
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
        self.docids = read_docids(index_dir, expect=len(self.codes))
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
        return hits_from_rows(self.docids, qids, scores, rows)


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
    from harness.meta import device_info, hardware, versions
    from harness.timing import PROTOCOLS, summarize

    protocol = PROTOCOLS.get("bpr-query-time")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    device = "cpu"  # faiss-cpu indexes, searched in this process (faiss-gpu is not wired for BPR's search)
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
            "faiss_threads": faiss.omp_get_max_threads(), "device_info": device_info(device),
            "hardware": hardware(), "versions": versions(),
        }
    return out


# --------------------------------------------------------------------------------------------
# Table 1 at the paper's scale from a synthetic payload (methods.bpr.scale; the scale overlay)
# --------------------------------------------------------------------------------------------
SCALE_DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA, "scale")
SYNTHETIC_NOTE = ("synthetic payload (harness/datasets/synthetic.py): random 768-d vectors and 768-bit codes, "
                  "seeded; speed and size only, never effectiveness")
#: Table 1 (21M passages): index size (GB) and query time (ms) as published
PAPER_TABLE1 = {"dpr": (64.6, 456.9), "dpr.hnsw": (151.0, 1.8), "dpr.lsh": (2.0, 28.8), "dpr.pq": (2.0, 44.0),
                "bpr.bflat": (2.0, 85.3), "bpr.bhash": (2.2, 38.1), "bpr.no-rerank": (None, 37.9)}


def scale_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``methods.bpr.scale`` with its schema defaults (fractions merged key by key)."""
    sc = dict(cfg["methods"]["bpr"].get("scale") or {})
    return {**SCALE_DEFAULTS, **sc, "fractions": {**SCALE_DEFAULTS["fractions"], **(sc.get("fractions") or {})}}


def _per_question(fn: Any, n_q: int, repeats: int) -> list[float]:
    """Seconds per question, one question per call (protocol bpr-query-time), after one warm-up call."""
    from harness.timing import time_calls

    fn(0)
    return [x for i in range(n_q) for x in time_calls(lambda i=i: fn(i), repeats)]


def scale_efficiency(ctx: Context, dataset: str, out_dir: Path) -> list[Path]:
    """Index size and query time of every Table 1 system (and BPR w/o reranking, Table 2) at the
    synthetic dataset's passage count. BPR's codes are indexed whole (2.0 GB at 21M); DPR's vectors
    (64.5 GB at 21M) on fractions, projected linearly (Flat, LSH, PQ scan every code) — HNSW's size
    is projected linearly, its query time is measured on its fraction and reported unscaled."""
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import faiss

    from harness.datasets import synthetic as syn
    from harness.indexes.faiss_binary import BinaryFaissIndex, rerank_candidates
    from harness.indexes.faiss_dense import DenseFaissIndex
    from harness.meta import device_info, hardware, timing_gpu, versions
    from harness.timing import PROTOCOLS, summarize

    cfg = ctx.cfg
    sc = scale_settings(cfg)
    protocol = PROTOCOLS.get("bpr-query-time")
    repeats = cfg["timing"].get("repeats") or protocol.repeats
    n = syn.passages(cfg["datasets"][dataset])
    d, k, l_cand = int(sc["dim"]), cfg["evaluate"]["depth"], int(sc["n_candidates"] or settings(cfg)["n_candidates"])
    n_q = int(sc["timing_queries"])
    gpu, gpu_why = timing_gpu(cfg)
    rng = np.random.default_rng(cfg["seed"])
    qd = rng.standard_normal((n_q, d), dtype=np.float32)
    specs = {"dpr": "Flat", "dpr.hnsw": "HNSW512", "dpr.lsh": "LSH", "dpr.pq": f"PQ{d // 8}x8np"}
    frac = {"dpr": "flat", "dpr.hnsw": "hnsw", "dpr.lsh": "lsh", "dpr.pq": "pq"}
    common = {"payload": SYNTHETIC_NOTE, "passages": n, "dim": d, "protocol": protocol.name, "repeats": repeats,
              "inside_timer": protocol.inside_timer["search"], "questions": n_q, "k": k, "n_candidates": l_cand,
              "seed": cfg["seed"], "faiss_threads": faiss.omp_get_max_threads(), "device_info": device_info("cpu"),
              "hardware": hardware(), "versions": versions()}
    em_why = "not run: effectiveness is never measured on a synthetic payload (random vectors; speed and size only)"
    figures: dict[str, dict[str, Any]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bpr-scale-", dir=Path(out_dir).parent))

    def size_of(save: Any) -> int:
        path = save(tmp)
        size = Path(path).stat().st_size
        Path(path).unlink()
        return size

    def record(system: str, spec: str, nf: int, build: float, size: int, samples: list[float],
               scale_time: bool, gpu_s: float | None = None, **extra: Any) -> None:
        f = n / nf
        proj = nf < n
        mean = summarize(samples, protocol.trim)["mean"]
        tf = f if scale_time else 1.0
        vals = {"index_bytes": {"value": size * f, "unit": "B", **({"kind": "projected"} if proj else {}),
                                "what": f"size of the faiss index file over {nf:,} of {n:,} passages" + (f", x {f:.3f}" if proj else "")},
                "query_ms": {"value": mean * 1e3 * tf, "unit": "ms", "device": "cpu",
                             **({"kind": "projected"} if proj else {}),
                             "what": "search only, one question per call, encoding excluded; mean over questions x repeats"
                                     + (f"; measured on {nf:,} passages x {f:.3f} (the search scans every code)" if proj and scale_time
                                        else f"; measured on {nf:,} passages, not scaled (HNSW's search grows ~log n)" if proj else "")},
                ("build_seconds_fraction" if proj else "build_seconds"): {
                    "value": build, "unit": "s", "device": "cpu",
                    "what": f"build over {nf:,} passages (training included), not scaled"}}
        nr = {"em": em_why}
        if gpu_s is not None:
            vals["query_ms_cuda"] = {"value": gpu_s * 1e3 * tf, "unit": "ms", "device": "cuda",
                                     **({"kind": "projected"} if proj else {})}
        else:
            nr["query_ms_cuda"] = gpu_why
        figures[system] = {"system": system, "dataset": dataset, "values": vals, "not_run": nr, "spec": spec,
                           "indexed_passages": nf, "scale_factor": f, "raw_samples_seconds": samples, **extra, **common}
        _say(f"{system}: {vals['index_bytes']['value'] / 1e9:.2f} GB, {vals['query_ms']['value']:.2f} ms/question"
             + (" (projected)" if proj else ""))

    def gpu_time(index: Any, queries: np.ndarray, binary: bool) -> float | None:
        """faiss GPU copy (GpuIndexFlat / GpuIndexBinaryFlat), one question per call; faiss-gpu only."""
        if not gpu:
            return None
        res = faiss.StandardGpuResources()
        g = faiss.index_binary_cpu_to_gpu(res, 0, index) if binary else faiss.index_cpu_to_gpu(res, 0, index)
        kk = l_cand if binary else k
        return summarize(_per_question(lambda i: g.search(queries[i:i + 1], kk), len(queries), repeats), "none")["mean"]

    try:
        # ---- DPR's vectors: fractions, projected ---------------------------------------------------------
        nmax = min(n, max(int(sc["fractions"][frac[s]]) for s in specs))
        _say(f"DPR: {nmax:,} synthetic {d}-d vectors (fractions {sc['fractions']}) of {n:,}")
        X = np.concatenate(list(syn.dense_blocks(nmax, d, rng)))
        for system, spec in specs.items():
            nf = min(n, int(sc["fractions"][frac[system]]))
            _say(f"{system} (faiss:{spec}) on {nf:,} vectors: build")
            t0 = time.perf_counter()
            idx = DenseFaissIndex.build(spec, X[:nf], train_size=min(nf, int(sc["pq_train"])), seed=cfg["seed"])
            build = time.perf_counter() - t0
            samples = _per_question(lambda i, idx=idx: idx.search(qd[i:i + 1], k), n_q, repeats)
            g = gpu_time(idx.index, qd, False) if system == "dpr" else None
            record(system, f"faiss:{spec}", nf, build, size_of(idx.save), samples, system != "dpr.hnsw", g)
            del idx
        del X
        # ---- BPR's codes: whole ----------------------------------------------------------------------------
        _say(f"BPR: {n:,} synthetic {d}-bit codes ({n * d // 8 / 1e9:.2f} GB)")
        codes = syn.codes(n, d, rng)
        qc = syn.codes(n_q, d, rng)
        for system, spec in (("bpr.bflat", "BFlat"), ("bpr.bhash", f"BHash{d}")):
            _say(f"{system} (faiss-binary:{spec}) on {n:,} codes: build")
            t0 = time.perf_counter()
            idx = BinaryFaissIndex.build(spec, codes)
            build = time.perf_counter() - t0
            found: list[int] = []

            def two_stage(i: int, idx: Any = idx, found: list[int] = found) -> None:
                _, cand = idx.search(qc[i:i + 1], l_cand)
                found.append(int((cand >= 0).sum()))
                rerank_candidates(cand, qd[i:i + 1], codes, k)

            samples = _per_question(two_stage, n_q, repeats)
            size = size_of(idx.save)
            extra = {"candidates_found_mean": float(np.mean(found))}
            if idx.is_hash:
                extra["hash_buckets"] = int(idx.index.hashtable_size())
            g = gpu_time(idx.index, qc, True) if system == "bpr.bflat" else None
            record(system, f"faiss-binary:{spec}", n, build, size, samples, True, g, **extra)
            if system == "bpr.bhash":  # Table 2: w/o reranking = the hash lookup's top k in Hamming order
                nr_samples = _per_question(lambda i, idx=idx: idx.search(qc[i:i + 1], k), n_q, repeats)
                record("bpr.no-rerank", f"faiss-binary:{spec}", n, build, size, nr_samples, True, None, **extra)
            del idx
        codes = None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _ratios(figures)
    out = []
    for system, doc in figures.items():
        path = Path(out_dir) / f"{system}.json"
        from harness.io import write_json

        write_json(path, doc)
        out.append(path)
    return out


def _ratios(figures: dict[str, dict[str, Any]]) -> None:
    """The paper's efficiency ratios (DPR flat over BPR: size and time; hash over linear scan), measured
    beside published, added to bpr.bflat's file and printed with the targets they meet or miss."""
    def v(system: str, what: str) -> float | None:
        return figures.get(system, {}).get("values", {}).get(what, {}).get("value")

    pairs = {"dpr_over_bflat_bytes": ("dpr", "bpr.bflat", "index_bytes", 64.6 / 2.0),
             "dpr_over_bflat_query_ms": ("dpr", "bpr.bflat", "query_ms", 456.9 / 85.3),
             "dpr_over_bhash_query_ms": ("dpr", "bpr.bhash", "query_ms", 456.9 / 38.1),
             "bflat_over_bhash_query_ms": ("bpr.bflat", "bpr.bhash", "query_ms", 85.3 / 38.1),
             "hnsw_over_bflat_bytes": ("dpr.hnsw", "bpr.bflat", "index_bytes", 151.0 / 2.0)}
    ratios = {}
    for name, (a, b, what, paper) in pairs.items():
        x, y = v(a, what), v(b, what)
        if x is None or not y:
            continue
        ratios[name] = {"value": x / y, "unit": "ratio", "paper": round(paper, 3), "kind": "projected"
                        if "projected" in (figures[a]["values"][what].get("kind"), figures[b]["values"][what].get("kind")) else "measured"}
    if "bpr.bflat" in figures:
        figures["bpr.bflat"]["ratios"] = ratios
    print("\nBPR Table 1 at scale (synthetic payload): measured / projected beside the paper", flush=True)
    for system, doc in figures.items():
        size, ms = doc["values"]["index_bytes"], doc["values"]["query_ms"]
        pub = PAPER_TABLE1.get(system, (None, None))
        mark = lambda e: "projected" if e.get("kind") == "projected" else "measured"
        print(f"  {system:<14} {size['value'] / 1e9:8.2f} GB ({mark(size)}; paper {pub[0]} GB)   "
              f"{ms['value']:9.2f} ms ({mark(ms)}; paper {pub[1]} ms: {'meets' if pub[1] and ms['value'] <= pub[1] else 'misses'})",
              flush=True)
    for name, r in ratios.items():
        verdict = "meets" if r["value"] >= 0.95 * r["paper"] else "misses"   # the paper's factor, within 5 %
        print(f"  ratio {name:<28} {r['value']:8.2f} ({r['kind']}; paper {r['paper']}: {verdict})", flush=True)


def _say(msg: str) -> None:
    print(f"[bpr scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# jobs (harness/plan.py)

#: keys of methods.bpr that never change a trained model
NOT_MODEL = ("n_candidates", "candidate_grid", "hash_index", "hash_nflip", "dpr_baselines", "baseline_train_size",
             "train_variants", "train_variant_overrides", "timing_queries", "efficiency_datasets", "variant_datasets",
             "scale")


def model_id(cfg: Mapping[str, Any], variant: str | None) -> str:
    """``bpr`` for the main model and for a train variant whose settings equal it, else ``bpr.<variant>``."""
    if variant is None or train_signature(settings(cfg, variant)) == train_signature(settings(cfg)):
        return "bpr"
    return f"bpr.{variant}"


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test") -> Job:
    """Every search variant of the main model on ``dataset`` (one model load, one encoding); on
    another split (the reader's training passages) the default search alone, ``bpr.bflat``."""
    systems = tuple(f"{name}.{v}" for v in search_variants(cfg)) if split == "test" else (f"{name}.bflat",)
    return Job("search", name if split == "test" else f"{name}.{split}", name, "run_search", dataset,
               gpu=wants_gpu(cfg, name), params={"split": split}, systems=systems,
               keys=("evaluate.depth", f"methods.{name}.n_candidates", f"methods.{name}.candidate_grid",
                     f"methods.{name}.hash_nflip"),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", name),
                       "index": Ref("index", name, dataset), "hash_index": Ref("index", f"{name}.hash", dataset)})


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models ``bpr`` and ``bpr.<variant>`` (Tables 7/9); indexes ``bpr`` (linear scan), ``bpr.hash``
    (hash lookup over its codes) and the DPR baselines ``dpr.<b>`` (from DPR's Flat vectors); searches
    ``bpr`` (every search variant), ``bpr.<variant>`` and ``bpr.dpr-baselines`` per dataset; the
    efficiency figures (index bytes, query time) of every Table 1/2 system."""
    s = settings(cfg)
    _check(s)
    m, td, gpu = f"methods.{name}", s["train_dataset"], wants_gpu(cfg, name)
    model_keys = training_keys(cfg, name, exclude=NOT_MODEL)
    data = {"data": Ref("data", dataset=td), "negatives": Ref("negatives", dataset=td)}
    jobs = [Job("train", name, name, "train_step", gpu=gpu, keys=model_keys, inputs=data),
            Job("index", name, name, "build", gpu=gpu, keys=(f"{m}.index",),
                inputs={"data": Ref("data"), "model": Ref("model", name)}),
            Job("index", f"{name}.hash", name, "build_hash", keys=(f"{m}.hash_index", f"{m}.hash_nflip"),
                inputs={"source": Ref("index", name)}, mem_mb=4000)]
    baselines = dpr_baselines(cfg)
    for b in baselines:
        jobs.append(Job("index", f"dpr.{b}", name, "build_baseline", params={"baseline": b},
                        keys=(f"{m}.dpr_baselines.{b}", f"{m}.baseline_train_size", "seed"),
                        inputs={"dpr_index": Ref("index", "dpr")}))
    variants = train_variants(cfg)
    for v in variants:
        if model_id(cfg, v) != name:
            jobs.append(Job("train", model_id(cfg, v), name, "train_step", gpu=gpu, params={"variant": v}, inputs=data,
                            keys=(*model_keys, f"{m}.train_variant_overrides", f"{m}.train_variants.{v}")))
    for d in cfg["methods"][name].get("datasets", []):
        jobs.append(search_job(cfg, name, d))
        if baselines:
            jobs.append(Job("search", f"{name}.dpr-baselines", name, "run_baselines", d, gpu=gpu,
                            keys=("evaluate.depth",), systems=tuple(f"dpr.{b}" for b in baselines),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", "dpr"),
                                    **{f"index_{b}": Ref("index", f"dpr.{b}", d) for b in baselines}}))
    for d in cfg["methods"][name].get("variant_datasets") or [td]:
        for v in variants:
            jobs.append(Job("search", f"{name}.{v}", name, "run_variant", d, gpu=gpu, params={"variant": v},
                            keys=("evaluate.depth", f"{m}.n_candidates", f"{m}.index"), systems=(f"{name}.{v}",),
                            inputs={"data": Ref("data", dataset=d), "model": Ref("model", model_id(cfg, v))}))
    for d in cfg["methods"][name].get("efficiency_datasets") or [td]:
        jobs.append(Job("measure", f"{name}.efficiency", name, "measure_efficiency", d,
                        keys=("timing", "evaluate.depth", f"{m}.timing_queries", f"{m}.n_candidates", f"{m}.hash_nflip"),
                        systems=tuple(efficiency_systems(cfg)),
                        inputs={"data": Ref("data", dataset=d), "dpr_model": Ref("model", "dpr"),
                                "bpr_model": Ref("model", name), "dpr_index": Ref("index", "dpr", d),
                                "bpr_index": Ref("index", name, d), "hash_index": Ref("index", f"{name}.hash", d),
                                **{f"index_{b}": Ref("index", f"dpr.{b}", d) for b in baselines}}))
    for d in scale_settings(cfg)["datasets"]:
        jobs.append(Job("measure", f"{name}.scale", name, "measure_scale", d, mem_mb=10000,
                        keys=("seed", "timing", "evaluate.depth", f"{m}.scale", f"{m}.n_candidates", f"datasets.{d}"),
                        systems=("dpr", "dpr.hnsw", "dpr.lsh", "dpr.pq", "bpr.bflat", "bpr.bhash", "bpr.no-rerank")))
    return jobs


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    variant = job.params.get("variant")
    info = train(variant_context(ctx.cfg, variant), out, inputs["negatives"])
    return {"variant": variant, **info}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return build_index(variant_context(ctx.cfg, None, job.dataset), out, inputs["model"])


def build_hash(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    s = settings(ctx.cfg)
    return build_binary_index(s["hash_index"], inputs["source"], out, nflip=int(s["hash_nflip"]))


def build_baseline(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    s = settings(ctx.cfg)
    spec = dpr_baselines(ctx.cfg)[job.params["baseline"]]
    return build_dpr_baseline(spec, inputs["dpr_index"], out, train_size=s["baseline_train_size"], seed=ctx.cfg["seed"])


def _write(out: Path, system: str, s: Searcher, queries: Sequence[Query], scores, rows, seconds: float,
           **meta: Any) -> None:
    from harness.artifacts import write_run_with_meta

    write_run_with_meta(out / f"{system}.trec", s.results([q.id for q in queries], scores, rows), system=system,
                        meta={"seconds": round(seconds, 3), **meta,
                              "note": "wall time of the search (question encoding included); the protocol's "
                                      "query time is in metrics/"})


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Runs of every search variant of the main model (one model load and one question encoding)."""
    bctx = variant_context(ctx.cfg, None, job.dataset)
    queries = store.read_queries(inputs["data"], job.params.get("split", "test"))
    k = ctx.cfg["evaluate"]["depth"]
    t0 = time.perf_counter()
    qvecs = dpr.BiEncoder.load(bctx, inputs["model"]).encode_questions([q.text for q in queries])
    t_enc = time.perf_counter() - t0
    for system in job.systems:
        v = system.partition(".")[2]
        t1 = time.perf_counter()
        s = Searcher(bctx, inputs["index"], None, variant=v, hash_dir=inputs["hash_index"])
        scores, rows = s.search(qvecs, k)
        _write(out, system, s, queries, scores, rows, t_enc + time.perf_counter() - t1, dataset=job.dataset,
               split=job.params.get("split", "test"), search_variant=v, n_candidates=s.n_candidates,
               rerank=s.rerank, depth=k)
    return {"queries": len(queries)}


def run_variant(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """A train variant's run: its binary index (built in a temporary folder: nothing else reads it)
    searched by linear scan + rerank."""
    v = job.params["variant"]
    vctx = variant_context(ctx.cfg, v, job.dataset)
    queries = store.read_queries(inputs["data"], "test")
    t0 = time.perf_counter()
    qvecs = dpr.BiEncoder.load(vctx, inputs["model"]).encode_questions([q.text for q in queries])
    with tempfile.TemporaryDirectory(prefix="bpr-index-") as tmp:
        build_index(vctx, Path(tmp), inputs["model"])
        s = Searcher(vctx, Path(tmp), None, variant="bflat")
        scores, rows = s.search(qvecs, ctx.cfg["evaluate"]["depth"])
        _write(out, job.systems[0], s, queries, scores, rows, time.perf_counter() - t0, dataset=job.dataset,
               train_variant=v, n_candidates=s.n_candidates, depth=ctx.cfg["evaluate"]["depth"])
    return {"queries": len(queries), "variant": v}


def run_baselines(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Runs of the DPR baseline indexes (HNSW, LSH, PQ) with DPR's question encoder (one load)."""
    from harness.artifacts import write_run_with_meta

    dctx = Context(ctx.cfg, "dpr", job.dataset)
    queries = store.read_queries(inputs["data"], "test")
    k = ctx.cfg["evaluate"]["depth"]
    qvecs = dpr.BiEncoder.load(dctx, inputs["model"]).encode_questions([q.text for q in queries])
    specs = dpr_baselines(ctx.cfg)
    for system in job.systems:
        b = system.partition(".")[2]
        t0 = time.perf_counter()
        scores, rows = _DenseSystem(inputs[f"index_{b}"], specs[b]).search(qvecs, k)
        hits = hits_from_rows(read_docids(inputs[f"index_{b}"]), [q.id for q in queries], scores, rows)
        write_run_with_meta(out / f"{system}.trec", hits, system=system, meta={
            "dataset": job.dataset, "spec": specs[b], "depth": k, "seconds": round(time.perf_counter() - t0, 3)})
    return {"queries": len(queries)}


def measure_efficiency(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Index bytes and query time (protocol bpr-query-time) of every Table 1/2 system."""
    from harness.io import write_json

    res = efficiency(ctx.cfg, str(job.dataset), dpr_model=inputs["dpr_model"], bpr_model=inputs["bpr_model"],
                     dpr_index=inputs["dpr_index"], bpr_index=inputs["bpr_index"], hash_index=inputs["hash_index"],
                     baseline_indexes={b: inputs[f"index_{b}"] for b in dpr_baselines(ctx.cfg)})
    for system, doc in res.items():
        write_json(out / f"{system}.json", doc)
        v = doc["values"]
        print(f"{system}/{job.dataset}: index {v['index_bytes']['value']:,} B, query {v['query_ms']['value']:.3f} ms")
    return {}


def measure_scale(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table 1's index sizes and query times at the synthetic dataset's scale (:func:`scale_efficiency`)."""
    scale_efficiency(ctx, str(job.dataset), out)
    return {}
