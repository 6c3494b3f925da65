"""An extractive reader in the style of DPR's, as BPR uses it (Appendix A.4), so that the EM columns
of BPR's Tables 1 and 3 are measured.

Model: a BERT-family encoder (``methods.reader.backbone``) reading ``[CLS] question [SEP] title
[SEP] passage [SEP]`` for each of the top-k passages of a question; the passage-selection score
is ``w_score · P_i^[CLS]`` (softmax over the k passages, Eq. 8), start/end scores are
``P_i w_start`` / ``P_i w_end`` (softmax over tokens, Eqs. 9-10). The answer is the best span
(start <= end, at most ``max_answer_len`` tokens, inside the passage text) of the passage with
the highest selection score; a span scores ``P_start(s) · P_end(t)``.

Training (A.4): for each training question, one positive passage (a retrieved passage in which an
answer string occurs; the gold passage when none of the retrieved ones has it) and
``negative_passages`` retrieved passages without an answer (random passages when too few);
loss = the selection cross-entropy + the start and end cross-entropies of the answer's first
occurrence in the positive passage. The retrieved passages come from a run of
``methods.reader.retriever`` over the training questions (rule ``reader_train_run``).

EM (``harness.evaluate.qa.exact_match``) is measured per retrieval system on its TREC run of the
test questions (``methods.reader.systems``; optionally a seeded sample of
``max_test_questions``) and written as a metrics part ``{"values": {"em": ...}}``.

Commands: ``python -m harness.methods.reader {train,em} ...``.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Doc, Query, store
from harness.errors import ConfigError, DataError, HarnessError
from harness.evaluate import qa
from harness.methods.base import Context

HEADS_FILE = "heads.pt"
ENCODER_DIR = "encoder"
DEFAULTS: dict[str, Any] = {
    "epochs": 1, "batch_size": 4, "lr": 3.0e-5, "weight_decay": 0.0, "warmup_ratio": 0.06, "q_max_len": 64,
    "p_max_len": 256, "negative_passages": 7, "max_train_questions": None, "top_k": 20, "max_test_questions": None,
    "max_answer_len": 10, "encode_batch_size": 32, "torch_threads": 2, "systems": [],
}


def settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    if "reader" not in cfg["methods"]:
        raise ConfigError("config has no methods.reader section (the extractive reader for EM)")
    return {**DEFAULTS, **cfg["methods"]["reader"]}


def reader_systems(cfg: Mapping[str, Any]) -> list[str]:
    """Systems whose runs the reader reads (their metrics get ``em``); [] when the reader is off."""
    if "reader" not in cfg["methods"] or not cfg["methods"]["reader"].get("enabled", True):
        return []
    return list(settings(cfg)["systems"])


def _torch(ctx: Context):
    import torch

    torch.set_num_threads(settings(ctx.cfg)["torch_threads"])
    return torch


def find_answer(text: str, answers: Sequence[str]) -> tuple[int, int] | None:
    """Character span [start, end) of the earliest case-insensitive occurrence of an answer in
    ``text`` that starts and ends on word boundaries (None if no answer occurs)."""
    best = None
    low = text.lower()
    for ans in answers:
        a = ans.strip().lower()
        if not a:
            continue
        for m in re.finditer(re.escape(a), low):
            s, e = m.span()
            if (s == 0 or not low[s - 1].isalnum()) and (e == len(low) or not low[e].isalnum()):
                if best is None or s < best[0]:
                    best = (s, e)
                break
    return best


class Reader:
    """Encoder + selection and span heads, with the tokenizer."""

    def __init__(self, ctx: Context, encoder, tokenizer, heads=None) -> None:
        torch = _torch(ctx)
        self.ctx, self.enc, self.tok = ctx, encoder, tokenizer
        d = encoder.config.hidden_size
        self.heads = heads if heads is not None else torch.nn.ModuleDict(
            {"score": torch.nn.Linear(d, 1), "span": torch.nn.Linear(d, 2)})
        s = settings(ctx.cfg)
        self.q_max_len, self.max_len, self.max_answer_len = s["q_max_len"], s["p_max_len"], s["max_answer_len"]

    @classmethod
    def from_backbone(cls, ctx: Context) -> Reader:
        from harness.methods.dpr import _quiet_transformers
        from harness.models.backbones import load_encoder, load_tokenizer

        _quiet_transformers()
        name = settings(ctx.cfg)["backbone"]
        return cls(ctx, load_encoder(ctx.cfg, name), load_tokenizer(ctx.cfg, name))

    @classmethod
    def load(cls, ctx: Context, folder: Path) -> Reader:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from harness.methods.dpr import _quiet_transformers

        _quiet_transformers()
        enc = AutoModel.from_pretrained(Path(folder) / ENCODER_DIR)
        r = cls(ctx, enc, AutoTokenizer.from_pretrained(Path(folder) / ENCODER_DIR))
        r.heads.load_state_dict(torch.load(Path(folder) / HEADS_FILE, map_location="cpu"))
        return r

    def save(self, folder: Path) -> None:
        import torch

        self.enc.save_pretrained(Path(folder) / ENCODER_DIR)
        self.tok.save_pretrained(Path(folder) / ENCODER_DIR)
        torch.save(self.heads.state_dict(), Path(folder) / HEADS_FILE)

    def parameters(self) -> list:
        return list(self.enc.parameters()) + list(self.heads.parameters())

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def train(self, mode: bool = True) -> None:
        self.enc.train(mode)
        self.heads.train(mode)

    def _prefix(self, doc: Doc) -> str:
        return f"{doc.title} {self.tok.sep_token} " if doc.title else ""

    def batch(self, questions: Sequence[str], docs: Sequence[Doc]):
        """Tokenised (question_i, title [SEP] text_i) pairs, with offsets and the passage-text mask."""
        torch = _torch(self.ctx)
        qs = {q: self.tok.convert_tokens_to_string(self.tok.tokenize(q)[: self.q_max_len]) for q in set(questions)}
        seconds = [self._prefix(d) + d.text for d in docs]
        enc = self.tok([qs[q] for q in questions], seconds, padding=True, truncation="only_second",
                       max_length=self.max_len, return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")
        text_mask = torch.zeros_like(enc["input_ids"], dtype=torch.bool)
        for i, d in enumerate(docs):
            start = len(self._prefix(d))
            for t, sid in enumerate(enc.sequence_ids(i)):
                if sid == 1 and offsets[i, t, 0] >= start and offsets[i, t, 1] > offsets[i, t, 0]:
                    text_mask[i, t] = True
        return enc, offsets, text_mask, [len(self._prefix(d)) for d in docs]

    def forward(self, enc):
        hidden = self.enc(**enc).last_hidden_state
        score = self.heads["score"](hidden[:, 0]).squeeze(-1)
        start, end = self.heads["span"](hidden).unbind(-1)
        return score, start, end

    def predict(self, question: str, docs: Sequence[Doc]) -> dict[str, Any]:
        """The answer string read from ``docs`` (the question's top-k passages)."""
        torch = _torch(self.ctx)
        if not docs:
            return {"answer": "", "passage": None, "score": float("-inf")}
        with torch.inference_mode():
            enc, offsets, mask, starts = self.batch([question] * len(docs), docs)
            score, start, end = self.forward(enc)
        best = int(score.argmax())
        neg = torch.finfo(start.dtype).min
        s_log = torch.log_softmax(start[best].masked_fill(~mask[best], neg), -1)
        e_log = torch.log_softmax(end[best].masked_fill(~mask[best], neg), -1)
        n = s_log.shape[0]
        span = s_log[:, None] + e_log[None, :]
        band = torch.triu(torch.ones(n, n, dtype=torch.bool)) & ~torch.triu(torch.ones(n, n, dtype=torch.bool), self.max_answer_len)
        valid = band & mask[best][:, None] & mask[best][None, :]
        if not bool(valid.any()):
            return {"answer": "", "passage": docs[best].id, "score": float(score[best])}
        span = span.masked_fill(~valid, float("-inf"))
        flat = int(span.argmax())
        s, e = divmod(flat, n)
        second = self._prefix(docs[best]) + docs[best].text
        answer = second[int(offsets[best, s, 0]):int(offsets[best, e, 1])]
        return {"answer": answer, "passage": docs[best].id, "score": float(score[best])}


def _span_tokens(offsets, mask, char_span: tuple[int, int], shift: int) -> tuple[int, int] | None:
    """Token positions (start, end) covering ``char_span`` of the passage text (None if truncated away)."""
    s_char, e_char = char_span[0] + shift, char_span[1] + shift
    start = end = None
    for t in range(offsets.shape[0]):
        if not mask[t]:
            continue
        a, b = int(offsets[t, 0]), int(offsets[t, 1])
        if start is None and b > s_char:
            start = t
        if a < e_char:
            end = t
    if start is None or end is None or end < start:
        return None
    return start, end


def training_instances(ctx: Context, run_path: Path) -> tuple[list[tuple[Query, str, list[str]]], dict[str, Any]]:
    """(question, positive passage id, negative ids) per usable training question, and counts."""
    from harness.runs import read_run

    s = settings(ctx.cfg)
    seed = ctx.cfg["seed"]
    folder = ctx.data_dir(s["train_dataset"])
    rule = ctx.cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    queries = [q for q in store.read_queries(folder, "train") if q.answers]
    if s["max_train_questions"] and s["max_train_questions"] < len(queries):
        keep = sorted(random.Random(seed).sample(range(len(queries)), s["max_train_questions"]))
        queries = [queries[i] for i in keep]
    docs = {d.id: d for d in store.iter_corpus(folder)}
    run = read_run(run_path)
    rng = random.Random(seed)
    ids = list(docs)
    out, stats = [], {"questions": len(queries), "positive_retrieved": 0, "positive_gold": 0, "skipped": 0,
                      "padded_negatives": 0}
    for q in queries:
        retrieved = [d for d, _ in run.get(q.id, []) if d in docs]
        pos = next((d for d in retrieved if find_answer(docs[d].text, q.answers)), None)
        if pos is not None:
            stats["positive_retrieved"] += 1
        else:
            pos = next((g for g in (q.gold or []) if g in docs and find_answer(docs[g].text, q.answers)), None)
            if pos is None:
                stats["skipped"] += 1
                continue
            stats["positive_gold"] += 1
        negs = [d for d in retrieved if d != pos and not qa.has_answer(q.answers, docs[d].text, rule)]
        negs = negs[: s["negative_passages"]]
        tries = 0
        while len(negs) < s["negative_passages"] and tries < 50 * s["negative_passages"]:
            d = rng.choice(ids)
            tries += 1
            if d != pos and d not in negs and not qa.has_answer(q.answers, docs[d].text, rule):
                negs.append(d)
                stats["padded_negatives"] += 1
        out.append((q, pos, negs))
    return out, stats


def train(ctx: Context, out: Path, run_path: Path) -> dict[str, Any]:
    """Train the reader on the retriever's run over the training questions; writes it to ``out``."""
    torch = _torch(ctx)
    s = settings(ctx.cfg)
    seed = ctx.cfg["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    instances, stats = training_instances(ctx, run_path)
    if not instances:
        raise DataError(f"{run_path}: no training question has an answer-bearing passage; the reader cannot train")
    docs = {d.id: d for d in store.iter_corpus(ctx.data_dir(s["train_dataset"]))}
    model = Reader.from_backbone(ctx)
    params = model.parameters()
    opt = torch.optim.AdamW(params, lr=s["lr"], weight_decay=s["weight_decay"])
    bs = s["batch_size"]
    total = max(1, int(round(math.ceil(len(instances) / bs) * s["epochs"])))
    warm = int(total * s["warmup_ratio"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: (t + 1) / max(1, warm) if t < warm else max(0.0, (total - t) / max(1, total - warm)))
    rng = random.Random(seed)
    losses: list[float] = []
    step, t0, no_span = 0, time.perf_counter(), 0
    model.train()
    ce = torch.nn.functional.cross_entropy
    while step < total:
        order = list(range(len(instances)))
        rng.shuffle(order)
        for i in range(0, len(order), bs):
            if step >= total:
                break
            group = [instances[j] for j in order[i:i + bs]]
            qtexts, gdocs, firsts = [], [], []
            for q, pos, negs in group:
                firsts.append(len(gdocs))
                for d in [pos] + negs:  # the positive first in each question's group
                    qtexts.append(q.text)
                    gdocs.append(docs[d])
            enc, offsets, mask, starts = model.batch(qtexts, gdocs)
            score, start, end = model.forward(enc)
            neg = torch.finfo(start.dtype).min
            loss = torch.zeros(())
            used = len(group)
            for (q, pos, negs), f in zip(group, firsts):
                loss = loss + ce(score[f:f + 1 + len(negs)][None], torch.zeros(1, dtype=torch.long))
                span = _span_tokens(offsets[f], mask[f], find_answer(docs[pos].text, q.answers), starts[f])
                if span is not None:
                    st = start[f].masked_fill(~mask[f], neg)
                    en = end[f].masked_fill(~mask[f], neg)
                    loss = loss + ce(st[None], torch.tensor([span[0]])) + ce(en[None], torch.tensor([span[1]]))
                else:
                    no_span += 1  # the answer lies beyond the truncated passage: selection loss only
            (loss / max(1, used)).backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(float(loss.detach()) / max(1, used))
            step += 1
            if step % 50 == 0 or step == total:
                r = losses[-50:]
                print(f"step {step}/{total} loss {sum(r) / len(r):.4f} {time.perf_counter() - t0:.0f}s", flush=True)
    model.save(out)
    return {"steps": step, "instances": len(instances), **stats, "answers_truncated": no_span,
            "seconds": time.perf_counter() - t0, "loss_first": losses[:5], "loss_last": losses[-5:],
            "backbone": s["backbone"], "params": model.n_params(), "retriever_run": str(run_path)}


def exact_match_of_runs(ctx: Context, model_dir: Path, runs: Mapping[str, Path], dataset: str) -> dict[str, dict[str, Any]]:
    """EM of the reader over the top-k passages of each run (system -> run file), on the test
    questions with answers (a seeded sample of ``max_test_questions`` where set)."""
    from harness.runs import read_run

    s = settings(ctx.cfg)
    folder = ctx.data_dir(dataset)
    queries = [q for q in store.read_queries(folder, "test") if q.answers]
    n_all = len(queries)
    if s["max_test_questions"] and s["max_test_questions"] < len(queries):
        keep = sorted(random.Random(ctx.cfg["seed"]).sample(range(len(queries)), s["max_test_questions"]))
        queries = [queries[i] for i in keep]
    tops = {}
    for system, path in runs.items():
        run = read_run(path)
        tops[system] = {q.id: [d for d, _ in run.get(q.id, [])[: s["top_k"]]] for q in queries}
    needed = {d for t in tops.values() for ids in t.values() for d in ids}
    docs = {d.id: d for d in store.iter_corpus(folder) if d.id in needed}  # one pass over the corpus
    model = Reader.load(ctx, model_dir)
    model.train(False)
    out = {}
    for system, top in tops.items():
        t0 = time.perf_counter()
        hits, preds = 0, []
        for q in queries:
            p = model.predict(q.text, [docs[d] for d in top[q.id] if d in docs])
            ok = qa.exact_match(p["answer"], q.answers)
            hits += ok
            preds.append({"id": q.id, "prediction": p["answer"], "passage": p["passage"], "em": bool(ok)})
        out[system] = {"em": hits / len(queries) if queries else 0.0, "questions": len(queries), "test_questions": n_all,
                       "top_k": s["top_k"], "seconds": time.perf_counter() - t0, "params": model.n_params(),
                       "predictions": preds}
    return out


# --------------------------------------------------------------------------------------------
# command line


def _cmd_train(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    from harness.config import section_hash
    from harness.io import atomic_path
    from harness.meta import write_meta

    ctx = Context(cfg, "reader")
    t0 = time.perf_counter()
    with atomic_path(a.out) as tmp:
        tmp.mkdir()
        info = train(ctx, tmp, a.run)
        write_meta(tmp, "model", spec="reader", config_hash=section_hash(cfg, "methods.reader", "seed"),
                   seconds=time.perf_counter() - t0, extra=info)
    print(f"trained reader: {info['steps']} steps on {info['instances']} questions in {time.perf_counter() - t0:.1f}s")
    return 0


def _cmd_em(a: argparse.Namespace, cfg: dict[str, Any]) -> int:
    from harness.io import write_json
    from harness.meta import hardware, versions

    if not len(a.systems) == len(a.run) == len(a.out):
        raise ConfigError("reader em: give one --run and one --out per --systems entry")
    ctx = Context(cfg, "reader", a.dataset)
    s = settings(cfg)
    device = "cpu"  # the reader runs on the CPU (no GPU code path yet)
    results = exact_match_of_runs(ctx, a.model, dict(zip(a.systems, a.run)), a.dataset)
    for system, run, out in zip(a.systems, a.run, a.out):
        res = results[system]
        sample = (f"a seeded sample of {res['questions']} of {res['test_questions']} test questions"
                  if res["questions"] < res["test_questions"] else f"all {res['questions']} test questions")
        write_json(out, {
            "system": system, "dataset": a.dataset,
            "values": {
                "em": {"value": res["em"], "unit": "ratio", "device": device,
                       "what": f"reader EM (SQuAD normalisation) over the top {res['top_k']} passages of the run; {sample}"},
                "reader_params_millions": {"value": res["params"] / 1e6, "unit": "count", "device": device,
                                           "what": f"parameters of the reader ({s['backbone']}), in millions"},
            },
            "reader": {"backbone": s["backbone"], "model": str(a.model), "run": str(run), "top_k": res["top_k"],
                       "questions": res["questions"], "test_questions": res["test_questions"]},
            "seconds": res["seconds"], "hardware": hardware(), "versions": versions(),
            "predictions": res["predictions"][:50],
        })
        print(f"reader EM {system}/{a.dataset}: {res['em']:.4f} on {res['questions']} questions")
    return 0


def main(argv: list[str] | None = None) -> int:
    from harness.config import add_config_argument, load_config

    ap = argparse.ArgumentParser(prog="python -m harness.methods.reader", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train the reader on a retriever's run over the training questions")
    add_config_argument(p)
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("em", help="reader EM over the top-k passages of a system's run")
    add_config_argument(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--systems", nargs="+", required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--run", type=Path, nargs="+", required=True, help="one run per system")
    p.add_argument("--out", type=Path, nargs="+", required=True, help="one metrics part per system")
    a = ap.parse_args(argv)
    cfg = load_config(a.config)
    try:
        return {"train": _cmd_train, "em": _cmd_em}[a.cmd](a, cfg)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from harness.methods import reader as _reader  # run the canonical module, not a copy named __main__

    sys.exit(_reader.main())
