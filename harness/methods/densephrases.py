"""DensePhrases (Lee et al., 2021): dense phrase representations for open-domain QA.

Model (§3.2): a phrase encoder M_p over passages and two question encoders M_q,start and M_q,end
read at [CLS], all initialised from the profile's backbone. A phrase s(i, j) of a passage is
[h_i, h_j] (Eq. 3: as the authors' code, the start and end vectors of a token are the same token
vector h); a question is [q_start, q_end] (Eq. 4); f(s, q) = h_i . q_start + h_j . q_end.
Options (Table 5): ``shared_encoder`` (one encoder for passages and questions, DenSPI-style:
q_start read at [CLS], q_end at the question's last token) and ``split_vectors`` (DenSPI: h is
split in halves, start = h[:d/2], end = h[d/2:]; the question vectors have d/2 dimensions and are
zero-padded to d for the phrase index, so one index of h serves both).

Training (Eq. 9): L = l1 L_single + l2 L_distill + l3 L_neg (+ the filter's BCE, App. E).
- L_single (Eqs. 5-6): start/end log-likelihood within the gold passage window.
- L_neg (Eq. 8): in-batch negatives, the gold start/end vectors of the other questions of the
  batch; pre-batch negatives (§4.3): a FIFO of the detached gold vectors of the C previous
  batches, switched on after ``prebatch_start`` of training (the paper: the last two of 4 epochs).
- L_distill (Eq. 7): KL(P || P_c) against the start/end distributions of a cross-attention
  teacher: the harness's extractive reader (harness/reader.py, a BERT-family cross-encoder trained
  on the same dataset's questions), mapped to the phrase encoder's tokens by character offset;
  both distributions are renormalised over the tokens both models see. The code's direction
  KL(P_c || P) is ``distill_direction: code``.
- Filter (App. E): a linear layer (hidden -> start/end logits) trained with binary cross-entropy
  on the gold positions (positive weight = window length, as the code); at dump time a token is
  kept if either logit exceeds a threshold tuned on dev questions (the highest threshold of a grid
  whose reading-comprehension EM stays within ``filter.tolerance`` of the unfiltered EM).

Indexing (§5): every kept token vector of every passage (windows of ``dump_max_len`` with stride;
a token is taken from the window where it has most context) goes to the phrase dump
(harness/indexes/phrase_dump.py), then to phrase indexes (harness/indexes/phrase.py): the main
spec (the paper: ``IVF<nlist>,SQ4``), the released OPQ/IVF-PQ variant and ``Flat``.
Search (Eq. 10): top-k start and end positions by MIPS, spans completed under start <= end <
start + L within one passage; the top-1 phrase is the answer; the top phrases and their passages
are written (``<system>.answers.jsonl`` and a TREC run of the passages).

Query-side fine-tuning (§6, Eq. 11): only the question encoders train; the loss is the marginal
log-likelihood of the gold answer over the top-k phrases retrieved from the fixed phrase index,
re-searched at every epoch; gold = SQuAD-normalised string equality (regex for ``dpr-regex``
datasets); the checkpoint with the best dev EM is kept.

Evaluation: EM and F1 (SQuAD v1.1; regex EM for CuratedTREC); questions lose one trailing "?" and
all-lower-case questions are truecased (``harness.evaluate.qa.prepare_question``), as the authors do.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from harness.config import fragment_defaults
from harness.datasets import Doc, Query, store
from harness.errors import ConfigError, DataError
from harness.methods.base import Context, wants_gpu
from harness.plan import Job, Ref

SCHEMA = "densephrases.schema.yaml"
DEFAULTS = fragment_defaults(__file__, SCHEMA)
#: sections merged key by key over their own defaults (read once: parsing the schema costs ~3 ms)
NESTED = ("loss_weights", "filter", "search", "qs", "timing", "dsmall")
NESTED_DEFAULTS = {key: fragment_defaults(__file__, SCHEMA, key) for key in NESTED}
NAME = "densephrases"
ENCODERS = ("phrase_encoder", "question_start", "question_end")
HEADS_FILE = "filter.pt"
INFO_FILE = "densephrases.json"
DUMP_DIR = "dump"
ANSWERS = ".answers.jsonl"
#: keys of the section that never change a trained phrase model
NOT_MODEL = ("enabled", "datasets", "variants", "variant_overrides", "variant_datasets", "encode_batch_size",
             "torch_threads", "device", "index", "index_variants", "nprobe", "dump_max_len", "dump_stride",
             "dump_codec", "filter", "search", "qs", "qg", "timing", "rc_datasets", "dsmall", "log_every",
             "c3_datasets", "train_sample", "max_test_questions")


# --------------------------------------------------------------------------------------------
# settings


def settings(cfg: Mapping[str, Any], variant: str | None = None) -> dict[str, Any]:
    """methods.densephrases with defaults; a variant: ``variant_overrides`` then its own settings."""
    sec = cfg["methods"][NAME]
    s = {**copy.deepcopy(DEFAULTS), **copy.deepcopy(dict(sec))}
    for key in NESTED:
        s[key] = {**copy.deepcopy(NESTED_DEFAULTS[key]), **copy.deepcopy(sec.get(key) or {})}
    if variant is None:
        return s
    if variant not in (s["variants"] or {}):
        raise ConfigError(f"unknown DensePhrases variant {variant!r}; methods.{NAME}.variants defines: "
                          f"{', '.join(s['variants'] or {}) or '(none)'}")
    s.update(copy.deepcopy(s["variant_overrides"] or {}))
    for key, value in copy.deepcopy(s["variants"][variant]).items():
        s[key] = {**s[key], **value} if isinstance(s.get(key), dict) and isinstance(value, dict) else value
    return s


def variants(s: Mapping[str, Any]) -> list[str]:
    """The variants the plan trains: none when no dataset evaluates them (``variant_datasets`` empty)."""
    return list(s.get("variants") or {}) if s.get("variant_datasets") else []


def model_id(v: str | None) -> str:
    """Job id and system id of a model: ``densephrases`` or ``densephrases.<variant>``."""
    return NAME if v is None else f"{NAME}.{v}"


def _sys(mid: str, suffix: str) -> str:
    """A system of model ``mid``: ``densephrases.<suffix>`` for the main model, ``densephrases.<v>-<suffix>``."""
    return f"{mid}.{suffix}" if mid == NAME else f"{mid}-{suffix}"


def check(cfg: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    m = f"methods.{NAME}"
    for key in [s["train_dataset"], *s["datasets"], *s["rc_datasets"]]:
        if key not in cfg["datasets"]:
            raise ConfigError(f"{m}: unknown dataset {key!r}; config key datasets defines: {', '.join(cfg['datasets'])}",
                              fix=f"add datasets.{key} or remove it from {m}")
    if s["distill"] and not (cfg.get("reader") and cfg["reader"].get("enabled", True)):
        raise ConfigError(f"{m}.distill is true but the config has no enabled reader section (the distillation "
                          "teacher is the harness's extractive reader)", fix=f"set {m}.distill: false or add reader:")
    unused = [d for d in s["variant_datasets"] if d not in (*s["datasets"], *s["rc_datasets"])]
    if unused:
        raise ConfigError(f"{m}.variant_datasets: {', '.join(unused)} is in neither {m}.datasets nor "
                          f"{m}.rc_datasets, so no variant would be evaluated there",
                          fix=f"add it to {m}.datasets or {m}.rc_datasets, or remove it from {m}.variant_datasets")
    if s["negatives"] not in ("none", "inbatch", "prebatch"):
        raise ConfigError(f"{m}.negatives: {s['negatives']!r} is not one of none, inbatch, prebatch")


# --------------------------------------------------------------------------------------------
# torch helpers


def _torch(s: Mapping[str, Any]):
    import torch

    torch.set_num_threads(int(s.get("torch_threads", 2)))
    return torch


def _quiet() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def prepare(s: Mapping[str, Any], text: str) -> str:
    """The question as the model reads it: one trailing '?' removed, truecased when all lower-case."""
    from harness.evaluate.qa import prepare_question

    return prepare_question(text, strip_qmark=bool(s["strip_question_mark"]), truecase=bool(s["truecase"]))


class Window(NamedTuple):
    """One tokenised passage window: ids, the text-token mask, each token's char span in the text."""

    doc: int                 # index of the passage in the list given to :func:`windows`
    ids: list[int]
    text: list[bool]         # token is a passage-text token (not title, [CLS], [SEP], padding)
    offsets: list[tuple[int, int]]   # char span in the passage text (text tokens only)


def windows(tok, docs: Sequence[Doc], max_len: int, stride: int, title: bool = True) -> list[Window]:
    """Every passage as windows of ``max_len`` tokens ([CLS] title [SEP] text [SEP]); a passage
    longer than one window is strided (``stride`` tokens of overlap), never cut."""
    out: list[Window] = []
    for start in range(0, len(docs), 256):
        chunk = docs[start:start + 256]
        firsts = [d.title if (title and d.title) else "" for d in chunk]
        texts = [d.text for d in chunk]
        enc = tok(firsts, texts, truncation="only_second", max_length=max_len, stride=stride,
                  return_overflowing_tokens=True, return_offsets_mapping=True, padding=False)
        for w in range(len(enc["input_ids"])):
            seq = enc.sequence_ids(w)
            offs = enc["offset_mapping"][w]
            text = [sid == 1 and offs[t][1] > offs[t][0] for t, sid in enumerate(seq)]
            out.append(Window(start + enc["overflow_to_sample_mapping"][w], list(enc["input_ids"][w]), text,
                              [tuple(o) if text[t] else (0, 0) for t, o in enumerate(offs)]))
    return out


def _pad(torch, wins: Sequence[Window], pad_id: int):
    n = max(len(w.ids) for w in wins)
    ids = torch.full((len(wins), n), pad_id, dtype=torch.long)
    att = torch.zeros((len(wins), n), dtype=torch.long)
    mask = torch.zeros((len(wins), n), dtype=torch.bool)
    for i, w in enumerate(wins):
        ids[i, :len(w.ids)] = torch.tensor(w.ids)
        att[i, :len(w.ids)] = 1
        mask[i, :len(w.ids)] = torch.tensor(w.text)
    return ids, att, mask


# --------------------------------------------------------------------------------------------
# the model


class PhraseModel:
    """M_p, M_q,start, M_q,end (one encoder when ``shared_encoder``), the filter layer, the tokenizer."""

    def __init__(self, s: Mapping[str, Any], phrase, q_start, q_end, tok, filt) -> None:
        self.s, self.phrase, self.q_start, self.q_end, self.tok, self.filter = s, phrase, q_start, q_end, tok, filt
        self.dim = int(phrase.config.hidden_size)
        self.split = bool(s["split_vectors"])
        self.shared = bool(s["shared_encoder"])

    @classmethod
    def from_backbone(cls, cfg: Mapping[str, Any], s: Mapping[str, Any]) -> PhraseModel:
        from harness.models.backbones import load_encoder, load_tokenizer

        torch = _torch(s)
        _quiet()
        phrase = load_encoder(cfg, s["backbone"])
        if s["shared_encoder"]:
            qs = qe = phrase
        else:
            qs, qe = load_encoder(cfg, s["backbone"]), load_encoder(cfg, s["backbone"])
        filt = torch.nn.Linear(int(phrase.config.hidden_size), 2)
        model = cls(s, phrase, qs, qe, load_tokenizer(cfg, s["backbone"]), filt)
        if s["freeze_embeddings"]:  # the authors' code: word embeddings frozen
            for enc in model.encoders():
                enc.get_input_embeddings().weight.requires_grad_(False)
        return model

    def encoders(self) -> list:
        return list(dict.fromkeys([self.phrase, self.q_start, self.q_end]))  # unique, in order

    @classmethod
    def load(cls, s: Mapping[str, Any], folder: Path) -> PhraseModel:
        import torch
        from transformers import AutoModel, AutoTokenizer

        _torch(s)
        _quiet()
        folder = Path(folder)
        info = json.loads((folder / INFO_FILE).read_text())
        phrase = AutoModel.from_pretrained(folder / ENCODERS[0])
        if info["shared_encoder"]:
            qs = qe = phrase
        else:
            qs, qe = (AutoModel.from_pretrained(folder / e) for e in ENCODERS[1:])
        filt = torch.nn.Linear(int(phrase.config.hidden_size), 2)
        filt.load_state_dict(torch.load(folder / HEADS_FILE, map_location="cpu"))
        s = {**s, "shared_encoder": info["shared_encoder"], "split_vectors": info["split_vectors"]}
        return cls(s, phrase, qs, qe, AutoTokenizer.from_pretrained(folder / ENCODERS[0]), filt)

    def save(self, folder: Path) -> None:
        import torch

        folder = Path(folder)
        self.phrase.save_pretrained(folder / ENCODERS[0])
        self.tok.save_pretrained(folder / ENCODERS[0])
        if not self.shared:
            self.q_start.save_pretrained(folder / ENCODERS[1])
            self.q_end.save_pretrained(folder / ENCODERS[2])
        torch.save(self.filter.state_dict(), folder / HEADS_FILE)
        (folder / INFO_FILE).write_text(json.dumps({"shared_encoder": self.shared, "split_vectors": self.split,
                                                    "dim": self.dim}, indent=1))

    def modules(self) -> list:
        return [*self.encoders(), self.filter]

    def train(self, mode: bool = True) -> None:
        for m in self.modules():
            m.train(mode)

    def to(self, device: str) -> None:
        for m in self.modules():
            m.to(device)

    @property
    def device(self):
        return next(self.phrase.parameters()).device

    # ---- passages
    def token_vectors(self, ids, att):
        """h_1..h_m of every window [B, T, d]."""
        return self.phrase(input_ids=ids.to(self.device), attention_mask=att.to(self.device)).last_hidden_state

    def start_end(self, h):
        """(start vectors, end vectors) of the tokens: (h, h), or the two halves when split."""
        if self.split:
            half = self.dim // 2
            return h[..., :half], h[..., half:]
        return h, h

    def filter_logits(self, h):
        return self.filter(h)  # [B, T, 2]: start, end

    # ---- questions
    def questions(self, texts: Sequence[str]):
        """(q_start, q_end) [B, d] (d/2 each when split), from the prepared question texts."""
        torch = _torch(self.s)
        enc = self.tok(list(texts), padding=True, truncation=True, max_length=int(self.s["q_max_len"]),
                       return_tensors="pt").to(self.device)
        if self.shared:
            h = self.phrase(**enc).last_hidden_state
            last = enc["attention_mask"].sum(1) - 1
            qs, qe = h[:, 0], h[torch.arange(h.shape[0], device=h.device), last]
        else:
            qs = self.q_start(**enc).last_hidden_state[:, 0]
            qe = self.q_end(**enc).last_hidden_state[:, 0]
        if self.split:
            half = self.dim // 2
            qs, qe = qs[:, :half], qe[:, half:]
        return qs, qe

    def index_queries(self, texts: Sequence[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """Question vectors for the phrase index over h (d dims): split halves are zero-padded."""
        torch = _torch(self.s)
        out_s, out_e = [], []
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                qs, qe = self.questions(texts[i:i + batch_size])
                if self.split:
                    z = torch.zeros_like(qs)
                    qs, qe = torch.cat([qs, z], 1), torch.cat([z, qe], 1)
                out_s.append(qs.float().cpu().numpy())
                out_e.append(qe.float().cpu().numpy())
        if not out_s:
            return np.zeros((0, self.dim), np.float32), np.zeros((0, self.dim), np.float32)
        return np.concatenate(out_s), np.concatenate(out_e)

    def n_params(self) -> int:
        return sum(p.numel() for m in self.modules() for p in m.parameters())


# --------------------------------------------------------------------------------------------
# reading comprehension: the best span of one passage


def best_span(zs: np.ndarray, ze: np.ndarray, valid: np.ndarray, max_len: int) -> tuple[int, int, float] | None:
    """argmax over start <= end < start + L of zs[start] + ze[end] among valid tokens."""
    idx = np.flatnonzero(valid)
    if idx.size == 0:
        return None
    n = zs.shape[0]
    best = None
    for off in range(max_len):
        i = idx[idx + off < n]
        j = i + off
        ok = valid[j]
        if not ok.any():
            continue
        i, j = i[ok], j[ok]
        sc = zs[i] + ze[j]
        t = int(sc.argmax())
        if best is None or sc[t] > best[2]:
            best = (int(i[t]), int(j[t]), float(sc[t]))
    return best


class Scored(NamedTuple):
    """One window of a question's own passage, scored: start/end logits, valid tokens, filter logit."""

    zs: np.ndarray
    ze: np.ndarray
    valid: np.ndarray
    keep: np.ndarray          # max(start, end) filter logit of each token
    offsets: list[tuple[int, int]]
    text: str


def score_passages(model: PhraseModel, questions: Sequence[str], docs: Sequence[Doc], s: Mapping[str, Any]
                   ) -> list[list[Scored]]:
    """Every window of each question's own passage, scored against the question (D = {p})."""
    torch = _torch(s)
    out: list[list[Scored]] = [[] for _ in questions]
    bs = int(s["encode_batch_size"])
    model.train(False)
    with torch.inference_mode():
        for b in range(0, len(questions), bs):
            qb, db = list(questions[b:b + bs]), list(docs[b:b + bs])
            qs, qe = model.questions(qb)
            wins = windows(model.tok, db, int(s["p_max_len"]), int(s["doc_stride"]))
            ids, att, mask = _pad(torch, wins, model.tok.pad_token_id or 0)
            h = model.token_vectors(ids, att)
            hs, he = model.start_end(h)
            keep = model.filter_logits(h).max(-1).values.float().cpu().numpy()
            for w, win in enumerate(wins):
                zs = (hs[w] @ qs[win.doc]).float().cpu().numpy()
                ze = (he[w] @ qe[win.doc]).float().cpu().numpy()
                out[b + win.doc].append(Scored(zs, ze, mask[w].numpy(), keep[w], win.offsets, db[win.doc].text))
    return out


def rc_predict(scored: Sequence[Scored], max_len: int, threshold: float | None = None) -> tuple[str, float]:
    """The best phrase over the windows of one passage; with ``threshold``, only tokens the filter
    keeps (as in the phrase dump) may start or end it."""
    best = ("", float("-inf"))
    for w in scored:
        valid = w.valid if threshold is None else (w.valid & (w.keep > threshold))
        span = best_span(w.zs, w.ze, valid, max_len)
        if span is not None and span[2] > best[1]:
            best = (w.text[w.offsets[span[0]][0]:w.offsets[span[1]][1]], span[2])
    return best


def read_passages(model: PhraseModel, questions: Sequence[str], docs: Sequence[Doc], s: Mapping[str, Any],
                  threshold: float | None = None) -> list[tuple[str, float]]:
    """D = {p}: the best phrase of each question's own passage (all windows of it), and its score."""
    L = int(s["max_phrase_len"])
    return [rc_predict(sc, L, threshold) for sc in score_passages(model, questions, docs, s)]


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
    from harness.reader import find_answer

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


def teacher_logits(cfg: Mapping[str, Any], reader_dir: Path, exs: Sequence[Example], batch: int = 16
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The reader's start/end logits on each example, at the example window's positions (NaN where
    the reader does not see the token: its window is shorter). Mapped by character offset."""
    import torch

    from harness.reader import Reader

    reader = Reader.load(Context(cfg, "reader"), reader_dir)
    reader.train(False)
    out = []
    with torch.inference_mode():
        for b in range(0, len(exs), batch):
            chunk = exs[b:b + batch]
            enc, offsets, mask, shifts = reader.batch([e.question for e in chunk], [e.doc for e in chunk])
            _, st, en = reader.forward(enc)
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
    neg = torch.finfo(student.dtype).min
    ls = torch.log_softmax(student.masked_fill(~mask, neg), -1)
    lt = torch.log_softmax(teacher.masked_fill(~mask, neg), -1)
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
    """§4.1's augmentation (harness/models/qg.py): named entities of the training passages as candidate
    answers, the seq2seq generator of ``qg.generator``, kept when the reader (the cross-attention
    model) answers the generated question exactly. Fails, naming why, where the models are absent."""
    from harness.models import qg
    from harness.reader import Reader

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


def train(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from harness import train as loop

    torch = _torch(s)
    seed = int(cfg["seed"])
    loop.set_seed(seed)
    model = PhraseModel.from_backbone(cfg, s)
    docs = {d.id: d for d in store.iter_corpus(inputs["data"])}
    questions = train_questions(cfg, s)
    qg_stats = None
    if s["qg"]:
        generated, qg_stats = generate_questions(cfg, s, inputs, [docs[g] for g in dict.fromkeys(
            g for q in questions for g in (q.gold or []) if g in docs)])
        questions = [*generated, *questions]
    exs, stats = examples_of(s, model.tok, questions, docs)
    if len(exs) < 2:
        raise DataError(f"{inputs['data']}: {len(exs)} training question(s) with an answer in their gold passage "
                        f"({stats}); DensePhrases cannot train")
    teacher = teacher_logits(cfg, inputs["reader"], exs) if s["distill"] else None
    index_of = {e.qid: i for i, e in enumerate(exs)}
    ts = loop.TrainSettings.from_config(s, log_every=20)
    total = loop.total_steps(len(exs), ts.batch_size, ts.epochs, ts.grad_accum)
    w = s["loss_weights"]
    prebatch_from = math.floor(float(s["prebatch_start"]) * total) if s["negatives"] == "prebatch" else None
    queue: deque = deque(maxlen=int(s["prebatch_batches"]))
    ce = torch.nn.functional.cross_entropy
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    pad = model.tok.pad_token_id or 0
    counts = {"prebatch_steps": 0}

    def step_fn(batch: list[Example], step: int, rng: random.Random):
        ids, att, mask = _pad(torch, [e.window for e in batch], pad)
        h = model.token_vectors(ids, att)
        dev = h.device
        mask = mask.to(dev)
        hs, he = model.start_end(h)
        qs, qe = model.questions([e.question for e in batch])
        neg = torch.finfo(h.dtype).min
        zs = torch.einsum("btd,bd->bt", hs, qs).masked_fill(~mask, neg)
        ze = torch.einsum("btd,bd->bt", he, qe).masked_fill(~mask, neg)
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
            n = zs.shape[1]
            ts_, te_ = (np.full((len(batch), n), np.nan, np.float32) for _ in range(2))
            for k, e in enumerate(batch):
                a, b = teacher[index_of[e.qid]]
                ts_[k, :len(a)], te_[k, :len(b)] = a, b
            t_s, t_e = torch.from_numpy(ts_).to(dev), torch.from_numpy(te_).to(dev)
            both = mask & ~torch.isnan(t_s)
            l_kl = (_kl(torch, zs, torch.nan_to_num(t_s), both, s["distill_direction"])
                    + _kl(torch, ze, torch.nan_to_num(t_e), both, s["distill_direction"])) / 2
            loss = loss + float(w["distill"]) * l_kl
            parts["distill"] = float(l_kl.detach())
        if float(w["filter"]) > 0:
            logits = model.filter_logits(h)
            target = torch.zeros_like(logits)
            ar = torch.arange(len(batch), device=dev)
            target[ar, gs, 0] = 1.0
            target[ar, ge, 1] = 1.0
            pw = torch.tensor(float(mask.shape[1]), device=dev)
            l_f = bce(logits, target, pos_weight=pw, reduction="none")
            l_f = (l_f * mask[..., None]).sum() / (mask.sum() * 2).clamp(min=1)
            loss = loss + float(w["filter"]) * l_f
            parts["filter"] = float(l_f.detach())
        return loss, parts

    params = [p for m in model.modules() for p in m.parameters() if p.requires_grad]
    info = loop.train_loop(exs, step_fn, params, settings=ts, seed=seed, out=out, save=model.save,
                           modules=model.modules())
    return {"steps": info["steps"], "examples": len(exs), **stats, **counts, "prebatch_from_step": prebatch_from,
            "seconds": info["seconds"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
            "backbone": s["backbone"], "params": model.n_params(), "distill_teacher": "reader" if teacher else None,
            "negatives": s["negatives"], "batch_size": ts.batch_size, "question_generation": qg_stats}


# --------------------------------------------------------------------------------------------
# the filter threshold (App. E), tuned on dev questions


def em_of(pred: str, answers: Sequence[str], rule: str) -> bool:
    from harness.evaluate.qa import answer_em

    return bool(answer_em(pred, list(answers), rule))


def tune_threshold(cfg: Mapping[str, Any], s: Mapping[str, Any], model: PhraseModel) -> dict[str, Any]:
    """The highest threshold of ``filter.grid`` whose dev reading-comprehension EM stays at or above
    (1 - ``filter.tolerance``) x the unfiltered EM (a relative drop); ``filter.threshold`` fixes it instead."""
    f = s["filter"]
    if f.get("threshold") is not None:
        return {"threshold": float(f["threshold"]), "tuned": False}
    dev, where = dev_questions(cfg, s)
    folder = Context(cfg, NAME).data_dir(s["train_dataset"])
    needed = {g for q in dev for g in (q.gold or [])}
    docs = {d.id: d for d in store.iter_corpus(folder) if d.id in needed}
    dev = [q for q in dev if any(g in docs for g in (q.gold or []))][: int(f["dev_questions"])]
    if not dev:
        return {"threshold": None, "tuned": False, "why": f"no dev question with a gold passage in {where}"}
    scored = score_passages(model, [prepare(s, q.text) for q in dev],
                            [next(docs[g] for g in q.gold if g in docs) for q in dev], s)
    rule = cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    L = int(s["max_phrase_len"])

    def em(thr):
        return sum(em_of(rc_predict(sc, L, thr)[0], q.answers, rule) for sc, q in zip(scored, dev)) / len(dev)

    base = em(None)
    total = sum(int(w.valid.sum()) for sc in scored for w in sc)
    grid = []
    for thr in sorted(float(x) for x in f["grid"]):
        kept = sum(int((w.valid & (w.keep > thr)).sum()) for sc in scored for w in sc)
        grid.append({"threshold": thr, "em": em(thr), "kept": kept / max(1, total)})
    floor = base * (1.0 - float(f["tolerance"]))  # relative: "does not drop significantly" (App. E)
    ok = [g for g in grid if g["em"] >= floor and g["kept"] > 0]
    chosen = max(ok, key=lambda g: g["threshold"]) if ok and base > 0 else None
    why = None if chosen else ("dev EM is 0 without the filter: nothing to keep it at; no token filtered" if base == 0
                               else "no threshold of the grid keeps dev EM within the tolerance; no token filtered")
    return {"threshold": chosen["threshold"] if chosen else None, "tuned": True, "why": why, "dev": where,
            "dev_questions": len(dev), "em_unfiltered": base, "grid": grid,
            "kept_fraction_dev": chosen["kept"] if chosen else 1.0}


# --------------------------------------------------------------------------------------------
# the phrase dump and its indexes (§5, App. E)


def gold_docs(folder: Path, split: str = "test") -> set[str]:
    """D_small: the gold passages of the split's questions."""
    return {g for q in store.read_queries(folder, split) for g in (q.gold or [])}


def dump_corpus(model: PhraseModel, s: Mapping[str, Any], docs: Sequence[Doc], out: Path,
                threshold: float | None) -> dict[str, Any]:
    """Every kept token vector of every passage into the dump at ``out`` (see the module doc)."""
    from tqdm import tqdm

    from harness.indexes.phrase_dump import DumpWriter

    torch = _torch(s)
    model.train(False)
    writer = DumpWriter(out, model.dim, codec=s["dump_codec"])
    bs = int(s["encode_batch_size"])
    seen = kept = 0
    pad = model.tok.pad_token_id or 0
    wins_all = windows(model.tok, docs, int(s["dump_max_len"]), int(s["dump_stride"]))
    by_doc: dict[int, list[Window]] = {}
    for w in wins_all:
        by_doc.setdefault(w.doc, []).append(w)
    order = sorted(by_doc)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in tqdm(range(0, len(order), bs), desc="dump", unit="batch", mininterval=10.0):
            group = order[b:b + bs]
            wins = [w for d in group for w in by_doc[d]]
            vecs, keeps = [], []
            for c in range(0, len(wins), bs):
                ids, att, _ = _pad(torch, wins[c:c + bs], pad)
                h = model.token_vectors(ids, att)
                vecs.extend(h.float().cpu().numpy())
                keeps.extend(model.filter_logits(h).max(-1).values.float().cpu().numpy())
            at = 0
            for d in group:
                best: dict[tuple[int, int], tuple[int, np.ndarray, float]] = {}
                for w in by_doc[d]:
                    toks = [t for t, ok in enumerate(w.text) if ok]
                    if toks:
                        lo, hi = toks[0], toks[-1]
                        for t in toks:
                            ctx_ = min(t - lo, hi - t)   # the window where the token has most context
                            key = w.offsets[t]
                            if key not in best or ctx_ > best[key][0]:
                                best[key] = (ctx_, vecs[at][t], float(keeps[at][t]))
                    at += 1
                spans = sorted(best)
                seen += len(spans)
                rows = [k for k in spans if threshold is None or best[k][2] > threshold]
                kept += len(rows)
                if rows:
                    writer.add(docs[d].id, np.stack([best[k][1] for k in rows]).astype(np.float32),
                               np.asarray(rows, dtype=np.int32).reshape(-1, 2))
    info = writer.close()
    return {**info, "tokens_seen": seen, "tokens_kept": kept, "kept_fraction": kept / max(1, seen),
            "encode_seconds": round(time.perf_counter() - t0, 3)}


def index_specs(s: Mapping[str, Any], gold_only: bool) -> dict[str, str]:
    """Index name -> spec: ``main`` (methods.densephrases.index) and the ``index_variants``
    (Flat, the OPQ/IVF-PQ release); a D_small index (variants of Table 6): Flat only."""
    if gold_only:
        return {"main": s["dsmall"]["index"]}
    return {"main": s["index"], **dict(s["index_variants"] or {})}


def build(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Dump the corpus (all passages, or D_small: the gold passages of the test questions) with the
    model's phrase encoder and filter, and build the phrase indexes over it."""
    from harness.indexes import build_index
    from harness.indexes.phrase_dump import PhraseDump
    from harness.meta import write_meta

    v = job.params.get("variant")
    s = settings(ctx.cfg, v)
    model = PhraseModel.load(s, inputs["model"])
    gold_only = bool(job.params.get("gold_only"))
    docs = list(store.iter_corpus(inputs["data"]))
    if gold_only:
        keep = gold_docs(inputs["data"])
        docs = [d for d in docs if d.id in keep]
    tune = tune_threshold(ctx.cfg, s, model)
    t0 = time.perf_counter()
    dump = dump_corpus(model, s, docs, out / DUMP_DIR, tune["threshold"])
    dump_seconds = time.perf_counter() - t0
    pd = PhraseDump.open(out / DUMP_DIR)
    opts = {"max_phrase_len": int(s["max_phrase_len"]), "train_fraction": float(s["train_fraction"]),
            "seed": int(ctx.cfg["seed"]), "nprobe": s["nprobe"]}
    built: dict[str, Any] = {}
    main_spec = None
    for name, spec in index_specs(s, gold_only).items():
        t1 = time.perf_counter()
        idx = build_index(spec, pd, **opts)
        secs = time.perf_counter() - t1
        folder = out / "indexes" / name
        folder.mkdir(parents=True, exist_ok=True)
        idx.save(folder)
        write_meta(folder, "index", spec=idx.spec, seconds=secs,
                   extra={"nbytes": idx.nbytes, "build_seconds": round(secs, 4), "dump": DUMP_DIR})
        built[name] = {"spec": idx.spec, "nbytes": idx.nbytes, "build_seconds": round(secs, 4)}
        if name == "main":
            main_spec = idx.spec
    return {"spec": main_spec, "documents": len(docs), "gold_only": gold_only, "dump": dump,
            "dump_seconds": round(dump_seconds, 3), "filter": tune, "indexes": built, "variant": v}


# --------------------------------------------------------------------------------------------
# open-domain search (Eq. 10)


def load_phrase_index(index_dir: Path, name: str, s: Mapping[str, Any]):
    from harness.indexes import load_index

    folder = Path(index_dir) / "indexes" / name
    if not folder.is_dir():
        raise DataError(f"{folder} does not exist: the phrase index job built no {name!r} index",
                        fix=f"rebuild the index (methods.{NAME}.index / index_variants)")
    # the dump sits beside the indexes (the job's folder is moved into place after the build)
    return load_index(folder, nprobe=s["nprobe"], dump=Path(index_dir) / DUMP_DIR)


def phrase_answers(idx, qs: np.ndarray, qe: np.ndarray, s: Mapping[str, Any], texts: Mapping[str, str]
                   ) -> list[list[dict[str, Any]]]:
    """Top phrases per question: text, passage id, score, dump rows (best first)."""
    sr = s["search"]
    res = idx.search_phrases(qs, qe, int(sr["top_k"]), int(sr["phrases"]))
    out = []
    for phrases in res:
        row = []
        for p in phrases:
            docid = idx.dump.docids[int(p.doc_row)]
            a, b = int(idx.dump.offsets[p.start_row][0]), int(idx.dump.offsets[p.end_row][1])
            row.append({"text": texts[docid][a:b], "doc": docid, "score": float(p.score),
                        "start_row": int(p.start_row), "end_row": int(p.end_row)})
        out.append(row)
    return out


def passage_run(qids: Sequence[str], answers: Sequence[list[dict[str, Any]]], depth: int):
    """The passages of the top phrases, ranked by their best phrase (top-k passage accuracy)."""
    hits = {}
    for qid, phrases in zip(qids, answers):
        best: dict[str, float] = {}
        for p in phrases:
            best.setdefault(p["doc"], p["score"])
        hits[qid] = list(best.items())[:depth]
    return hits


def search_job(cfg: Mapping[str, Any], name: str, dataset: str, split: str = "test", variant: str | None = None,
               qs_model: bool = False) -> Job:
    """The phrase search of one model on one dataset: systems = the model's id for its main index,
    plus ``.flat`` / ``.opq``-style ids for the other indexes of the main model."""
    s = settings(cfg, variant)
    mid = f"{NAME}.qs" if qs_model else model_id(variant)
    base = model_id(variant)
    names = ["main"] if (variant is not None or qs_model) else list(index_specs(s, False))
    systems = tuple(mid if n == "main" else _sys(mid, n) for n in names)
    jid = mid if split == "test" else f"{mid}.{split}"
    m = f"methods.{name}"
    return Job("search", jid, name, "run_search", dataset, systems=systems, gpu=wants_gpu(cfg, name),
               params={"variant": variant, "split": split, "indexes": names, "qs": qs_model},
               keys=(f"{m}.search", f"{m}.nprobe", f"{m}.strip_question_mark", f"{m}.truecase", "evaluate.depth"),
               inputs={"data": Ref("data", dataset=dataset), "model": Ref("model", mid),
                       "index": Ref("index", base, dataset)}, mem_mb=4000)


def run_search(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    from harness.artifacts import write_run_with_meta
    from harness.io import write_jsonl

    v = job.params.get("variant")
    s = settings(ctx.cfg, v)
    split = job.params.get("split", "test")
    queries = store.read_queries(inputs["data"], split)
    texts = {d.id: d.text for d in store.iter_corpus(inputs["data"])}
    model = PhraseModel.load(s, inputs["model"])
    model.train(False)
    t0 = time.perf_counter()
    qs, qe = model.index_queries([prepare(s, q.text) for q in queries], int(s["encode_batch_size"]))
    enc_s = time.perf_counter() - t0
    info = {}
    for name, system in zip(job.params["indexes"], job.systems):
        idx = load_phrase_index(inputs["index"], name, s)
        t1 = time.perf_counter()
        answers = phrase_answers(idx, qs, qe, s, texts)
        secs = time.perf_counter() - t1
        write_jsonl(out / f"{system}{ANSWERS}", ({"id": q.id, "question": q.text, "prepared": prepare(s, q.text),
                                                  "prediction": a[0]["text"] if a else "", "phrases": a[:10]}
                                                 for q, a in zip(queries, answers)))
        hits = passage_run([q.id for q in queries], answers, int(ctx.cfg["evaluate"]["depth"]))
        write_run_with_meta(out / f"{system}.trec", hits, system=system,
                            meta={"dataset": job.dataset, "split": split, "index": idx.spec,
                                  "seconds": round(enc_s + secs, 3)})
        info[system] = {"index": idx.spec, "search_seconds": round(secs, 3)}
        print(f"{system}/{job.dataset}: {len(queries)} questions searched in {idx.spec} ({secs:.1f}s)")
    return {"queries": len(queries), "encode_seconds": round(enc_s, 3), "systems": info}


# --------------------------------------------------------------------------------------------
# query-side fine-tuning (§6, Eq. 11)


def _gold_mask(phrases: Sequence[dict[str, Any]], answers: Sequence[str], rule: str) -> list[bool]:
    return [em_of(p["text"], answers, rule) for p in phrases]


def open_em(cfg: Mapping[str, Any], s: Mapping[str, Any], model: PhraseModel, idx, queries: Sequence[Query],
            texts: Mapping[str, str], rule: str) -> float:
    qs, qe = model.index_queries([prepare(s, q.text) for q in queries], int(s["encode_batch_size"]))
    ans = phrase_answers(idx, qs, qe, s, texts)
    return sum(em_of(a[0]["text"] if a else "", q.answers, rule) for q, a in zip(queries, ans)) / max(1, len(queries))


def train_qs(cfg: Mapping[str, Any], s: Mapping[str, Any], inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Eq. 11 over the training questions of the training set: the index of the base model's dump
    (fixed) is re-searched with the current question encoders at the start of every epoch."""
    import shutil

    from harness import train as loop

    torch = _torch(s)
    q = s["qs"]
    seed = int(cfg["seed"])
    loop.set_seed(seed)
    model = PhraseModel.load(s, inputs["model"])
    for p in model.phrase.parameters():
        p.requires_grad_(model.shared)  # only the question encoders change (shared: the one encoder)
    for p in model.filter.parameters():
        p.requires_grad_(False)
    idx = load_phrase_index(inputs["index"], "main", s)
    texts = {d.id: d.text for d in store.iter_corpus(inputs["data"])}
    rule = cfg["datasets"][s["train_dataset"]].get("answer_rule", "dpr-string")
    from harness.train import subsample

    questions = subsample(train_questions(cfg, s), q["max_train_questions"], seed)
    dev = dev_questions(cfg, s)[0][: int(q["dev_questions"])]
    ts = loop.TrainSettings(epochs=1, batch_size=int(q["batch_size"]), lr=float(q["lr"]),
                            weight_decay=float(q["weight_decay"]), warmup_ratio=0.0, grad_clip=1.0,
                            device=s.get("device", "cpu"), log_every=20)
    state: dict[str, Any] = {"cands": {}, "skipped": 0}
    ce_q = q["loss"]

    def research():
        model.train(False)
        qs, qe = model.index_queries([prepare(s, x.text) for x in questions], int(s["encode_batch_size"]))
        ans = phrase_answers(idx, qs, qe, {**s, "search": {**s["search"], "phrases": int(q["top_k"])}}, texts)
        state["cands"] = {}
        for x, a in zip(questions, ans):
            gold = _gold_mask(a, x.answers, rule)
            if any(gold):
                state["cands"][x.id] = ([p["start_row"] for p in a], [p["end_row"] for p in a], gold)
        model.train(True)
        return len(state["cands"])

    history = []
    best = {"em": -1.0, "epoch": 0}
    best_dir = out / "best"
    model.train(False)
    em0 = open_em(cfg, s, model, idx, dev, texts, rule)
    history.append({"epoch": 0, "dev_em": em0, "with_gold": None})
    best.update(em=em0, epoch=0)
    model.save(best_dir)
    params = [p for m in model.encoders() for p in m.parameters() if p.requires_grad]  # the phrase encoder is frozen

    def neg_mml(scores, gold):
        """-log of the softmax mass of the gold phrases among the candidates (Eq. 11)."""
        return torch.logsumexp(scores, 0) - torch.logsumexp(scores.masked_fill(~gold, torch.finfo(scores.dtype).min), 0)

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
            loss = loss + neg_mml(a + b, g)
            if ce_q == "code":  # + start-only and end-only marginal likelihoods (the authors' code)
                loss = loss + neg_mml(a, g) + neg_mml(b, g)
        return loss / len(batch), {}

    for epoch in range(1, int(q["epochs"]) + 1):
        n_gold = research()
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
                        "loss_last": info["loss_last"]})
        print(f"query-side fine-tuning epoch {epoch}: dev EM {em:.4f} ({n_gold} questions with a gold phrase)")
        if em > best["em"]:
            best.update(em=em, epoch=epoch)
            shutil.rmtree(best_dir, ignore_errors=True)
            model.save(best_dir)
    for item in best_dir.iterdir():
        shutil.move(str(item), str(out / item.name))
    best_dir.rmdir()
    return {"history": history, "best_epoch": best["epoch"], "best_dev_em": best["em"],
            "train_questions": len(questions), "dev_questions": len(dev), "top_k": int(q["top_k"]),
            "index": idx.spec, "loss": ce_q}


# --------------------------------------------------------------------------------------------
# measure jobs: EM/F1 of the answers, reading comprehension, #Q/s and storage, Table C.3


def _metric(system: str, dataset: str, values: Mapping[str, tuple[float, str, str]], device: str = "cpu",
            not_run: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    from harness.meta import hardware

    return {"system": system, "dataset": dataset,
            "values": {k: {"value": v, "unit": u, "device": device, "what": w} for k, (v, u, w) in values.items()},
            "not_run": dict(not_run or {}), "hardware": hardware(), **extra}


def _rule_text(rule: str) -> str:
    return ("regex EM (CuratedTREC: the answer is a case-insensitive regex matched at the start of the prediction)"
            if rule == "dpr-regex" else "EM and F1 as SQuAD v1.1 (lower-case, no punctuation, no a/an/the, "
                                        "white space squeezed; max over gold answers)")


def measure_em(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """EM and F1 of the top-1 phrase of every answer system on the dataset's test questions."""
    from harness.evaluate.qa import f1_score
    from harness.io import iter_jsonl, write_json

    d = str(job.dataset)
    rule = ctx.cfg["datasets"][d].get("answer_rule", "dpr-string")
    gold = {q.id: q.answers for q in store.read_queries(inputs["data"], "test")}
    for i, system in enumerate(job.systems):
        path = inputs[f"run_{i}"] / f"{system}{ANSWERS}"
        if not path.exists():
            raise DataError(f"{path} does not exist", fix="re-run the search job that writes it")
        rows = [r for r in iter_jsonl(path) if gold.get(r["id"])]
        em = sum(em_of(r["prediction"], gold[r["id"]], rule) for r in rows) / max(1, len(rows))
        f1 = sum(f1_score(r["prediction"], gold[r["id"]]) for r in rows) / max(1, len(rows)) \
            if rule != "dpr-regex" else None
        values = {"em": (em, "ratio", f"top-1 phrase {_rule_text(rule)}; {len(rows)} test questions")}
        if f1 is not None:
            values["f1"] = (f1, "ratio", f"top-1 phrase F1 (SQuAD v1.1); {len(rows)} test questions")
        write_json(out / f"{system}.json", _metric(system, d, values, questions=len(rows), answers=str(path)))
        print(f"{system}/{d}: EM {em:.4f}" + (f" F1 {f1:.4f}" if f1 is not None else "") + f" on {len(rows)} questions")
    return {}


def measure_rc(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Reading comprehension (D = {p}; Tables 2, 5 and 6's first column): each test question against
    its own gold passage, EM/F1 of the best phrase (start <= end < start + L, all windows)."""
    from harness.evaluate.qa import f1_score
    from harness.io import write_json

    d = str(job.dataset)
    rule = ctx.cfg["datasets"][d].get("answer_rule", "dpr-string")
    base = settings(ctx.cfg)
    queries = [q for q in store.read_queries(inputs["data"], "test") if q.answers and q.gold]
    needed = {g for q in queries for g in q.gold}
    docs = {x.id: x for x in store.iter_corpus(inputs["data"]) if x.id in needed}
    queries = [q for q in queries if any(g in docs for g in q.gold)]
    n_all = len(queries)
    if base["max_test_questions"] and base["max_test_questions"] < len(queries):
        keep = sorted(random.Random(ctx.cfg["seed"]).sample(range(len(queries)), int(base["max_test_questions"])))
        queries = [queries[i] for i in keep]
    for i, (system, v) in enumerate(zip(job.systems, job.params["variants"])):
        s = settings(ctx.cfg, v)
        model = PhraseModel.load(s, inputs[f"model_{i}"])
        preds = read_passages(model, [prepare(s, q.text) for q in queries],
                              [next(docs[g] for g in q.gold if g in docs) for q in queries], s)
        em = sum(em_of(p, q.answers, rule) for (p, _), q in zip(preds, queries)) / max(1, len(queries))
        f1 = sum(f1_score(p, q.answers) for (p, _), q in zip(preds, queries)) / max(1, len(queries))
        what = (f"reading comprehension (D = {{p}}: the gold passage of each question, query-agnostic phrase "
                f"vectors); {len(queries)} of {n_all} test questions")
        write_json(out / f"{system}.json", _metric(system, d, {"em": (em, "ratio", what), "f1": (f1, "ratio", what)},
                                                   questions=len(queries), variant=v,
                                                   predictions=[{"id": q.id, "prediction": p} for (p, _), q
                                                                in zip(preds[:50], queries)]))
        print(f"{system}/{d}: reading-comprehension EM {em:.4f} F1 {f1:.4f} ({len(queries)} questions)")
    return {}


def _peak_rss_bytes() -> int:
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def _time_child(cfg: dict, kind: str, paths: dict, questions: list[str], k: int) -> dict[str, Any]:
    """Run in a fresh process (peak RAM of one system alone): load, time with densephrases-qps."""
    from harness.timing import PROTOCOLS, run_protocol

    protocol = PROTOCOLS.get("densephrases-qps")
    if kind == "densephrases":
        s = settings(cfg, None)
        model = PhraseModel.load(s, Path(paths["model"]))
        model.train(False)
        idx = load_phrase_index(Path(paths["index"]), "main", s)

        def enc(texts, _o):
            return model.index_queries([prepare(s, t) for t in texts], len(texts))

        def srch(e, kk, _o):
            return idx.search_phrases(e[0], e[1], int(s["search"]["top_k"]), 1)
    else:
        from harness.methods import dpr
        from harness.reader import Reader

        dctx = Context(cfg, "dpr")
        searcher = dpr.Searcher(dctx, Path(paths["dpr_index"]), Path(paths["dpr_model"]))
        reader = Reader.load(Context(cfg, "reader"), Path(paths["reader"]))
        reader.train(False)
        docs = {x.id: x for x in store.iter_corpus(Path(paths["data"]))}
        top = int(cfg["reader"].get("top_k", 20))

        def enc(texts, _o):
            return texts, searcher.encode(texts)

        def srch(e, kk, _o):
            texts, vecs = e
            _, rows = searcher.search(vecs, top)
            return [reader.predict(q, [docs[searcher.docids[r]] for r in row if r >= 0]) for q, row in zip(texts, rows)]

    res = run_protocol(protocol, questions, encode=enc, search=srch, k=k, device="cpu")
    return {"timing": res.to_dict(), "peak_rss": _peak_rss_bytes(),
            "qps": res.queries / max(1e-12, sum(res.samples["encode+search"]))}


def _in_child(fn, *args):
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def measure_speed(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Tables 1 and A.1 on one corpus and machine: #Q/s (protocol densephrases-qps: 1,000 questions,
    all if fewer, batches of 64, the first 5 excluded, encoding + search inside the timer, no HTTP),
    peak RAM of each system in its own process, storage and indexing time; DensePhrases beside DPR +
    the harness's reader (DPR's top ``reader.top_k`` passages read question by question)."""
    from harness.indexes.faiss_dense import INDEX_FILE
    from harness.io import write_json
    from harness.meta import folder_bytes, read_meta, resolve_device

    s = settings(ctx.cfg)
    d = str(job.dataset)
    t = s["timing"]
    split = t["split"] if (inputs["data"] / store.queries_file(t["split"])).exists() else "test"
    questions = [q.text for q in store.read_queries(inputs["data"], split)][: int(t["questions"])]
    corpus_bytes = (inputs["data"] / "corpus.jsonl").stat().st_size
    _, why_gpu = resolve_device("cuda")
    gpu_note = {"qps_gpu": why_gpu or "GPU timing of this job not implemented",
                "gpu_memory_bytes": why_gpu or "GPU memory of this job not implemented"}
    k = int(s["search"]["top_k"])
    paths = {"model": str(inputs["model"]), "index": str(inputs["index"]), "data": str(inputs["data"])}
    dp = _in_child(_time_child, dict(ctx.cfg), "densephrases", paths, questions, k)
    imeta = read_meta(inputs["index"])
    main = imeta.get("indexes", {}).get("main", {})
    dump_bytes = folder_bytes(inputs["index"] / DUMP_DIR)
    idx_bytes = folder_bytes(inputs["index"] / "indexes" / "main")
    n = dp["timing"]["queries"]
    common = f"protocol densephrases-qps on {n} {split} questions of {d}"
    values = {
        "qps_cpu": (dp["qps"], "Q/s", f"{common}: question encoding + phrase search (top-1 phrase) inside the timer"),
        "storage_bytes": (idx_bytes + dump_bytes + corpus_bytes, "B",
                          (f"phrase index ({main.get('spec')}) {idx_bytes:,} B + phrase dump ({s['dump_codec']}, "
                           f"read to re-score span candidates) {dump_bytes:,} B + passages {corpus_bytes:,} B")),
        "index_bytes": (idx_bytes, "B", f"the faiss phrase index alone ({main.get('spec')})"),
        "indexing_seconds": (float(imeta.get("dump_seconds", 0)) + float(main.get("build_seconds") or 0), "s",
                             "phrase dump (encoding every passage) + index training and adding"),
        "ram_bytes": (dp["peak_rss"], "B", ("peak resident memory of a process that loads the model and index "
                                            "and runs the timing")),
    }
    write_json(out / f"{NAME}.speed.json", _metric(f"{NAME}.speed", d, values, not_run=gpu_note, timing=dp["timing"]))
    print(f"{NAME}.speed/{d}: {dp['qps']:.2f} Q/s on CPU")
    if "dpr_model" in inputs:
        dr = _in_child(_time_child, dict(ctx.cfg), "dpr", {**paths, "dpr_model": str(inputs["dpr_model"]),
                                                            "dpr_index": str(inputs["dpr_index"]),
                                                            "reader": str(inputs["reader"])}, questions, k)
        dmeta = read_meta(inputs["dpr_index"])
        fb = int((inputs["dpr_index"] / INDEX_FILE).stat().st_size)
        values = {
            "qps_cpu": (dr["qps"], "Q/s", (f"{common}: DPR question encoding + faiss search + the reader over "
                                           f"the top {ctx.cfg['reader'].get('top_k', 20)} passages, one question "
                                           "per reader call")),
            "storage_bytes": (fb + corpus_bytes, "B", f"DPR's faiss index {fb:,} B + passages {corpus_bytes:,} B"),
            "index_bytes": (fb, "B", "DPR's faiss index alone"),
            "indexing_seconds": (float(dmeta.get("build_seconds") or dmeta.get("seconds") or 0), "s",
                                 "DPR: encoding the corpus + building the faiss index (its meta.json)"),
            "ram_bytes": (dr["peak_rss"], "B", ("peak resident memory of a process that loads DPR, its index "
                                                "and the reader and runs the timing")),
        }
        write_json(out / f"{NAME}.speed-dpr.json", _metric(f"{NAME}.speed-dpr", d, values, not_run=gpu_note,
                                                          timing=dr["timing"]))
        print(f"{NAME}.speed-dpr/{d}: {dr['qps']:.2f} Q/s on CPU")
    return {"questions": n, "split": split}


C3_ROWS = {"nq": "Natural Questions", "wq": "WebQuestions", "trec": "CuratedTrec", "tqa": "TriviaQA",
           "squad": "SQuAD", "trex": "T-REx", "zsre": "Zero-Shot RE"}


def measure_c3(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Table C.3 counted by the harness's loaders: questions per split of each configured dataset."""
    from harness.io import write_json

    s = settings(ctx.cfg)
    for row, key in s["c3_datasets"].items():
        folder = inputs[f"data_{row}"]
        values, not_run = {}, {}
        for split in ("train", "dev", "test"):
            if (folder / store.queries_file(split)).exists():
                n = len(store.read_queries(folder, split))
                values[split] = (n, "count", f"questions in split {split!r} of dataset {key} as the harness loads it")
            else:
                not_run[split] = f"dataset {key} has no {split!r} split in this profile"
        write_json(out / f"{NAME}.c3-{row}.json", _metric(f"{NAME}.c3-{row}", str(job.dataset), values,
                                                           not_run=not_run, source_dataset=key))
    return {}


# --------------------------------------------------------------------------------------------
# jobs


def _train_keys(cfg: Mapping[str, Any], s: Mapping[str, Any], v: str | None) -> tuple[str, ...]:
    m = f"methods.{NAME}"
    keys = [f"{m}.{k}" for k in sorted(cfg["methods"][NAME]) if k not in NOT_MODEL]
    if v is not None:
        keys += [f"{m}.variants.{v}", f"{m}.variant_overrides"]
    return (*keys, "seed", f"backbones.{s['backbone']}")


def answer_systems(cfg: Mapping[str, Any], s: Mapping[str, Any], dataset: str) -> list[tuple[str, Job]]:
    """Every (system, search job) whose answers are scored on ``dataset``."""
    out = []
    jobs = [search_job(cfg, NAME, dataset)]
    if s["qs"]["enabled"]:
        jobs.append(search_job(cfg, NAME, dataset, qs_model=True))
    if dataset in s["variant_datasets"]:
        jobs += [search_job(cfg, NAME, dataset, variant=v) for v in variants(s)]
    for j in jobs:
        out += [(sid, j) for sid in j.systems]
    return out


def declare(cfg: Mapping[str, Any], name: str) -> list[Job]:
    """Models (main, variants, the query-side fine-tuned model), their phrase dumps + indexes,
    searches, and the measure jobs (EM/F1, reading comprehension, speed, Table C.3)."""
    s = settings(cfg)
    check(cfg, s)
    m, gpu = f"methods.{name}", wants_gpu(cfg, name)
    td = s["train_dataset"]
    data = {"data": Ref("data", dataset=td)}
    jobs: list[Job] = []
    for v in [None, *variants(s)]:
        vs = settings(cfg, v)
        mid = model_id(v)
        inputs = dict(data)
        if vs["distill"] or vs["qg"]:
            inputs["reader"] = Ref("model", "reader")
        jobs.append(Job("train", mid, name, "train_step", gpu=gpu, params={"variant": v}, inputs=inputs,
                        keys=_train_keys(cfg, vs, v), mem_mb=6000))
        jobs.append(Job("index", mid, name, "build", gpu=gpu, params={"variant": v, "gold_only": v is not None},
                        keys=(f"{m}.index", f"{m}.index_variants", f"{m}.dsmall", f"{m}.nprobe", f"{m}.dump_max_len",
                              f"{m}.dump_stride", f"{m}.dump_codec", f"{m}.filter", f"{m}.train_fraction"),
                        inputs={"data": Ref("data"), "model": Ref("model", mid), "train_data": Ref("data", dataset=td)},
                        mem_mb=8000))
    if s["qs"]["enabled"]:
        jobs.append(Job("train", f"{NAME}.qs", name, "qs_step", gpu=gpu, params={"variant": None},
                        keys=(f"{m}.qs", f"{m}.search", f"{m}.nprobe", "seed"),
                        inputs={**data, "model": Ref("model", NAME), "index": Ref("index", NAME, td)}, mem_mb=6000))
    for d in s["datasets"]:
        pairs = answer_systems(cfg, s, d)
        jobs += list({j.id: j for _, j in pairs}.values())
        jobs.append(Job("measure", f"{NAME}.em", name, "measure_em", d, systems=tuple(sid for sid, _ in pairs),
                        keys=(f"datasets.{d}.answer_rule",),
                        inputs={"data": Ref("data", dataset=d),
                                **{f"run_{i}": Ref("system", sid, d) for i, (sid, _) in enumerate(pairs)}}))
    for d in s["rc_datasets"]:
        vs_ = [None, *(variants(s) if d in s["variant_datasets"] else [])]
        jobs.append(Job("measure", f"{NAME}.rc", name, "measure_rc", d,
                        systems=tuple(_sys(model_id(v), "rc") for v in vs_),
                        params={"variants": vs_}, keys=(f"{m}.max_test_questions", f"datasets.{d}.answer_rule"),
                        inputs={"data": Ref("data", dataset=d), "train_data": Ref("data", dataset=td),
                                **{f"model_{i}": Ref("model", model_id(v)) for i, v in enumerate(vs_)}}))
    t = s["timing"]
    if t["dataset"]:
        d = t["dataset"]
        inputs = {"data": Ref("data", dataset=d), "model": Ref("model", NAME), "index": Ref("index", NAME, d)}
        systems = [f"{NAME}.speed"]
        if t["baseline"] and cfg["methods"].get("dpr", {}).get("enabled", False) and cfg.get("reader"):
            inputs.update({"dpr_model": Ref("model", "dpr"), "dpr_index": Ref("index", "dpr", d),
                           "reader": Ref("model", "reader")})
            systems.append(f"{NAME}.speed-dpr")
        jobs.append(Job("measure", f"{NAME}.speed", name, "measure_speed", d, systems=tuple(systems),
                        keys=(f"{m}.timing", f"{m}.search", f"{m}.nprobe", "reader.top_k"), inputs=inputs,
                        mem_mb=8000))
    if s["c3_datasets"]:
        jobs.append(Job("measure", f"{NAME}.c3", name, "measure_c3", td,
                        systems=tuple(f"{NAME}.c3-{r}" for r in s["c3_datasets"]), keys=(f"{m}.c3_datasets",),
                        inputs={f"data_{r}": Ref("data", dataset=k) for r, k in s["c3_datasets"].items()}))
    return jobs


def train_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    v = job.params.get("variant")
    return {"variant": v, **train(ctx.cfg, settings(ctx.cfg, v), inputs, out)}


def qs_step(ctx: Context, job: Job, inputs: Mapping[str, Path], out: Path) -> dict[str, Any]:
    return train_qs(ctx.cfg, settings(ctx.cfg), inputs, out)
