"""DensePhrases' training (Eq. 9) on the shared loop: training examples (questions with their gold
passage and an aligned answer span), the reader's logits as the distillation teacher, L_single,
L_neg with in-batch / pre-batch negatives, L_distill and the filter's BCE; the dev and training
questions; question-generation augmentation (§4.1, qg.py)."""
from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from harness.datasets import Doc, Query, store
from harness.errors import ConfigError, DataError
from harness.methods.base import Context
from harness.methods.densephrases.model import PhraseModel, Window, _pad, windows
from harness.methods.densephrases.settings import NAME, prepare
from harness.models.runtime import encode_device, torch_for


# --------------------------------------------------------------------------------------------
# training data: questions with their gold passage and an aligned answer span


class Example(NamedTuple):
    qid: str
    question: str            # prepared (one '?' dropped, truecased)
    answers: list[str]
    doc: Doc
    span: tuple[int, int]    # answer chars in doc.text
    window: Window
    start: int               # gold token positions in the window
    end: int


def _align(win: Window, span: tuple[int, int]) -> tuple[int, int] | None:
    """Token positions of the window that cover the char span (None if the window does not)."""
    a, b = span
    toks = [t for t, ok in enumerate(win.text) if ok]
    if not toks or win.offsets[toks[0]][0] > a or win.offsets[toks[-1]][1] < b:
        return None
    start = next((t for t in toks if win.offsets[t][1] > a), None)
    end = next((t for t in reversed(toks) if win.offsets[t][0] < b), None)
    if start is None or end is None or end < start:
        return None
    return start, end


def examples_of(s: Mapping[str, Any], tok, queries: Sequence[Query], docs: Mapping[str, Doc]
                ) -> tuple[list[Example], dict[str, int]]:
    """One example per question whose answer occurs in its gold passage (the first occurrence on
    word boundaries, as the reader aligns it); the unaligned are counted, never dropped silently."""
    from harness.methods.reader import find_answer

    stats = {"questions": len(queries), "no_gold_passage": 0, "answer_not_in_passage": 0,
             "answer_beyond_windows": 0, "examples": 0}
    pending = []
    for q in queries:
        gold = next((docs[g] for g in (q.gold or []) if g in docs), None)
        if gold is None or not q.answers:
            stats["no_gold_passage"] += 1
            continue
        span = find_answer(gold.text, q.answers)
        if span is None:
            stats["answer_not_in_passage"] += 1
            continue
        pending.append((q, gold, span))
    wins = windows(tok, [g for _, g, _ in pending], int(s["p_max_len"]), int(s["doc_stride"]))
    by_doc: dict[int, list[Window]] = {}
    for w in wins:
        by_doc.setdefault(w.doc, []).append(w)
    out = []
    for i, (q, gold, span) in enumerate(pending):
        found = next(((w, pos) for w in by_doc.get(i, []) if (pos := _align(w, span)) is not None), None)
        if found is None:
            stats["answer_beyond_windows"] += 1
            continue
        w, (a, b) = found
        text = gold.text[span[0]:span[1]]
        out.append(Example(q.id, prepare(s, q.text), [text, *q.answers], gold, span, w, a, b))
    stats["examples"] = len(out)
    return out, stats


def teacher_logits(cfg: Mapping[str, Any], reader_dir: Path, exs: Sequence[Example], batch: int = 16,
                   device: str = "cpu") -> list[tuple[np.ndarray, np.ndarray]]:
    """The reader's start/end logits on each example, at the example window's positions (NaN where
    the reader does not see the token: its window is shorter). Mapped by character offset. The reader
    reads on ``device`` (the training's: every training example passes through it once)."""
    import torch

    from harness.methods.reader import Reader

    reader = Reader.load(Context(cfg, "reader"), reader_dir, device)
    reader.train(False)
    out = []
    with torch.inference_mode():
        for b in range(0, len(exs), batch):
            chunk = exs[b:b + batch]
            enc, offsets, mask, shifts = reader.batch([e.question for e in chunk], [e.doc for e in chunk])
            _, st, en = reader.read(enc)
            for k, e in enumerate(chunk):
                pos = {}
                for t in range(offsets.shape[1]):
                    if mask[k, t]:
                        pos[int(offsets[k, t, 0]) - shifts[k]] = t
                ls = np.full(len(e.window.ids), np.nan, np.float32)
                le = np.full(len(e.window.ids), np.nan, np.float32)
                for t, ok in enumerate(e.window.text):
                    if ok and e.window.offsets[t][0] in pos:
                        ls[t] = float(st[k, pos[e.window.offsets[t][0]]])
                        le[t] = float(en[k, pos[e.window.offsets[t][0]]])
                out.append((ls, le))
    return out


def _kl(torch, student, teacher, mask, direction: str):
    """Mean over the batch of KL(P || P_c) (paper) or KL(P_c || P) (code), both distributions over the
    tokens both models see (``mask``)."""
    ls = torch.log_softmax(student.masked_fill(~mask, torch.finfo(student.dtype).min), -1)
    lt = torch.log_softmax(teacher.masked_fill(~mask, torch.finfo(teacher.dtype).min), -1)
    p, q = (ls, lt) if direction == "paper" else (lt, ls)
    kl = (p.exp() * (p - q)).masked_fill(~mask, 0.0).sum(-1)
    return kl.mean()


def neg_loss(torch, qs, qe, G_s, G_e, cached: Sequence = ()):
    """Eq. 8: question i's start (end) vector against the gold start (end) vectors of the batch
    (in-batch negatives, row i is its own), then of the ``cached`` batches (pre-batch negatives,
    §4.3: (G_start, G_end) pairs of earlier batches, detached here so no gradient reaches them)."""
    keys_s = torch.cat([G_s, *[c[0].detach() for c in cached]])
    keys_e = torch.cat([G_e, *[c[1].detach() for c in cached]])
    target = torch.arange(qs.shape[0], device=qs.device)
    ce = torch.nn.functional.cross_entropy
    return (ce(qs @ keys_s.T, target) + ce(qe @ keys_e.T, target)) / 2


def dev_questions(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> tuple[list[Query], str]:
    """Questions for tuning the filter threshold and choosing the query-side checkpoint: the training
    set's ``dev_split`` where it has one, else a seeded sample of ``dev_sample`` training questions
    (then held out of training, see :func:`train_questions`)."""
    folder = Context(cfg, NAME).data_dir(s["train_dataset"])
    if (folder / store.queries_file(s["dev_split"])).exists():
        return [q for q in store.read_queries(folder, s["dev_split"]) if q.answers], f"{s['train_dataset']}:{s['dev_split']}"
    train = [q for q in store.read_queries(folder, "train") if q.answers]
    keep = sorted(random.Random(cfg["seed"]).sample(range(len(train)), min(int(s["dev_sample"]), len(train) // 4)))
    return [train[i] for i in keep], f"{s['train_dataset']}:train (seeded sample of {len(keep)}, held out)"


def train_questions(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> list[Query]:
    from harness.train import subsample

    folder = Context(cfg, NAME).data_dir(s["train_dataset"])
    train = [q for q in store.read_queries(folder, "train") if q.answers]
    if not (folder / store.queries_file(s["dev_split"])).exists():
        held = {q.id for q in dev_questions(cfg, s)[0]}
        train = [q for q in train if q.id not in held]
    return subsample(train, s["max_train_questions"], int(cfg["seed"]))


def generate_questions(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path],
                       passages: Sequence[Doc]) -> tuple[list[Query], dict[str, Any]]:
    """§4.1's augmentation (qg.py in this package): named entities of the training passages as candidate
    answers, the seq2seq generator of ``qg.generator``, kept when the reader (the cross-attention
    model) answers the generated question exactly. Fails, naming why, where the models are absent."""
    from harness.methods.densephrases import qg
    from harness.methods.reader import Reader

    qs_ = qg.QGSettings.from_config(s["qg"], where=f"methods.{NAME}.qg")
    why = qg.availability(qs_)
    if why:
        raise ConfigError(f"methods.{NAME}.qg: {why}",
                          fix=f"set methods.{NAME}.qg: null (the QG rows of Table 5 then read not run)")
    if "reader" not in inputs:
        raise ConfigError(f"methods.{NAME}.qg needs the reader (the filter's cross-attention model)",
                          fix=f"set methods.{NAME}.distill: true (the reader is then an input) or qg: null")
    model, tok = qg.load_generator(qs_)
    reader = Reader.load(Context(cfg, "reader"), inputs["reader"])
    reader.train(False)
    kept, stats = qg.run_pipeline(list(passages), qs_, model=model, tokenizer=tok, ner=qg.spacy_ner(qs_.ner),
                                  predict=qg.reader_predict(reader), seed=int(cfg["seed"]))
    return [Query(f"qg-{i}", g.question, [g.answer], [g.passage_id]) for i, g in enumerate(kept)], dict(stats)


# --------------------------------------------------------------------------------------------
# training (Eq. 9)


def _distill_loss(torch, zs, ze, mask, batch: Sequence[Example], teacher, index_of: Mapping[str, int],
                  direction: str):
    """L_distill (Eq. 7) of a batch: the teacher's start/end logits padded to the window (NaN where
    the reader does not see the token), KL over the tokens both models see."""
    dev = zs.device
    n = zs.shape[1]
    ts_, te_ = (np.full((len(batch), n), np.nan, np.float32) for _ in range(2))
    for k, e in enumerate(batch):
        a, b = teacher[index_of[e.qid]]
        ts_[k, :len(a)], te_[k, :len(b)] = a, b
    t_s, t_e = torch.from_numpy(ts_).to(dev), torch.from_numpy(te_).to(dev)
    both = mask & ~torch.isnan(t_s)
    return (_kl(torch, zs, torch.nan_to_num(t_s), both, direction)
            + _kl(torch, ze, torch.nan_to_num(t_e), both, direction)) / 2


def _filter_loss(torch, model: PhraseModel, h, mask, gs, ge):
    """The filter's BCE (App. E) on the gold start/end positions, positive weight = window length."""
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    dev = h.device
    logits = model.filter_logits(h)
    target = torch.zeros_like(logits)
    ar = torch.arange(gs.shape[0], device=dev)
    target[ar, gs, 0] = 1.0
    target[ar, ge, 1] = 1.0
    pw = torch.tensor(float(mask.shape[1]), device=dev)
    l_f = bce(logits, target, pos_weight=pw, reduction="none")
    return (l_f * mask[..., None]).sum() / (mask.sum() * 2).clamp(min=1)


def _step_fn(torch, model: PhraseModel, s: Mapping[str, Any], teacher, index_of: Mapping[str, int],
             prebatch_from: int | None, queue: deque, counts: dict[str, int], chunk: int = 0):
    """The training step of Eq. 9 for the shared loop: (loss, its parts) of a batch of examples. With
    ``chunk`` (``grad_cache_chunk``) the windows and the questions are encoded in GradCache sub-batches
    of that many (:func:`harness.train.sub_batch_step`): every term of Eq. 9 couples the batch only
    through the token vectors h and the question vectors, so the loss is taken on the whole batch's
    (every in-batch and pre-batch negative) and the gradients are the one graph's."""
    from harness.train import sub_batch_step

    w = s["loss_weights"]
    ce = torch.nn.functional.cross_entropy
    pad = model.tok.pad_token_id or 0

    def step_fn(batch: list[Example], step: int, rng: random.Random):
        ids, att, mask = _pad(torch, [e.window for e in batch], pad)

        def loss_fn(h, q):
            qs, qe = q
            dev = h.device
            m = mask.to(dev)
            hs, he = model.start_end(h)
            zs, ze = torch.einsum("btd,bd->bt", hs, qs), torch.einsum("btd,bd->bt", he, qe)
            neg = torch.finfo(zs.dtype).min  # the scores' dtype: bf16 under autocast, where float32's min overflows
            zs, ze = zs.masked_fill(~m, neg), ze.masked_fill(~m, neg)
            gs = torch.tensor([e.start for e in batch], device=dev)
            ge = torch.tensor([e.end for e in batch], device=dev)
            single = (ce(zs, gs) + ce(ze, ge)) / 2
            loss = float(w["single"]) * single
            parts = {"single": float(single.detach())}
            if s["negatives"] != "none":
                ar = torch.arange(len(batch), device=dev)
                G_s, G_e = hs[ar, gs], he[ar, ge]
                cached: list = []
                if prebatch_from is not None and step >= prebatch_from:
                    cached = list(queue)
                    counts["prebatch_steps"] += bool(cached)
                    queue.append((G_s.detach(), G_e.detach()))
                l_neg = neg_loss(torch, qs, qe, G_s, G_e, cached)
                loss = loss + float(w["neg"]) * l_neg
                parts["neg"] = float(l_neg.detach())
            if teacher is not None:
                l_kl = _distill_loss(torch, zs, ze, m, batch, teacher, index_of, s["distill_direction"])
                loss = loss + float(w["distill"]) * l_kl
                parts["distill"] = float(l_kl.detach())
            if float(w["filter"]) > 0:
                l_f = _filter_loss(torch, model, h, m, gs, ge)
                loss = loss + float(w["filter"]) * l_f
                parts["filter"] = float(l_f.detach())
            return loss, parts

        towers = [(lambda b: model.token_vectors(b["input_ids"], b["attention_mask"]),
                   {"input_ids": ids, "attention_mask": att}),
                  (model.encode_questions, model.question_batch([e.question for e in batch]))]
        return sub_batch_step(towers, loss_fn, chunk)

    return step_fn


def train(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from harness import train as loop

    torch = torch_for(s)
    seed = int(cfg["seed"])
    loop.set_seed(seed)
    model = PhraseModel.from_backbone(cfg, s)
    docs = store.corpus_lookup(inputs["data"])
    questions = train_questions(cfg, s)
    qg_stats = None
    if s["qg"] and not loop.initial_only():  # the initial checkpoint: no generated question moves a weight
        generated, qg_stats = generate_questions(cfg, s, inputs, [docs[g] for g in dict.fromkeys(
            g for q in questions for g in (q.gold or []) if g in docs)])
        questions = [*generated, *questions]
    exs, stats = examples_of(s, model.tok, questions, docs)
    if len(exs) < 2:
        raise DataError(f"{inputs['data']}: {len(exs)} training question(s) with an answer in their gold passage "
                        f"({stats}); DensePhrases cannot train")
    # the initial checkpoint (lr 0) moves no weight: the teacher's logits would change only its one logged loss
    teacher = (teacher_logits(cfg, inputs["reader"], exs, device=encode_device(s))
               if s["distill"] and not loop.initial_only() else None)
    index_of = {e.qid: i for i, e in enumerate(exs)}
    ts = loop.TrainSettings.from_config(s, log_every=20)
    total = loop.total_steps(len(exs), ts.batch_size, ts.epochs, ts.grad_accum)
    prebatch_from = math.floor(float(s["prebatch_start"]) * total) if s["negatives"] == "prebatch" else None
    queue: deque = deque(maxlen=int(s["prebatch_batches"]))
    counts = {"prebatch_steps": 0}
    step_fn = _step_fn(torch, model, s, teacher, index_of, prebatch_from, queue, counts, ts.grad_cache_chunk)
    params = [p for m in model.modules() for p in m.parameters() if p.requires_grad]
    info = loop.train_loop(exs, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=model.modules())
    return {"steps": info["steps"], "examples": len(exs), **stats, **counts, "prebatch_from_step": prebatch_from,
            "seconds": info["seconds"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
            "backbone": s["backbone"], "params": model.n_params(), "distill_teacher": "reader" if teacher else None,
            "negatives": s["negatives"], "batch_size": ts.batch_size, "grad_cache_chunk": ts.grad_cache_chunk,
            "question_generation": qg_stats}
