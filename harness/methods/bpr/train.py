"""BPR's training step on the shared loop (:func:`harness.train.train_loop`): DPR's encoders and
training examples, one BM25 hard negative per question, the loss of :func:`.model.bpr_loss`."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from harness.datasets import Query, store
from harness.methods import dpr
from harness.methods.base import Context
from harness.methods.bpr.model import bpr_loss
from harness.methods.bpr.settings import DEFAULTS, _check, train_signature
from harness.models.runtime import torch_for
from harness.recording import merged


def train(ctx: Context, out: Path, negatives_file: Path) -> dict[str, Any]:
    """Train BPR (``ctx.mcfg`` = the effective methods.bpr settings); writes the encoders to ``out``.
    The loop is :func:`harness.train.train_loop`."""
    from harness import train as loop

    torch_for(ctx.mcfg)
    m = merged(DEFAULTS, ctx.mcfg)
    _check(m)
    seed = ctx.cfg["seed"]
    loop.set_seed(seed)
    tctx = Context(ctx.cfg, ctx.method, m["train_dataset"])
    examples = loop.subsample(dpr.training_examples(tctx, negatives_file), m["max_train_questions"], seed)
    docs = store.corpus_lookup(tctx.data_dir())
    ts = loop.TrainSettings.from_config(m)
    model = dpr.BiEncoder.from_backbone(ctx)
    params = list({id(p): p for p in list(model.q.parameters()) + list(model.p.parameters())}.values())
    device = loop.resolve_device(ts.device)
    n_hard = m.get("hard_negatives", 1)
    doc_ids = store.ids_of(docs)

    def step_fn(batch: list[tuple[Query, list[str]]], step: int, rng: random.Random):
        pids = [q.gold[0] for q, _ in batch]
        for q, negs in batch:  # one BM25 negative per question (a random passage if none), as DPR
            pool_ = [d for d in negs if d not in pids] or [rng.choice(doc_ids)]
            pids += pool_[:n_hard]
        qb = model._batch_q([q.text for q, _ in batch]).to(device)
        passages = [docs[p] for p in pids]   # each read once (the corpus is read by id)
        pb = model._batch_p([d.title for d in passages], [d.text for d in passages]).to(device)

        def loss_fn(eq, ep):
            return bpr_loss(eq, ep, step, gamma=m["gamma"], cand_loss=m["cand_loss"], margin=m["margin"],
                            reduction=m["cand_reduction"])

        # grad_cache_chunk > 0: the paper's batch in sub-batches of that many texts (GradCache)
        return loop.sub_batch_step([(model.embed_q, qb), (model.embed_p, pb)], loss_fn, ts.grad_cache_chunk)

    info = loop.train_loop(examples, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=[model.q, model.p])
    return {"steps": info["steps"], "examples": len(examples), "train_dataset": m["train_dataset"],
            "seconds": info["seconds"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
            "cand_first": info.get("cand_first", []), "cand_last": info.get("cand_last", []),
            "rerank_first": info.get("rerank_first", []), "rerank_last": info.get("rerank_last", []),
            "beta_last": info["beta_last"][-1] if info.get("beta_last") else 1.0, "backbone": m["backbone"],
            "settings": train_signature(m), "grad_cache_chunk": ts.grad_cache_chunk}
