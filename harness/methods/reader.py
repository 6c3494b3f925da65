"""An extractive reader in the style of DPR's, as BPR uses it (Appendix A.4), so that the EM columns
of BPR's Tables 1 and 3 are measured.

Model: a BERT-family encoder (``reader.backbone``) reading ``[CLS] question [SEP] title
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
``reader.retriever`` over the training questions (search job ``<retriever>.train``).

EM (``harness.evaluate.qa.exact_match``) is measured per retrieval system on its TREC run of the
test questions (``reader.systems``; optionally a seeded sample of
``max_test_questions``) and written as a metrics part ``{"values": {"em": ...}}``.

Commands: ``python -m harness.methods.reader {train,em} ...``.
"""
from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.datasets import Doc, Query, store
from harness.datasets.answers import has_answer
from harness.settings import fragment_defaults
from harness.errors import ConfigError, DataError
from harness.models.runtime import quiet_transformers, torch_for
from harness.evaluate import qa
from harness.methods.base import Context
from harness.job import Job, Ref
from harness.recording import merged

SCHEMA = "reader.schema.yaml"

HEADS_FILE = "heads.pt"
ENCODER_DIR = "encoder"
#: defaults of the reader section: written once, in the schema
DEFAULTS: dict[str, Any] = fragment_defaults(__file__, SCHEMA)


def settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    if not cfg.get("reader"):
        raise ConfigError("config has no reader section (the extractive reader for EM)")
    return merged(DEFAULTS, cfg["reader"])


def _torch(ctx: Context):
    return torch_for(threads=settings(ctx.cfg)["torch_threads"])


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


def text_mask(enc: Any, offsets: Any, prefix: Sequence[int]) -> Any:
    """[n, L] bool: the tokens of pair i that lie in passage i's text — the second sequence, at or
    after character ``prefix[i]`` (the title and [SEP] come first), and not empty (special tokens)."""
    import torch

    second = torch.tensor([[sid == 1 for sid in enc.sequence_ids(i)] for i in range(len(prefix))], dtype=torch.bool)
    second = second.reshape(offsets.shape[:2])
    start = torch.tensor(list(prefix), dtype=offsets.dtype).reshape(-1, 1)
    return second & (offsets[:, :, 0] >= start) & (offsets[:, :, 1] > offsets[:, :, 0])


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
        from harness.models.backbones import load_encoder, load_tokenizer

        quiet_transformers()
        name = settings(ctx.cfg)["backbone"]
        return cls(ctx, load_encoder(ctx.cfg, name), load_tokenizer(ctx.cfg, name))

    @classmethod
    def load(cls, ctx: Context, folder: Path, device: str = "cpu") -> Reader:
        """The reader saved in ``folder``, on ``device`` (where :meth:`predict` reads; its answers come
        back as strings, its scores as floats)."""
        import torch
        from transformers import AutoModel, AutoTokenizer

        quiet_transformers()
        enc = AutoModel.from_pretrained(Path(folder) / ENCODER_DIR)
        r = cls(ctx, enc, AutoTokenizer.from_pretrained(Path(folder) / ENCODER_DIR))
        r.heads.load_state_dict(torch.load(Path(folder) / HEADS_FILE, map_location="cpu", weights_only=True))
        r.enc.to(device)
        r.heads.to(device)
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
        _torch(self.ctx)  # the job's torch threads (the tokenizer returns torch tensors)
        qs = {q: self.tok.convert_tokens_to_string(self.tok.tokenize(q)[: self.q_max_len]) for q in set(questions)}
        seconds = [self._prefix(d) + d.text for d in docs]
        enc = self.tok([qs[q] for q in questions], seconds, padding=True, truncation="only_second",
                       max_length=self.max_len, return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")
        prefix = [len(self._prefix(d)) for d in docs]
        return enc, offsets, text_mask(enc, offsets, prefix), prefix

    def forward(self, enc):
        hidden = self.enc(**enc).last_hidden_state
        score = self.heads["score"](hidden[:, 0]).squeeze(-1)
        start, end = self.heads["span"](hidden).unbind(-1)
        return score, start, end

    def read(self, enc):
        """:meth:`forward` where the model's weights are (load's device, or training's), as float32
        CPU tensors (the span search and the offsets are on the CPU)."""
        on = next(self.enc.parameters()).device
        return tuple(t.float().cpu() for t in self.forward(enc.to(on)))

    def predict(self, question: str, docs: Sequence[Doc]) -> dict[str, Any]:
        """The answer string read from ``docs`` (the question's top-k passages)."""
        torch = _torch(self.ctx)
        if not docs:
            return {"answer": "", "passage": None, "score": float("-inf")}
        with torch.inference_mode():
            enc, offsets, mask, starts = self.batch([question] * len(docs), docs)
            score, start, end = self.read(enc)
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
    from harness.train import subsample

    s = settings(ctx.cfg)
    seed = ctx.cfg["seed"]
    folder = ctx.data_dir(s["train_dataset"])
    rule = ctx.cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    queries = subsample([q for q in store.read_queries(folder, "train") if q.answers], s["max_train_questions"], seed)
    docs = store.corpus_lookup(folder)
    run = read_run(run_path)
    rng = random.Random(seed)
    ids = store.ids_of(docs)
    out, stats = [], {"questions": len(queries), "positive_retrieved": 0, "positive_gold": 0, "skipped": 0,
                      "padded_negatives": 0}
    for q in queries:
        retrieved = [d for d, _ in run.get(q.id, []) if d in docs]
        text = {d: docs[d].text for d in retrieved}   # each retrieved passage read once (by id, from the file)
        pos = next((d for d in retrieved if find_answer(text[d], q.answers)), None)
        if pos is not None:
            stats["positive_retrieved"] += 1
        else:
            pos = next((g for g in (q.gold or []) if g in docs and find_answer(docs[g].text, q.answers)), None)
            if pos is None:
                stats["skipped"] += 1
                continue
            stats["positive_gold"] += 1
        negs = [d for d in retrieved if d != pos and not has_answer(q.answers, text[d], rule)]
        negs = negs[: s["negative_passages"]]
        tries = 0
        while len(negs) < s["negative_passages"] and tries < 50 * s["negative_passages"]:
            d = rng.choice(ids)
            tries += 1
            if d != pos and d not in negs and not has_answer(q.answers, docs[d].text, rule):
                negs.append(d)
                stats["padded_negatives"] += 1
        out.append((q, pos, negs))
    return out, stats


def train(ctx: Context, out: Path, run_path: Path) -> dict[str, Any]:
    """Train the reader on the retriever's run over the training questions; writes it to ``out``.
    The loop is :func:`harness.train.train_loop` (a group of one question is a step here)."""
    from harness import train as loop

    torch = _torch(ctx)
    s = settings(ctx.cfg)
    seed = ctx.cfg["seed"]
    loop.set_seed(seed)
    instances, stats = training_instances(ctx, run_path)
    if not instances:
        raise DataError(f"{run_path}: no training question has an answer-bearing passage; the reader cannot train")
    docs = store.corpus_lookup(ctx.data_dir(s["train_dataset"]))
    model = Reader.from_backbone(ctx)
    ts = loop.TrainSettings.from_config(s, min_batch=1)
    device = loop.resolve_device(ts.device)
    ce = torch.nn.functional.cross_entropy
    no_span = 0
    chunk = int(s.get("sub_batch") or 0)

    def step_fn(group: list[tuple[Query, str, list[str]]], step: int, rng: random.Random):
        """The mean over the group's questions of each one's selection and span losses; with
        ``sub_batch``, that many questions (each with its passages) per forward and backward pass:
        the loss is a sum over questions, so the gradients are the whole group's."""
        if not chunk or len(group) <= chunk:
            return one_graph(group), {}
        total = 0.0
        for i in range(0, len(group), chunk):
            part = group[i:i + chunk]
            loss = one_graph(part) * (len(part) / len(group))
            loop.backward(loss / ts.grad_accum)  # the loop's backward (fp16: scaled); it divides an undetached loss itself
            total += float(loss.detach())
        return torch.tensor(total), {}  # detached: the loop skips its backward

    def one_graph(group: list[tuple[Query, str, list[str]]]):
        nonlocal no_span
        qtexts, gdocs, firsts = [], [], []
        for q, pos, negs in group:
            firsts.append(len(gdocs))
            for d in [pos] + negs:  # the positive first in each question's group
                qtexts.append(q.text)
                gdocs.append(docs[d])
        enc, offsets, mask, starts = model.batch(qtexts, gdocs)
        score, start, end = model.forward(enc.to(device))
        dmask = mask.to(device)
        neg = torch.finfo(start.dtype).min
        loss = torch.zeros((), device=score.device)
        for (q, pos, negs), f in zip(group, firsts):
            loss = loss + ce(score[f:f + 1 + len(negs)][None], torch.zeros(1, dtype=torch.long, device=score.device))
            span = _span_tokens(offsets[f], mask[f], find_answer(docs[pos].text, q.answers), starts[f])
            if span is not None:
                st = start[f].masked_fill(~dmask[f], neg)
                en = end[f].masked_fill(~dmask[f], neg)
                loss = loss + ce(st[None], torch.tensor([span[0]], device=st.device)) \
                    + ce(en[None], torch.tensor([span[1]], device=en.device))
            else:
                no_span += 1  # the answer lies beyond the truncated passage: selection loss only
        return loss / max(1, len(group))

    info = loop.train_loop(instances, step_fn, model.parameters(), settings=ts, seed=seed, out=out,
                           save=model.save, modules=[model.enc, model.heads])
    return {"steps": info["steps"], "instances": len(instances), **stats, "answers_truncated": no_span,
            "seconds": info["seconds"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
            "backbone": s["backbone"], "params": model.n_params(), "retriever_run": str(run_path)}


def exact_match_of_runs(ctx: Context, model_dir: Path, runs: Mapping[str, Path], dataset: str,
                        device: str = "cpu") -> dict[str, dict[str, Any]]:
    """EM of the reader (read on ``device``) over the top-k passages of each run (system -> run file),
    on the test questions with answers (a seeded sample of ``max_test_questions`` where set)."""
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
    model = Reader.load(ctx, model_dir, device)
    model.train(False)
    out = {}
    read: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}   # (question, its passages) -> answer
    for system, top in tops.items():
        t0 = time.perf_counter()
        hits, preds = 0, []
        for q in queries:
            ids = tuple(d for d in top[q.id] if d in docs)
            # systems that give a question the same passages in the same order get the same reading
            # (predict is deterministic): it is read once (exact and approximate indexes mostly agree)
            p = read.get((q.id, ids))
            if p is None:
                p = read[(q.id, ids)] = model.predict(q.text, [docs[d] for d in ids])
            ok = qa.exact_match(p["answer"], q.answers)
            hits += ok
            preds.append({"id": q.id, "prediction": p["answer"], "passage": p["passage"], "em": bool(ok)})
        out[system] = {"em": hits / len(queries) if queries else 0.0, "questions": len(queries), "test_questions": n_all,
                       "top_k": s["top_k"], "seconds": time.perf_counter() - t0, "params": model.n_params(),
                       "predictions": preds, "read": len(read)}
    return out


# --------------------------------------------------------------------------------------------
# jobs (harness/plan.py): the reader is an answer-extraction step over any system's run


def declare(cfg: Mapping[str, Any], name: str = "reader") -> list[Job]:
    """The training run (``reader.retriever``'s default search over the training questions, a
    search job of the retriever's own module), the reader model, and EM of every system of
    ``reader.systems`` on each of ``reader.datasets`` (default: the training dataset)."""
    from harness.methods import method_module
    from harness.methods.base import affects, training_keys, wants_gpu

    s = settings(cfg)
    td, retriever, gpu = s["train_dataset"], s["retriever"], wants_gpu(cfg, name)
    train_run = method_module(retriever).search_job(cfg, retriever, td, split="train")
    jobs = [train_run,
            Job("train", name, name, "train_step", gpu=gpu, keys=training_keys(cfg, name, backbone=s["backbone"]),
                params={"run": train_run.systems[0]},
                inputs={"data": Ref("data", dataset=td), "run": Ref("run", train_run.id, td)})]
    for d in s.get("datasets") or [td]:
        jobs.append(Job("measure", f"{name}.em", name, "measure_em", d, gpu=gpu, systems=tuple(s["systems"]),
                        keys=(*affects(name, "measure.em"), "seed"),
                        inputs={"data": Ref("data", dataset=d), "model": Ref("model", name),
                                **{f"run_{i}": Ref("system", sys_, d) for i, sys_ in enumerate(s["systems"])}}))
    return jobs


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    info = train(ctx, out, inputs["run"] / f"{job.params['run']}.trec")
    print(f"trained reader: {info['steps']} steps on {info['instances']} questions")
    return info


def measure_em(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Reader EM (and its parameter count) over the top-k passages of each system's run."""
    from harness import figures
    from harness.meta import device_info
    from harness.models.runtime import encode_device

    s = settings(ctx.cfg)
    # the section's device, as its training's (the paper profile books this job a GPU: NQ's 3,610 test
    # questions x top 20 passages x 6 systems; it read them on the CPU before); no GPU: the section's
    # fallback rule (harness.train.resolve_device)
    device = encode_device(s)
    runs = {system: inputs[f"run_{i}"] / f"{system}.trec" for i, system in enumerate(job.systems)}
    results = exact_match_of_runs(ctx, inputs["model"], runs, str(job.dataset), device)
    for system, run in runs.items():
        res = results[system]
        sample = (f"a seeded sample of {res['questions']} of {res['test_questions']} test questions"
                  if res["questions"] < res["test_questions"] else f"all {res['questions']} test questions")
        figures.write(out / f"{system}.json", system, job.dataset, {
            "em": (res["em"], "ratio", f"reader EM (SQuAD normalisation) over the top {res['top_k']} passages of the run; "
                                       f"{sample}"),
            "reader_params_millions": (res["params"] / 1e6, "count", f"parameters of the reader ({s['backbone']}), in millions"),
        }, device, reader={"backbone": s["backbone"], "model": str(inputs["model"]), "run": str(run), "top_k": res["top_k"],
                           "questions": res["questions"], "test_questions": res["test_questions"]},
            seconds=res["seconds"], device_info=device_info(device), predictions=res["predictions"],
            seconds_note=("reading the questions whose passage lists no earlier system of this job gave "
                          f"(lists read so far: {res['read']})"))
        print(f"reader EM {system}/{job.dataset}: {res['em']:.4f} on {res['questions']} questions")
    return {}
