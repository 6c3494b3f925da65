"""QCR's training (§3.2-3.3, App. A.1): training pairs (supervised, random crops or generated
queries), the schedule's batches, and the training step on :func:`harness.train.train_loop`."""
from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from harness import train as loop
from harness.datasets import Doc, store
from harness.errors import ConfigError, DataError
from harness.methods.qcr.codebook import usage as usage_stats
from harness.methods.qcr.model import QCRModel, code_ids, qcr_loss
from harness.methods.qcr.settings import FSQ_VERSION, check_model, codebook_size, codes_k, train_signature
from harness.models.runtime import torch_for


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
                     tokenizer=None, device: str = "cpu", batch_size: int = 16) -> list[str]:
    """App. A.1: one query per passage from a causal LM with the paper's prompt (greedy decoding), in
    left-padded batches of ``batch_size`` prompts on ``device`` (bf16 on cuda). ``model``/``tokenizer``
    may be given (the tests pass a randomly initialised tiny LM). On the rehearsal's H200 the generator
    had been left on the CPU, one passage at a time: 64 passages of Gemma-2-2b ran past 90 s."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = tokenizer or AutoTokenizer.from_pretrained(model_name)
    lm = model or AutoModelForCausalLM.from_pretrained(model_name)
    lm = lm.to(device, dtype=torch.bfloat16) if device == "cuda" else lm.to(device)
    lm.eval()
    side, pad_token = tok.padding_side, tok.pad_token
    if pad_token is None and tok.eos_token is None:  # checked before the tokenizer is touched
        raise ConfigError(f"query generator {model_name}: its tokenizer has neither a padding nor an EOS token",
                          fix="give methods.qcr.generator.model a tokenizer with one of them")
    tok.padding_side = "left"  # generation continues each prompt at its end
    if pad_token is None:  # a decoder's tokenizer often has none (Llama): pad with EOS, masked out of attention
        tok.pad_token = tok.eos_token
    out = []
    try:
        with torch.inference_mode():
            for i in range(0, len(docs), max(1, int(batch_size))):
                prompts = [GENERATOR_PROMPT.format(document=f"{d.title}. {d.text}" if d.title else d.text)
                           for d in docs[i:i + batch_size]]
                ids = tok(prompts, return_tensors="pt", return_token_type_ids=False, padding=True)
                gen = lm.generate(**ids.to(device), max_new_tokens=max_new_tokens, do_sample=False,
                                  pad_token_id=tok.pad_token_id)
                out += [t.strip() for t in tok.batch_decode(gen[:, ids["input_ids"].shape[1]:], skip_special_tokens=True)]
    finally:
        tok.padding_side, tok.pad_token = side, pad_token
    return out


def training_pairs(cfg: Mapping[str, Any], s: Mapping[str, Any], data_dir: Path, rng: random.Random
                   ) -> tuple[list[tuple[str, str]], Mapping[str, Doc], dict[str, Any]]:
    """(query, positive doc id) pairs of ``training_data``, the corpus, and counts for meta.json."""
    docs = store.corpus_lookup(data_dir)
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
        chosen = list(islice(docs.values(), g["max_passages"] or None))
        lm = tok = None
        if g["model"] in cfg["backbones"]:  # a backbone key: its source (a config: one in the rehearsal)
            from harness.models import backbones

            lm, tok = backbones.load_lm(cfg, g["model"]), backbones.load_tokenizer(cfg, g["model"])
        device = loop.resolve_device(train_settings(s).device)
        t0 = time.perf_counter()
        pairs = list(zip(generate_queries(g["model"], chosen, max_new_tokens=g["max_new_tokens"], model=lm,
                                          tokenizer=tok, device=device), [d.id for d in chosen]))
        # its seconds per passage (harness.estimate prices the profile's passages by them, not once)
        info["generator"] = {"passages": len(chosen), "seconds": round(time.perf_counter() - t0, 3),
                             "max_new_tokens": int(g["max_new_tokens"]), "device": device}
    pairs = loop.subsample(pairs, s["max_train_questions"], cfg["seed"])
    info["pairs"] = len(pairs)
    return pairs, docs, info


class BatchSchedule:
    """Batches of the schedule: step -> (stage's batch size, K); pairs drawn from a seeded shuffle,
    epoch after epoch, never two pairs with the same document in one batch (the other would be a
    false in-batch negative: it waits for the next batch)."""

    def __init__(self, pairs: Sequence[tuple[str, str]], schedule: Sequence[Mapping[str, int]], rng: random.Random):
        self.pairs, self.schedule, self.rng = list(pairs), list(schedule), rng
        self.distinct = len({d for _, d in self.pairs})  # the largest batch without a passage twice
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
        size = min(int(st["batch_size"]), self.distinct)
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


def train_settings(s: Mapping[str, Any]) -> loop.TrainSettings:
    """The training loop's settings of QCR settings ``s``: its GradCache sub-batch is ``chunk_size``
    (a cost probe, ``probe_sub_batches``, runs some of them)."""
    # the chunk as a default (not a copy of ``s``: a job reads only the settings it uses, harness.settings)
    return loop.TrainSettings.from_config(s, log_every=10, grad_cache_chunk=int(s["chunk_size"]))


def train(cfg: Mapping[str, Any], s: Mapping[str, Any], data_dir: Path, out: Path) -> dict[str, Any]:
    """Train a QCR model with settings ``s``; writes the model to ``out``. The loop is
    :func:`harness.train.train_loop` (one "example" per optimizer step; the step function draws the
    step's batch from :class:`BatchSchedule` and runs :func:`grad_cache_step`)."""
    torch = torch_for(s)
    check_model(s)
    seed = cfg["seed"]
    loop.set_seed(seed)
    rng = random.Random(seed)
    pairs, docs, info = training_pairs(cfg, s, data_dir, rng)
    sched = BatchSchedule(pairs, s["schedule"], rng)  # draws nothing from rng until its first batch
    if sched.distinct < 2:
        raise DataError(f"{data_dir}: QCR needs pairs with at least two distinct passages, got {len(pairs)} pairs")
    model = QCRModel.from_backbone(cfg, s)
    capped = sorted({int(st["batch_size"]) for st in s["schedule"] if int(st["batch_size"]) > sched.distinct})
    if capped:  # a batch never holds one passage twice: a small corpus caps the schedule's batches
        from harness.progress import console

        info["batch_capped_at"] = sched.distinct
        console(f"warning: qcr: batch sizes {', '.join(map(str, capped))} of the schedule run as {sched.distinct}, "
                f"the distinct passages of the {len(pairs)} training pairs")
    ts = train_settings(s)
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

        return loop.grad_cache_step(encode, [qs, ds], loss_fn, int(s["chunk_size"]))

    res = loop.train_loop(list(range(sched.total)), step_fn, model.parameters(), settings=ts, seed=seed, out=out,
                          save=model.save, modules=[model.encoder, model.proj, model.fsq])
    seen = np.repeat(np.arange(len(usage)), usage)
    u = usage_stats(seen, len(usage)) if len(seen) else {}
    return {"steps": res["steps"], "seconds": res["seconds"], "loss_first": res["loss_first"],
            "loss_last": res["loss_last"], "contrastive_last": res.get("contrastive_last", []),
            "entropy_last": res.get("entropy_last", []), "codebook_size": len(usage), "K": codes_k(s),
            "training_usage": {k_: v for k_, v in u.items() if k_ != "counts"}, "settings": train_signature(s),
            "grad_cache_chunk": ts.grad_cache_chunk,   # its chunk_size (a runtime setting: no hash covers it)
            "fsq": FSQ_VERSION, **info}
