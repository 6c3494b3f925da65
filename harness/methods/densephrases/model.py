"""DensePhrases' model (§3.2): passage windows, the phrase encoder M_p with the question encoders
M_q,start / M_q,end and the filter layer (save/load), and the reading-comprehension scoring of a
question against its own passage (D = {p}: the best span start <= end < start + L)."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from harness.datasets import Doc
from harness.methods.densephrases.settings import ENCODERS, HEADS_FILE, INFO_FILE
from harness.models.runtime import quiet_transformers, torch_for
from harness.recording import merged


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

        torch = torch_for(s)
        quiet_transformers()
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
    def load(cls, s: Mapping[str, Any], folder: Path, device: str = "cpu") -> PhraseModel:
        """The trained model of ``folder`` on ``device`` (index and search jobs: the section's,
        :func:`harness.models.runtime.encode_device`; vectors and scores come back as CPU arrays)."""
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch_for(s)
        quiet_transformers()
        folder = Path(folder)
        info = json.loads((folder / INFO_FILE).read_text())
        phrase = AutoModel.from_pretrained(folder / ENCODERS[0])
        if info["shared_encoder"]:
            qs = qe = phrase
        else:
            qs, qe = (AutoModel.from_pretrained(folder / e) for e in ENCODERS[1:])
        filt = torch.nn.Linear(int(phrase.config.hidden_size), 2)
        filt.load_state_dict(torch.load(folder / HEADS_FILE, map_location="cpu", weights_only=True))
        s = merged(s, {"shared_encoder": info["shared_encoder"], "split_vectors": info["split_vectors"]})
        model = cls(s, phrase, qs, qe, AutoTokenizer.from_pretrained(folder / ENCODERS[0]), filt)
        if device != "cpu":
            model.to(device)
        return model

    def save(self, folder: Path) -> None:
        import torch

        folder = Path(folder)
        self.phrase.save_pretrained(folder / ENCODERS[0])
        self.tok.save_pretrained(folder / ENCODERS[0])
        if not self.shared:
            # each encoder folder is a complete transformers folder (AutoModel/AutoTokenizer.from_pretrained):
            # without its tokenizer files, AutoTokenizer on question_start/_end silently builds a 5-token vocabulary
            for enc, name in ((self.q_start, ENCODERS[1]), (self.q_end, ENCODERS[2])):
                enc.save_pretrained(folder / name)
                self.tok.save_pretrained(folder / name)
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
        return self.encode_questions(self.question_batch(texts))

    def question_batch(self, texts: Sequence[str]) -> dict:
        """The prepared question texts tokenized as one batch (padded to its longest), on the model's device."""
        enc = self.tok(list(texts), padding=True, truncation=True, max_length=int(self.s["q_max_len"]),
                       return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items()}

    def encode_questions(self, enc: Mapping[str, Any]):
        """(q_start, q_end) of a tokenized question batch (:meth:`question_batch`, or rows of one)."""
        torch = torch_for(self.s)
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
        torch = torch_for(self.s)
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
    torch = torch_for(s)
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
