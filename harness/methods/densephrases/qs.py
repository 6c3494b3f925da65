"""DensePhrases' query-side fine-tuning (§6, Eq. 11): only the question encoders train, on the
marginal log-likelihood of the gold answer over the top-k phrases of the fixed phrase index,
re-searched at every epoch; the checkpoint with the best dev EM is kept."""
from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Query, store
from harness.methods.densephrases.model import PhraseModel
from harness.methods.densephrases.search import load_phrase_index, phrase_answers
from harness.methods.densephrases.settings import em_of, prepare
from harness.methods.densephrases.train import dev_questions, train_questions
from harness.models.runtime import torch_for
from harness.recording import merged


def _gold_mask(phrases: Sequence[dict[str, Any]], answers: Sequence[str], rule: str) -> list[bool]:
    return [em_of(p["text"], answers, rule) for p in phrases]


def open_em(cfg: Mapping[str, Any], s: Mapping[str, Any], model: PhraseModel, idx, queries: Sequence[Query],
            texts: Mapping[str, str], rule: str) -> float:
    qs, qe = model.index_queries([prepare(s, q.text) for q in queries], int(s["encode_batch_size"]))
    ans = phrase_answers(idx, qs, qe, s, texts)
    return sum(em_of(a[0]["text"] if a else "", q.answers, rule) for q, a in zip(queries, ans)) / max(1, len(queries))


#: the rehearsal's fallback (``device_fallback``) where a model of a few steps retrieves no gold phrase
STAND_IN = ("densephrases.qs: fewer than 2 training questions with a gold phrase in their top k: each question's "
            "top phrase stands in for its gold, so that Eq. 11's step runs and is timed at its batch (not a result)")


def _research(model: PhraseModel, s: Mapping[str, Any], idx, questions: Sequence[Query], texts: Mapping[str, str],
              rule: str, top_k: int) -> dict[str, tuple[list, list, list[bool]]]:
    """The candidates of each question that retrieved any phrase in its top ``top_k`` of the fixed index,
    searched with the current question encoders: (start rows, end rows, gold mask); Eq. 11 trains on
    those whose mask holds a gold phrase."""
    model.train(False)
    qs, qe = model.index_queries([prepare(s, x.text) for x in questions], int(s["encode_batch_size"]))
    ans = phrase_answers(idx, qs, qe, merged(s, {"search": merged(s["search"], {"phrases": top_k})}), texts)
    cands = {}
    for x, a in zip(questions, ans):
        if a:
            cands[x.id] = ([p["start_row"] for p in a], [p["end_row"] for p in a], _gold_mask(a, x.answers, rule))
    model.train(True)
    return cands


def _neg_mml(torch, scores, gold):
    """-log of the softmax mass of the gold phrases among the candidates (Eq. 11)."""
    return torch.logsumexp(scores, 0) - torch.logsumexp(scores.masked_fill(~gold, torch.finfo(scores.dtype).min), 0)


def _qs_step_fn(torch, model: PhraseModel, s: Mapping[str, Any], idx, state: Mapping[str, Any], loss_kind: str):
    """The step of Eq. 11 for the shared loop, over the current candidates ``state["cands"]``."""

    def step_fn(batch, step, rng):
        qs, qe = model.questions([prepare(s, x.text) for x in batch])
        dev_ = qs.device
        loss = torch.zeros((), device=dev_)
        for k, x in enumerate(batch):
            st, en, gold = state["cands"][x.id]
            hs = torch.from_numpy(idx.dump.vectors(np.asarray(st))).to(dev_)
            he = torch.from_numpy(idx.dump.vectors(np.asarray(en))).to(dev_)
            if model.split:
                half = model.dim // 2
                hs, he = hs[:, :half], he[:, half:]
            a, b = hs @ qs[k], he @ qe[k]
            g = torch.tensor(gold, device=dev_)
            loss = loss + _neg_mml(torch, a + b, g)
            if loss_kind == "code":  # + start-only and end-only marginal likelihoods (the authors' code)
                loss = loss + _neg_mml(torch, a, g) + _neg_mml(torch, b, g)
        return loss / len(batch), {}

    return step_fn


def _freeze_phrase_side(model: PhraseModel) -> None:
    for p in model.phrase.parameters():
        p.requires_grad_(model.shared)  # only the question encoders change (shared: the one encoder)
    for p in model.filter.parameters():
        p.requires_grad_(False)


def train_qs(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Eq. 11 over the training questions of the training set: the index of the base model's dump
    (fixed) is re-searched with the current question encoders at the start of every epoch."""
    from harness import cost
    from harness import train as loop
    from harness.train import subsample

    torch = torch_for(s)
    q = s["qs"]
    seed = int(cfg["seed"])
    loop.set_seed(seed)
    model = PhraseModel.load(s, inputs["model"])
    _freeze_phrase_side(model)
    idx = load_phrase_index(inputs["index"], "main", s)
    texts = store.corpus_lookup(inputs["data"]).texts   # the answers' passages, read as found
    rule = cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    questions = subsample(train_questions(cfg, s), q["max_train_questions"], seed)
    dev = dev_questions(cfg, s)[0][: int(q["dev_questions"])]
    ts = loop.TrainSettings(epochs=1, batch_size=int(q["batch_size"]), lr=float(q["lr"]),
                            weight_decay=float(q["weight_decay"]), warmup_ratio=0.0, grad_clip=1.0,
                            device=s.get("device", "cpu"), log_every=20)
    state: dict[str, Any] = {"cands": {}}
    history = []
    best = {"em": -1.0, "epoch": 0}
    best_dir = out / "best"
    model.train(False)
    em0 = open_em(cfg, s, model, idx, dev, texts, rule)
    history.append({"epoch": 0, "dev_em": em0, "with_gold": None})
    best.update(em=em0, epoch=0)
    model.save(best_dir)
    params = [p for m in model.encoders() for p in m.parameters() if p.requires_grad]  # the phrase encoder is frozen
    step_fn = _qs_step_fn(torch, model, s, idx, state, q["loss"])
    for epoch in range(1, int(q["epochs"]) + 1):
        found = _research(model, s, idx, questions, texts, rule, int(q["top_k"]))
        state["cands"] = {k: c for k, c in found.items() if any(c[2])}
        n_gold = len(state["cands"])
        stand_in = n_gold < 2 and len(found) >= 2 and cost.fallback(STAND_IN)
        if stand_in:   # the rehearsal: the step's shape is what it times, not what the model learns
            state["cands"] = {k: c if any(c[2]) else (c[0], c[1], [True] + [False] * (len(c[2]) - 1))
                              for k, c in found.items()}
        exs = [x for x in questions if x.id in state["cands"]]
        if len(exs) < 2:
            history.append({"epoch": epoch, "dev_em": None, "with_gold": n_gold, "why": "fewer than 2 questions "
                            "with a gold phrase in their top k"})
            break
        info = loop.train_loop(exs, step_fn, params, settings=ts, seed=seed + epoch, out=None,
                               modules=model.encoders())
        model.train(False)
        em = open_em(cfg, s, model, idx, dev, texts, rule)
        history.append({"epoch": epoch, "dev_em": em, "with_gold": n_gold, "steps": info["steps"],
                        "loss_last": info["loss_last"], **({"stand_in_gold": len(exs) - n_gold} if stand_in else {})})
        print(f"query-side fine-tuning epoch {epoch}: dev EM {em:.4f} ({n_gold} questions with a gold phrase)")
        if em > best["em"]:
            best.update(em=em, epoch=epoch)
            shutil.rmtree(best_dir, ignore_errors=True)
            model.save(best_dir)
    for item in best_dir.iterdir():
        shutil.move(str(item), str(out / item.name))
    best_dir.rmdir()
    return {"history": history, "steps": sum(h.get("steps", 0) for h in history),  # its cost's units
            "best_epoch": best["epoch"], "best_dev_em": best["em"],
            "train_questions": len(questions), "dev_questions": len(dev), "top_k": int(q["top_k"]),
            "index": idx.spec, "loss": q["loss"]}
