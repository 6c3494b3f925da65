"""DPR (Karpukhin et al., 2020): a bi-encoder trained with in-batch negatives plus one BM25
hard negative per question, [CLS] pooling, inner product, exact faiss ``Flat`` search.

Passages are encoded as the pair (title, text), as DPR does. Max lengths, batch size, epochs,
learning rate and the backbone come from config key ``methods.dpr``; training is seeded.
"""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Query, store
from harness.errors import DataError
from harness.io import iter_jsonl
from harness.methods.base import Context

ENCODERS = ("question_encoder", "passage_encoder")


def _torch(ctx: Context):
    import torch

    torch.set_num_threads(ctx.mcfg.get("torch_threads", 2))
    return torch


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def prepare_question(ctx: Context, text: str) -> str:
    text = text.strip()
    if ctx.mcfg.get("strip_question_mark", False) and text.endswith("?"):
        text = text[:-1]
    return text


def pool(ctx: Context, out, mask):
    hidden = out.last_hidden_state
    if ctx.mcfg.get("pooling", "cls") == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1)
    return hidden[:, 0]


class BiEncoder:
    """Question and passage encoders (separate weights unless ``shared_encoder``)."""

    def __init__(self, ctx: Context, q_model, p_model, tokenizer) -> None:
        self.ctx, self.q, self.p, self.tok = ctx, q_model, p_model, tokenizer

    @classmethod
    def from_backbone(cls, ctx: Context) -> BiEncoder:
        from harness.models.backbones import load_encoder, load_tokenizer

        _quiet_transformers()
        q = load_encoder(ctx.cfg, ctx.mcfg["backbone"])
        p = q if ctx.mcfg.get("shared_encoder", False) else load_encoder(ctx.cfg, ctx.mcfg["backbone"])
        return cls(ctx, q, p, load_tokenizer(ctx.cfg, ctx.mcfg["backbone"]))

    @classmethod
    def load(cls, ctx: Context, folder: Path) -> BiEncoder:
        from transformers import AutoModel, AutoTokenizer

        _quiet_transformers()
        q = AutoModel.from_pretrained(folder / ENCODERS[0])
        p = q if ctx.mcfg.get("shared_encoder", False) else AutoModel.from_pretrained(folder / ENCODERS[1])
        return cls(ctx, q, p, AutoTokenizer.from_pretrained(folder / ENCODERS[0]))

    def save(self, folder: Path) -> None:
        for name, model in zip(ENCODERS, (self.q, self.p)):
            model.save_pretrained(folder / name)
            self.tok.save_pretrained(folder / name)

    def _batch_q(self, texts: Sequence[str]):
        return self.tok([prepare_question(self.ctx, t) for t in texts], padding=True, truncation=True,
                        max_length=self.ctx.mcfg.get("q_max_len", 32), return_tensors="pt")

    def _batch_p(self, titles: Sequence[str], texts: Sequence[str]):
        return self.tok(list(titles), list(texts), padding=True, truncation="only_second",
                        max_length=self.ctx.mcfg.get("p_max_len", 256), return_tensors="pt")

    def embed_q(self, batch):
        return pool(self.ctx, self.q(**batch), batch["attention_mask"])

    def embed_p(self, batch):
        return pool(self.ctx, self.p(**batch), batch["attention_mask"])

    def encode_questions(self, texts: Sequence[str]) -> np.ndarray:
        torch = _torch(self.ctx)
        bs = self.ctx.mcfg.get("encode_batch_size", 64)
        self.q.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), bs):
                out.append(self.embed_q(self._batch_q(texts[i:i + bs])).float().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.q.config.hidden_size), np.float32)

    def encode_passages(self, titles: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        torch = _torch(self.ctx)
        bs = self.ctx.mcfg.get("encode_batch_size", 64)
        self.p.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), bs):
                out.append(self.embed_p(self._batch_p(titles[i:i + bs], texts[i:i + bs])).float().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.p.config.hidden_size), np.float32)


def _training_examples(ctx: Context, negatives_file: Path) -> list[tuple[Query, list[str]]]:
    queries = store.read_queries(ctx.data_dir(), "train")
    negs = {r["id"]: r["negatives"] for r in iter_jsonl(negatives_file)}
    examples = []
    for q in queries:
        if not q.gold:
            raise DataError(f"{ctx.data_dir()}/queries-train.jsonl: question {q.id} has no gold passage for DPR training")
        examples.append((q, negs.get(q.id, [])))
    return examples


def train(ctx: Context, out: Path, negatives_file: Path) -> dict[str, Any]:
    """Train on the train split of ``methods.dpr.train_dataset``; writes the encoders to ``out``."""
    torch = _torch(ctx)
    m = ctx.mcfg
    seed = ctx.cfg["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tctx = Context(ctx.cfg, ctx.method, m["train_dataset"])
    examples = _training_examples(tctx, negatives_file)
    docs = {d.id: d for d in store.iter_corpus(tctx.data_dir())}
    model = BiEncoder.from_backbone(ctx)
    params = list({id(p): p for p in list(model.q.parameters()) + list(model.p.parameters())}.values())
    opt = torch.optim.AdamW(params, lr=m.get("lr", 2e-5), weight_decay=m.get("weight_decay", 0.0))
    bs, n_hard = m.get("batch_size", 16), m.get("hard_negatives", 1)
    steps_per_epoch = math.ceil(len(examples) / bs)
    total = max(1, int(round(steps_per_epoch * m.get("epochs", 1))))
    warm = int(total * m.get("warmup_ratio", 0.1))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm)))
    rng = random.Random(seed)
    losses, step, t0 = [], 0, time.perf_counter()
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
            for q, negs in batch:  # DPR: one BM25 negative per question (random passage if none)
                pool_ = [d for d in negs if d not in pids] or [rng.choice(list(docs))]
                pids += pool_[:n_hard]
            qb = model._batch_q([q.text for q, _ in batch])
            pb = model._batch_p([docs[p].title for p in pids], [docs[p].text for p in pids])
            scores = model.embed_q(qb) @ model.embed_p(pb).T
            loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(batch)))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(loss.item())
            step += 1
            if step % 50 == 0 or step == total:
                recent = losses[-50:]
                print(f"step {step}/{total} loss {sum(recent) / len(recent):.4f} "
                      f"{time.perf_counter() - t0:.0f}s", flush=True)
    model.save(out)
    return {"steps": step, "examples": len(examples), "train_dataset": m["train_dataset"],
            "seconds": time.perf_counter() - t0, "loss_first": losses[:5], "loss_last": losses[-5:],
            "backbone": m["backbone"]}


def build_index(ctx: Context, out: Path, model_dir: Path) -> dict[str, Any]:
    from harness.indexes import parse_spec
    from harness.indexes.faiss_dense import DenseFaissIndex

    spec = ctx.mcfg.get("index", "faiss:Flat")
    _, factory = parse_spec(spec)
    model = BiEncoder.load(ctx, model_dir)
    docs = list(store.iter_corpus(ctx.data_dir()))
    t0 = time.perf_counter()
    vecs = model.encode_passages([d.title for d in docs], [d.text for d in docs])
    t_enc = time.perf_counter() - t0
    index = DenseFaissIndex.build(factory, vecs)
    build_seconds = time.perf_counter() - t0
    index.save(out)
    (out / "docids.txt").write_text("".join(d.id + "\n" for d in docs), encoding="utf-8")
    return {"spec": spec, "documents": len(docs), "dim": int(vecs.shape[1]), "encode_seconds": t_enc,
            "build_seconds": build_seconds}


class Searcher:
    """Loaded model + index, so timing can call ``encode`` (E(q)) and ``search`` (f(q, D)) apart."""

    def __init__(self, ctx: Context, index_dir: Path, model_dir: Path) -> None:
        from harness.indexes import parse_spec
        from harness.indexes.faiss_dense import DenseFaissIndex

        spec = ctx.mcfg.get("index", "faiss:Flat")
        self.model = BiEncoder.load(ctx, model_dir)
        self.index = DenseFaissIndex.load(index_dir, parse_spec(spec)[1])
        self.docids = (index_dir / "docids.txt").read_text(encoding="utf-8").split()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode_questions(list(texts))

    def search(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(qvecs, k)

    def results(self, qids: Sequence[str], scores: np.ndarray, rows: np.ndarray) -> dict[str, list[tuple[str, float]]]:
        return {q: [(self.docids[r], float(s)) for s, r in zip(srow, rrow) if r >= 0]
                for q, srow, rrow in zip(qids, scores, rows)}


def search(ctx: Context, index_dir: Path, queries: Sequence[Query], k: int, model_dir: Path) -> dict[str, list[tuple[str, float]]]:
    s = Searcher(ctx, index_dir, model_dir)
    scores, rows = s.search(s.encode([q.text for q in queries]), k)
    return s.results([q.id for q in queries], scores, rows)


def describe(model_dir: Path) -> dict[str, Any]:
    return json.loads((model_dir / "meta.json").read_text())
