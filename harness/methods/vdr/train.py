"""Training of E_θ (§4.2, §4.3) on the shared loop (:func:`harness.train.train_loop`): the step adds
the in-training negatives, BM25 ones until ``retrieval_start`` of the steps, then beta-search ones
from a binary token index loaded (or built) once before the first step and never rebuilt: T(D)
does not depend on θ."""
from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import train as loop
from harness.datasets import Doc, Query, store
from harness.errors import DataError
from harness.datasets.answers import ANSWER_RULES
from harness.methods import dpr
from harness.methods.base import Context
from harness.methods.vdr.index import build_token_index, load_token_index
from harness.methods.vdr.model import VDRModel, passage_text, svdr_loss
from harness.methods.vdr.settings import settings, train_signature
from harness.models.runtime import torch_for


class NegativeRetriever:
    """In-training negative retrieval (§4.3) over a binary token index built/loaded once."""

    def __init__(self, index, docids: Sequence[str], docs: Mapping[str, Doc], rule: str, top_m: int,
                 rng: random.Random) -> None:
        self.index, self.docids, self.docs, self.top_m, self.rng = index, docids, docs, int(top_m), rng
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
                     and not self.match(q.answers or [], self.docs[d].text)]
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


def _negative_retriever(ctx: Context, s: Mapping[str, Any], enc: VDRModel, docs: store.CorpusLookup,
                        token_index_dir: Path | None,
                        rng: random.Random) -> tuple[NegativeRetriever, dict[str, Any]]:
    """The in-training retriever over the training corpus's token index (loaded, or built in memory)."""
    t0 = time.perf_counter()
    if token_index_dir is not None:
        index, docids = load_token_index(token_index_dir)
        index_info: dict[str, Any] = {"token_index": str(token_index_dir), "loaded": True}
    else:
        docids = []   # the corpus streamed from its file, its ids kept
        index = build_token_index(enc.tok, store.iter_corpus(docs.folder, docids), s["p_max_len"], s["skip_vocab"])
        index_info = {"token_index": "built in memory", "loaded": False}
    index_info["seconds"] = time.perf_counter() - t0
    missing = [d for d in docids if d not in docs]
    if missing:
        raise DataError(f"token index {token_index_dir} holds passage {missing[0]!r}, absent from the "
                        f"corpus of {s['train_dataset']}", fix="rebuild the index of the training dataset")
    rule = ctx.cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    retriever = NegativeRetriever(index, docids, docs, rule, s["retrieval_top_m"], rng)
    return retriever, index_info


def _step(s: Mapping[str, Any], enc: VDRModel, docs: Mapping[str, Doc], retriever: NegativeRetriever | None,
          retrieval_step: int, chunk: int = 0):
    """The loop's step: the batch's questions, positives and one negative each (BM25, then beta search)."""
    n_hard = int(s["hard_negatives"])
    doc_ids = store.ids_of(docs)

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

        def loss_fn(eq, ep):
            return svdr_loss(s, eq, ep, enc.q.topk_mask(eq, qb["input_ids"]), enc.p.topk_mask(ep, pb["input_ids"]),
                             enc.q.binary(qb["input_ids"]), enc.p.binary(pb["input_ids"])), {}

        # grad_cache_chunk > 0: the paper's batch in sub-batches of that many texts (GradCache)
        return loop.sub_batch_step([(lambda b: enc.q.pooled(b, grad=True), qb), (lambda b: enc.p.pooled(b, grad=True), pb)],
                                   loss_fn, chunk)

    return step_fn


def train(ctx: Context, out: Path, negatives_file: Path | None, *, token_index_dir: Path | None = None,
          ablation: str | None = None) -> dict[str, Any]:
    """Train E_θ on the train split of ``train_dataset``; writes the model to ``out``. The loop is
    :func:`harness.train.train_loop`; the step adds the in-training beta-search negatives."""
    s = settings(ctx.mcfg, ablation, ctx.method)
    torch_for(s)
    seed = ctx.cfg["seed"]
    loop.set_seed(seed)
    rng = random.Random(seed)
    tctx = Context(ctx.cfg, ctx.method, s["train_dataset"])
    examples = loop.subsample(dpr.training_examples(tctx, negatives_file), s.get("max_train_questions"), seed)
    docs = store.corpus_lookup(tctx.data_dir())
    ts = loop.TrainSettings.from_config(s, log_every=20)
    enc = VDRModel.from_backbone(ctx.cfg, s)
    n_hard = int(s["hard_negatives"])
    total = loop.total_steps(len(examples), ts.batch_size, ts.epochs, ts.grad_accum)
    retrieval_step = total if n_hard == 0 or s["retrieval_start"] >= 1.0 else math.floor(s["retrieval_start"] * total)
    retriever = None
    index_info: dict[str, Any] = {}
    if retrieval_step < total:
        retriever, index_info = _negative_retriever(ctx, s, enc, docs, token_index_dir, rng)
    step_fn = _step(s, enc, docs, retriever, retrieval_step, ts.grad_cache_chunk)
    res = loop.train_loop(examples, step_fn, enc.parameters(),
                          settings=ts, seed=seed, out=out, save=enc.save, modules=[enc], rng=rng)
    info: dict[str, Any] = {
        "steps": res["steps"], "examples": len(examples), "train_dataset": s["train_dataset"], "ablation": ablation,
        "seconds": res["seconds"], "loss_first": res["loss_first"], "loss_last": res["loss_last"],
        "backbone": s["backbone"], "settings": train_signature(s), "retrieval_from_step": retrieval_step,
        "grad_cache_chunk": ts.grad_cache_chunk,
    }
    if retriever is not None:
        ms = [x * 1000 for x in retriever.search_seconds]
        info["in_training_retrieval"] = {
            **index_info, "batches": len(ms), "retrieved": retriever.retrieved, "padded_random": retriever.padded,
            "search_ms_per_batch_median": float(np.median(ms)) if ms else None, "top_m": s["retrieval_top_m"],
        }
    return info
