"""LightRetriever's training step on the shared loop (``harness.train.train_loop``): the full-size
baseline, light dense and light sparse trained jointly on single-set batches of the decontaminated
training questions, with KL and MRL where configured."""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Query, store
from harness.errors import DataError
from harness.methods.lightretriever.model import LightModel, contrastive, doc_text, flops, kl_align, mrl, ramp
from harness.methods.lightretriever.settings import NAME, instruction_for
from harness.models.runtime import torch_for


def training_groups(s: Mapping[str, Any], sets: Mapping[str, tuple[list[Query], Mapping[str, list[str]]]],
                    seed: int) -> list[tuple[str, list[tuple[Query, list[str]]]]]:
    """Batches of ``batch_size`` questions, each drawn from one training set (the authors' sampler),
    in a seeded order; every question once per pass."""
    rng = random.Random(seed)
    groups = []
    bs = int(s["batch_size"])
    for key, (queries, negs) in sets.items():
        ex = [(q, list(negs.get(q.id, []))) for q in queries]
        rng.shuffle(ex)
        groups += [(key, ex[i:i + bs]) for i in range(0, len(ex) - 1, bs) if len(ex[i:i + bs]) >= 2]
    rng.shuffle(groups)
    return groups


def kept_training_queries(decontam_dir: Path, key: str, data_dir: Path, queries: Sequence[Query],
                          cfg: Mapping[str, Any]) -> list[Query]:
    """``queries`` (the train split of ``key``, read from ``data_dir``) minus those the decontam stage dropped."""
    from harness.decontam import report as hdecontam

    train, _ = hdecontam.plan(cfg)
    did = cfg["datasets"][key]["id"]
    names = [q.name for q in train if cfg["datasets"][q.key]["id"] == did and q.split == "train"]
    path = Path(decontam_dir) / "train" / f"{names[0]}.jsonl"
    if not path.exists():
        raise DataError(f"{path} does not exist: the decontam stage wrote no training file for {names[0]}",
                        fix="re-run rule decontam")
    from harness.io import iter_jsonl

    kept = {str(r["id"]) for r in iter_jsonl(path)}
    out = []
    for q in queries:
        if q.id in kept:
            if not q.gold:
                raise DataError(f"{data_dir}/queries-train.jsonl: question {q.id} has no gold passage to train on")
            out.append(q)
    return out


def read_training_sets(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], seed: int):
    """Per training set: (kept and sampled questions, their mined negatives), its passages by id, and
    its question counts before and after decontamination and sampling."""
    from harness import train as loop
    from harness.io import iter_jsonl

    sets, docs, counts = {}, {}, {}
    for key in s["train_datasets"]:
        split = store.read_queries(inputs[f"data_{key}"], "train")
        qs = kept_training_queries(inputs["decontam"], key, inputs[f"data_{key}"], split, cfg)
        total = len(split)
        qs = loop.subsample(qs, s["max_train_questions"], seed)
        negs = {r["id"]: r["negatives"] for r in iter_jsonl(inputs[f"negatives_{key}"])}
        sets[key] = (qs, negs)
        docs[key] = store.corpus_lookup(inputs[f"data_{key}"])
        counts[key] = {"train_questions": total, "after_decontam_and_sample": len(qs)}
    return sets, docs, counts


class BatchLoss:
    """The shared loop's ``step_fn(batch, step, rng) -> (loss, parts)`` for one pre-formed single-set
    batch: the full-size baseline, light dense, light sparse (+ FLOPS), KL and MRL terms, summed in
    that order."""

    def __init__(self, model: LightModel, s: Mapping[str, Any], sets: Mapping[str, Any],
                 docs: Mapping[str, Mapping[str, Any]]) -> None:
        self.model, self.s, self.docs = model, s, docs
        self.tau, self.tau_s = float(s["temperature"]), float(s["sparse_temperature"])
        self.n_hard = int(s["hard_negatives"])
        self.n_per = 1 + self.n_hard
        self.prompts = {k: model.prompt_ids(instruction_for(s, k)) for k in sets}
        self.doc_prefix = model.prompt_ids(None)
        self.doc_lists = {k: store.ids_of(v) for k, v in docs.items()}

    def columns(self, key: str, group: Sequence[tuple[Query, list[str]]], rng) -> list[str]:
        """Passage ids: query i's positive at column i * n_per, then its hard negatives (topped up with
        random passages where fewer were mined)."""
        golds = {q.gold[0] for q, _ in group}
        cols = []
        for q, negs in group:
            pool = [d for d in negs if d not in golds][:self.n_hard]
            while len(pool) < self.n_hard:   # fewer mined negatives than asked: random passages
                r = rng.choice(self.doc_lists[key])
                if r not in golds and r not in pool:
                    pool.append(r)
            cols += [q.gold[0], *pool]
        return cols

    def __call__(self, batch, step: int, rng):
        key, group = batch[0]
        model, s = self.model, self.s
        cols = self.columns(key, group, rng)
        qs = [q for q, _ in group]
        drows = model.ids([doc_text(self.docs[key][p]) for p in cols], int(s["p_max_len"]))
        qrows = model.ids([q.text for q in qs], int(s["q_max_len"]))
        chunk = int(s.get("grad_cache_chunk") or 0)
        if not chunk or len(drows) <= chunk:  # one graph: the loop back-propagates the loss
            dh, dmask = model.forward(self.doc_prefix, drows)
            return self.loss(key, qrows, drows, model.eos_pool(dh, dmask), (dh, dmask), step)
        return self.cached(key, qrows, drows, step, chunk)

    def cached(self, key: str, qrows, drows, step: int, chunk: int):
        """A GradCache step (:func:`harness.train.grad_cache_step`) over every encoder pass with a graph:
        the passages in sub-batches of ``chunk``; the queries, the queries' light token vectors (and,
        where a variant reads them, the queries' full sparse side and the passages' light token vectors)
        in sub-batches of as many positions as a passage sub-batch holds. Without the queries' side the
        paper's step held 128 queries and their ~1,000 token sequences in one graph: over 20 GiB for
        Llama-3.2-1B on a CPU whatever the passages' sub-batches (the rehearsal, 2026-12-05). The token
        sequences are packed into ``chunk`` rows of a passage row's length (longer where a prompt needs
        it), not into :func:`~harness.methods.lightretriever.ops.token_vectors`' default rows of 1,024
        positions: attention grows with a row's length squared, and 1,060 tokens in rows of 1,024 ran out
        of 23.5 GiB on a CPU where the same tokens in 4 rows of 531 peaked at 17.8 GiB (Llama-3.2-1B,
        a passage sub-batch of 4: 17.7 GiB), so that ``light-both`` and ``qfull-dlight`` ran out of memory
        where the main model trained (the rehearsal, 2026-12-05)."""
        from harness.train import grad_cache_step

        model, s = self.model, self.s
        prompt = self.prompts[key]
        row = int(s["p_max_len"]) + len(self.doc_prefix) + 1   # a passage row's positions
        positions = chunk * row   # a passage sub-batch's
        per_query = max(1, positions // (max(len(r) for r in qrows) + len(prompt) + 1))
        full_sparse = s["sparse_doc"] == "full"

        def docs(rows):  # a sub-batch of passages: (pooled vector, sparse vector where the sparse side reads it)
            h, mask = model.forward(self.doc_prefix, rows)
            pooled = model.eos_pool(h, mask)
            return (pooled, model.sparse_vectors(h, mask, len(self.doc_prefix))) if full_sparse else pooled

        def queries(rows):
            return model.eos_pool(*model.forward(prompt, rows))

        def queries_sparse(rows):   # Table 4 'Qry Full': the queries through the document side's LM head
            return model.sparse_vectors(*model.forward(self.doc_prefix, rows), len(self.doc_prefix))

        passes = [("docs", drows, docs, chunk), ("queries", qrows, queries, per_query)]   # (name, items, encode, sub-batch)
        if s["sparse_query"] == "full":
            passes.append(("q_sparse", qrows, queries_sparse, per_query))
        q_tokens = sorted({t for r in qrows for t in r}) if s["dense_query"] == "light" else []
        d_tokens = sorted({t for r in drows for t in r}) if s["dense_doc"] == "light" else []
        for name, tokens, pre in (("q_table", q_tokens, prompt), ("d_table", d_tokens, self.doc_prefix)):
            if tokens:   # a token's sequence adds 2 positions to a packed row
                length = max(row, len(pre) + 2)
                encode = partial(model.token_vectors, pre, max_len=length, batch_size=chunk)
                passes.append((name, tokens, encode, chunk * ((length - len(pre)) // 2)))
        names, groups, encs, chunks = zip(*passes)

        def loss_fn(*reps):
            got = dict(zip(names, reps))
            d_full, d_sp = got["docs"] if full_sparse else (got["docs"], None)
            tables = {"q": (q_tokens, got.get("q_table")), "d": (d_tokens, got.get("d_table"))}
            return self.loss(key, qrows, drows, d_full, d_sp, step, q_full=got["queries"],
                             q_sparse=got.get("q_sparse"), tables=tables)

        return grad_cache_step(encs, groups, loss_fn, chunks)

    def loss(self, key: str, qrows, drows, d_full, d_sparse, step: int, *, q_full=None, q_sparse=None,
             tables=None):
        """(loss, parts) of one batch from its passages' pooled vectors ``d_full`` and ``d_sparse``:
        their sparse vectors, or (hidden states, mask) to take them from, or None where the sparse
        side does not read them; the queries are encoded here unless a GradCache step
        (:meth:`cached`) passes their pooled vectors ``q_full``, their full sparse vectors
        ``q_sparse`` and the light sides' token ``tables`` ({"q"|"d": (tokens, vectors)})."""
        model, s, tau, n_per = self.model, self.s, self.tau, self.n_per
        if q_full is None:
            q_full = model.eos_pool(*model.forward(self.prompts[key], qrows))
        parts: dict[str, float] = {}
        base = q_full @ d_full.T
        loss = contrastive(base / tau, n_per)
        parts["base"] = float(loss.detach())
        q_light, d_dense = self.light_dense(key, qrows, drows, q_full, d_full, tables or {})
        light = q_light @ d_dense.T
        l_dense = contrastive(light / tau, n_per)
        parts["dense"] = float(l_dense.detach())
        loss = loss + l_dense
        sparse, l_sparse = self.light_sparse(qrows, drows, d_sparse, step, parts, q_sparse)
        parts["sparse"] = float(l_sparse.detach())
        loss = loss + l_sparse
        if s["kl"]:
            l_kl = kl_align(light / tau, base / tau) + kl_align(sparse / self.tau_s, base / tau)
            parts["kl"] = float(l_kl.detach())
            loss = loss + l_kl
        for dim in s["mrl_dims"] or []:
            if dim >= model.hidden:
                continue
            a, b = mrl(q_full, d_full, dim)
            c, e = mrl(q_light, d_dense, dim)
            loss = loss + contrastive(a @ b.T / tau, n_per) + contrastive(c @ e.T / tau, n_per)
        return loss, parts

    def light_dense(self, key: str, qrows, drows, q_full, d_full, tables: Mapping[str, Any]):
        """(query, document) vectors of the light dense side: the query's cached-token mean (or the
        full-size query / the input embeddings, Table 4), the full-size or light document; ``tables``:
        the token vectors a GradCache step encoded ({"q"|"d": (tokens, vectors)}), else encoded here."""
        model, s = self.model, self.s
        if s["dense_query"] == "full":
            q_light = q_full
        else:
            q_light = model.light_mean(self.prompts[key], qrows, embedding=s["dense_query"] == "embedding",
                                       table=tables.get("q"))
        d_dense = model.light_mean(self.doc_prefix, drows, table=tables.get("d")) if s["dense_doc"] == "light" else d_full
        return q_light, d_dense

    def light_sparse(self, qrows, drows, d_sparse, step: int, parts: dict[str, float], q_sparse=None):
        """(scores, loss) of the light sparse side, the FLOPS term (recorded in ``parts``) included;
        ``d_sparse``: the passages' sparse vectors, or (hidden states, mask) to take them from;
        ``q_sparse``: the queries' full sparse vectors where a GradCache step encoded them."""
        model, s = self.model, self.s
        if s["sparse_query"] == "full":
            q_sp = q_sparse if q_sparse is not None else \
                model.sparse_vectors(*model.forward(self.doc_prefix, qrows), len(self.doc_prefix))
        else:
            q_sp = model.counts(qrows, binary=s["sparse_query"] == "binary")
        if s["sparse_doc"] == "full":
            d_sp = model.sparse_vectors(*d_sparse, len(self.doc_prefix)) if isinstance(d_sparse, tuple) else d_sparse
        else:
            d_sp = model.counts(drows)
        sparse = q_sp @ d_sp.T
        l_sparse = contrastive(sparse / self.tau_s, self.n_per)
        reg_on = d_sp if s["sparse_doc"] == "full" else (q_sp if s["sparse_query"] == "full" else None)
        if reg_on is not None and s["flops_weight"]:
            reg = float(s["flops_weight"]) * ramp(step, int(s["flops_ramp_steps"])) * flops(reg_on)
            l_sparse = l_sparse + reg
            parts["flops"] = float(reg.detach())
        return sparse, l_sparse


def train(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Train one model (main or variant) on its training sets and save it in ``out``."""
    from dataclasses import replace

    from harness import train as loop

    torch_for(s)   # thread count
    seed = int(cfg["seed"])
    loop.set_seed(seed)
    sets, docs, counts = read_training_sets(cfg, s, inputs, seed)
    groups = training_groups(s, sets, seed)
    if not groups:
        raise DataError(f"methods.{NAME}: no training batch: the training sets have fewer than 2 questions")
    ts = loop.TrainSettings.from_config(s)   # before the model: a setting it refuses fails here
    model = LightModel.from_backbone(cfg, s)
    ts = replace(ts, batch_size=1, min_batch=1)   # one example = one pre-formed single-set batch
    step_fn = BatchLoss(model, s, sets, docs)
    params = [p for p in model.lm.parameters() if p.requires_grad]
    info = loop.train_loop(groups, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=[model.lm])
    if not all(np.isfinite(info["losses"])):
        raise DataError(f"methods.{NAME}: the training loss became non-finite", fix="lower lr")
    return {"steps": info["steps"], "batches": len(groups), "seconds": info["seconds"],
            "loss_first": info["loss_first"], "loss_last": info["loss_last"], "training_sets": counts,
            "backbone": s["backbone"], "trainable_parameters": int(sum(p.numel() for p in params)),
            "lora": s.get("lora"), "grad_cache_chunk": int(s.get("grad_cache_chunk") or 0),
            **{k: info[k] for k in info if k.endswith(("_first", "_last"))}}
