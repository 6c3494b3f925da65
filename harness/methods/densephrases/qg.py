"""Question generation for data augmentation, as DensePhrases uses it (§4.1 "Data augmentation",
Table 5 column QG).

The paper's pipeline, one function per step:

1. a seq2seq generator (T5-large in the paper) is trained on SQuAD to map a passage whose gold
   answer is surrounded by special tags to the question (:func:`train_generator`, on
   :func:`training_examples`; the source format is :func:`highlight`);
2. the named entities of each training passage are its candidate answers
   (:func:`candidate_answers`, with spaCy's NER through :func:`spacy_ner`, or any callable);
3. the generator writes one question per (passage, candidate answer) (:func:`generate`);
4. a pair is kept only when a cross-attention reading-comprehension model answers the generated
   question with the candidate (exact match, :func:`filter_by_reader`; the harness's extractive
   reader through :func:`reader_predict`).

:func:`run_pipeline` chains 2-4. Model names come from the config (:class:`QGSettings`); nothing
is downloaded: :func:`availability` says, without raising, why the pipeline cannot run here (the
generator is neither a local folder nor in the Hugging Face cache; spaCy or its model is not
installed), and the tables print that reason in the cells that need generated questions.

Sources longer than ``max_source_len`` tokens are cut to a window of the passage around the
answer (whole words) rather than truncated at the end, so the highlighted answer always reaches
the generator (counted as ``cropped``). Spans are character offsets into ``Doc.text``.

torch and transformers are imported lazily.
"""
from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

from harness.datasets import Doc, Query
from harness.errors import ConfigError, DependencyError
from harness.models.runtime import quiet_transformers

#: a named-entity recogniser: text -> [(start, end, label)], character offsets
NER = Callable[[str], Sequence[tuple[int, int, str]]]
#: a reader: (question, passage) -> the predicted answer string
Predict = Callable[[str, Doc], str]

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class QGSettings:
    """The question-generation section of a config (:meth:`from_config`)."""

    generator: str = "t5-large"           # hub id (from the local cache only), local folder, or path:<dir>
    ner: str = "en_core_web_sm"           # spaCy model (package name or folder)
    max_source_len: int = 512             # tokens of the highlighted passage
    max_target_len: int = 64              # tokens of a question (training labels and generation)
    num_beams: int = 1                    # 1: greedy decoding
    highlight: str = "<hl>"               # the tag written before and after the answer
    prefix: str = "generate question: "   # written before the highlighted passage
    max_passages: int | None = None       # a seeded subsample of the passages (None: all)
    batch_size: int = 8                   # generation batch
    ner_labels: tuple[str, ...] | None = None  # entity labels kept as candidates (None: all)
    dedupe: bool = True                   # one candidate per distinct entity text in a passage

    @classmethod
    def from_config(cls, m: Mapping[str, Any] | None, where: str = "qg") -> QGSettings:
        """Settings from a config mapping (missing keys take the defaults above); an unknown key
        or a bad value is a ConfigError naming ``<where>.<key>``."""
        m = dict(m or {})
        names = [f.name for f in fields(cls)]
        for k in m:
            if k not in names:
                close = difflib.get_close_matches(k, names, n=1)
                raise ConfigError(f"config key {where}.{k}: unknown question-generation setting"
                                  + (f" (did you mean {close[0]!r}?)" if close else ""),
                                  fix=f"use one of {', '.join(names)}")
        if m.get("ner_labels") is not None:
            m["ner_labels"] = tuple(str(x) for x in m["ner_labels"])
        s = cls(**m)
        s.check(where)
        return s

    def check(self, where: str = "qg") -> None:
        for k in ("generator", "ner", "highlight"):
            v = getattr(self, k)
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(f"config key {where}.{k}: a non-empty string is required, got {v!r}")
        for k in ("max_source_len", "max_target_len", "num_beams", "batch_size"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"config key {where}.{k}: a positive integer is required, got {v!r}")
        if self.max_passages is not None and (isinstance(self.max_passages, bool)
                                              or not isinstance(self.max_passages, int) or self.max_passages < 1):
            raise ConfigError(f"config key {where}.max_passages: null or a positive integer, got {self.max_passages!r}")


def _settings(settings: QGSettings | Mapping[str, Any] | None) -> QGSettings:
    return settings if isinstance(settings, QGSettings) else QGSettings.from_config(settings)


class QGExample(NamedTuple):
    """A training question of the generator: the answer span [start, end) of ``passage``."""

    passage: str
    start: int
    end: int
    question: str


class Candidate(NamedTuple):
    """A candidate answer (a named entity) of a passage, with its generated question."""

    passage: Doc
    start: int
    end: int
    answer: str
    question: str = ""


class GeneratedQuestion(NamedTuple):
    """A kept generated pair: ``answer == text[start:end]`` of passage ``passage_id``."""

    passage_id: str
    question: str
    answer: str
    start: int
    end: int


# --------------------------------------------------------------------------- availability


def _local_dir(name: str) -> Path | None:
    """The folder ``name`` names (``path:<dir>``, an absolute or relative path, an existing folder),
    else None (a hub id)."""
    if name.startswith("path:"):
        return Path(name[5:]).expanduser()
    p = Path(name).expanduser()
    # a hub id is "name" or "org/name"; anything else that looks like a path is one
    if p.is_dir() or name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        return p
    return None


def _hub_id(name: str) -> str:
    return name.removeprefix("hub:")


def _hub_cached(repo: str) -> bool:
    """Whether the Hugging Face cache holds the config and weights of ``repo`` (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False

    def cached(fname: str) -> bool:
        try:
            return isinstance(try_to_load_from_cache(repo, fname), str)
        except (ValueError, OSError):  # an invalid repo id (HFValidationError), an unreadable cache
            return False

    return cached("config.json") and any(cached(f) for f in WEIGHT_FILES)


def generator_reason(name: str) -> str | None:
    """Why generator ``name`` cannot be loaded offline (None: it can)."""
    folder = _local_dir(name)
    if folder is not None:
        if not folder.is_dir():
            return f"the generator folder '{folder}' does not exist"
        if not (folder / "config.json").is_file():
            return f"the generator folder '{folder}' has no config.json"
        if not any((folder / f).is_file() for f in WEIGHT_FILES):
            return f"the generator folder '{folder}' has no model weights"
        return None
    if _hub_cached(_hub_id(name)):
        return None
    return (f"the generator '{_hub_id(name)}' is not available offline (not a local folder and not in the "
            "Hugging Face cache; nothing is downloaded)")


def ner_reason(name: str) -> str | None:
    """Why spaCy model ``name`` cannot be loaded (None: it can); spaCy is not imported."""
    if importlib.util.find_spec("spacy") is None:
        return f"spaCy is not installed (needed for the named-entity candidate answers, model '{name}')"
    if Path(name).expanduser().is_dir():
        return None
    try:
        if name.isidentifier() and importlib.util.find_spec(name) is not None:
            return None
    except (ImportError, ValueError):
        pass
    return f"spaCy model '{name}' is not installed"


def availability(settings: QGSettings | Mapping[str, Any] | None) -> str | None:
    """None when the pipeline can run here, else the reason, one sentence starting
    "question generation not run: ...". Checks local folders, the Hugging Face cache and the
    installed packages only; never downloads, never raises for a missing model (a malformed
    settings mapping is still a ConfigError)."""
    s = _settings(settings)
    reasons = [r for r in (generator_reason(s.generator), ner_reason(s.ner)) if r]
    if not reasons:
        return None
    return "question generation not run: " + " and ".join(reasons)


# --------------------------------------------------------------------------- loading


def load_generator(settings: QGSettings | Mapping[str, Any] | None):
    """(model, tokenizer) of the configured generator, from a local folder or the local Hugging
    Face cache only; the highlight tag is added to the vocabulary (:func:`add_highlight_token`).
    DependencyError when it is not available offline."""
    s = _settings(settings)
    reason = generator_reason(s.generator)
    if reason:
        raise DependencyError(f"question generation: {reason}",
                              fix=f"download it (huggingface-cli download {_hub_id(s.generator)}) on a machine "
                                  "with hub access and copy the cache, or set the generator to a local folder")
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    quiet_transformers()
    folder = _local_dir(s.generator)
    where = str(folder) if folder is not None else _hub_id(s.generator)
    tok = AutoTokenizer.from_pretrained(where, local_files_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(where, local_files_only=True)
    add_highlight_token(model, tok, s.highlight)
    return model, tok


def add_highlight_token(model, tokenizer, tag: str) -> bool:
    """Make ``tag`` one special token of ``tokenizer`` (resizing ``model``'s embeddings) unless it
    already is one token; returns whether the vocabulary grew."""
    if len(tokenizer.tokenize(f"a {tag} b")) == 3 and tag in tokenizer.get_vocab():
        return False
    added = tokenizer.add_tokens([tag], special_tokens=True)
    if added and model is not None:
        model.resize_token_embeddings(len(tokenizer))
    return bool(added)


def spacy_ner(model_name: str) -> NER:
    """spaCy's named-entity recogniser as a callable text -> [(start, end, label)] (spaCy is
    imported here, not at module import)."""
    reason = ner_reason(model_name)
    if reason:
        raise DependencyError(f"question generation: {reason}",
                              fix=f"pip install spacy && python -m spacy download {model_name}")
    import spacy

    nlp = spacy.load(model_name, disable=["parser", "lemmatizer", "textcat"])

    def ner(text: str) -> list[tuple[int, int, str]]:
        return [(e.start_char, e.end_char, e.label_) for e in nlp(text).ents]

    return ner


# --------------------------------------------------------------------------- sources


def highlight(passage: str, start: int, end: int, tag: str = "<hl>", prefix: str = "") -> str:
    """``prefix`` + ``passage`` with the answer ``passage[start:end]`` surrounded by ``tag``:
    ``"... born in <hl> 1889 <hl> near ..."``."""
    if not 0 <= start < end <= len(passage):
        raise ValueError(f"answer span [{start}, {end}) outside a passage of {len(passage)} characters")
    return f"{prefix}{passage[:start]}{tag} {passage[start:end]} {tag}{passage[end:]}"


def _window(passage: str, start: int, end: int, keep: int) -> tuple[int, int]:
    """A character window [left, right) of about ``keep`` characters containing [start, end),
    centred on it, cut at whitespace (never inside the answer)."""
    extra = max(0, keep - (end - start))
    left, right = start - extra // 2, end + (extra - extra // 2)
    if left < 0:
        right, left = right - left, 0
    if right > len(passage):
        left, right = max(0, left - (right - len(passage))), len(passage)
    if left > 0 and not passage[left - 1].isspace():
        j = passage.find(" ", left, start)
        left = j + 1 if j != -1 else start
    if right < len(passage) and not passage[right].isspace():
        j = passage.rfind(" ", end, right)
        right = j if j != -1 else end
    return left, right


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def make_source(tokenizer, passage: str, start: int, end: int, settings: QGSettings) -> tuple[str, bool]:
    """The generator's input for answer [start, end) of ``passage`` and whether the passage was
    cut to a window around the answer to fit ``max_source_len`` tokens."""
    s = settings
    src = highlight(passage, start, end, s.highlight, s.prefix)
    n = _n_tokens(tokenizer, src)
    if n <= s.max_source_len:
        return src, False
    keep = len(passage)
    for _ in range(8):
        keep = max(end - start, int(keep * s.max_source_len / n * 0.95))
        left, right = _window(passage, start, end, keep)
        src = highlight(passage[left:right], start - left, end - left, s.highlight, s.prefix)
        n = _n_tokens(tokenizer, src)
        if n <= s.max_source_len or keep == end - start:
            break
    return src, True


def candidate_answers(passages: Sequence[str], ner: NER, *, labels: Sequence[str] | None = None,
                      dedupe: bool = True) -> list[list[tuple[int, int, str]]]:
    """Per passage, its candidate answers ``(start, end, text)``: the entity spans ``ner`` finds
    (only ``labels`` when given), stripped of surrounding whitespace, in text order; with
    ``dedupe``, the first occurrence of each distinct entity text only."""
    out: list[list[tuple[int, int, str]]] = []
    for text in passages:
        seen: set[str] = set()
        spans: list[tuple[int, int, str]] = []
        for start, end, label in sorted(ner(text), key=lambda e: (e[0], e[1])):
            if labels is not None and label not in labels:
                continue
            ans = text[start:end]
            lead = len(ans) - len(ans.lstrip())
            start, end = start + lead, start + lead + len(ans.strip())
            if end <= start:
                continue
            ans = text[start:end]
            key = ans if dedupe else f"{start}:{end}"
            if key in seen:
                continue
            seen.add(key)
            spans.append((start, end, ans))
        out.append(spans)
    return out


# --------------------------------------------------------------------------- model


def _device(model):
    return next(model.parameters()).device


def _encode(tokenizer, texts: Sequence[str], max_len: int, device):
    enc = tokenizer(list(texts), padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    return {k: enc[k].to(device) for k in ("input_ids", "attention_mask")}


def generate(model, tokenizer, sources: Sequence[str], settings: QGSettings | Mapping[str, Any] | None) -> list[str]:
    """One question per source (batches of ``batch_size``; greedy when ``num_beams`` is 1, else beam
    search), decoded without special tokens and stripped ("" when the model stops at once)."""
    import torch

    s = _settings(settings)
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        with torch.inference_mode():
            for i in range(0, len(sources), s.batch_size):
                enc = _encode(tokenizer, sources[i:i + s.batch_size], s.max_source_len, _device(model))
                ids = model.generate(**enc, max_new_tokens=s.max_target_len, num_beams=s.num_beams,
                                     do_sample=False, early_stopping=s.num_beams > 1)
                out.extend(t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True))
    finally:
        model.train(was_training)
    return out


def training_examples(queries: Sequence[Query], docs: Mapping[str, Doc]) -> tuple[list[QGExample], dict[str, int]]:
    """SQuAD-style training questions as generator examples: the answer span is the earliest
    occurrence of an answer string in the question's first gold passage that has one
    (``harness.methods.reader.find_answer``); questions without a gold passage or without an answer
    occurring in it are counted and skipped."""
    from harness.methods.reader import find_answer

    out: list[QGExample] = []
    stats = {"questions": len(queries), "no_gold": 0, "no_answer_span": 0}
    for q in queries:
        golds = [docs[g] for g in (q.gold or []) if g in docs]
        if not golds:
            stats["no_gold"] += 1
            continue
        for d in golds:
            span = find_answer(d.text, q.answers or [])
            if span is not None:
                out.append(QGExample(d.text, span[0], span[1], q.text))
                break
        else:
            stats["no_answer_span"] += 1
    stats["examples"] = len(out)
    return out, stats


def train_generator(model, tokenizer, examples: Sequence[QGExample | tuple], settings: QGSettings | Mapping[str, Any] | None,
                    train: Any = None, *, seed: int = 0, out: Path | None = None) -> dict[str, Any]:
    """Fine-tune the generator on (highlighted passage -> question) pairs with
    :func:`harness.train.train_loop` (cross-entropy of the question tokens, teacher forcing).
    ``train`` is a :class:`harness.train.TrainSettings` or a config mapping of its keys (epochs,
    batch_size, lr, ...); single-example batches are allowed. With ``out``, the model and tokenizer
    are saved to ``out/generator`` and the losses to ``out/loss.tsv``. Returns train_loop's info."""
    from dataclasses import replace

    from harness.train import TrainSettings, set_seed, train_loop

    s = _settings(settings)
    if train is None:
        ts = TrainSettings()
    elif isinstance(train, TrainSettings):
        ts = train
    else:
        ts = TrainSettings.from_config(train)
    ts = replace(ts, min_batch=1)
    exs = [QGExample(*e) for e in examples]
    if not exs:
        raise ConfigError("question generation: no training examples for the generator")
    set_seed(seed)
    sources = {i: make_source(tokenizer, e.passage, e.start, e.end, s)[0] for i, e in enumerate(exs)}
    items = [(sources[i], e.question) for i, e in enumerate(exs)]

    def step_fn(batch, step, rng):
        dev = _device(model)
        enc = _encode(tokenizer, [b[0] for b in batch], s.max_source_len, dev)
        lab = _encode(tokenizer, [b[1] for b in batch], s.max_target_len, dev)
        labels = lab["input_ids"].masked_fill(lab["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        return loss, {}

    def save(folder: Path) -> None:
        model.save_pretrained(Path(folder) / "generator")
        tokenizer.save_pretrained(Path(folder) / "generator")

    info = train_loop(items, step_fn, list(model.parameters()), settings=ts, seed=seed, out=out,
                      save=save if out is not None else None, modules=[model])
    model.eval()
    return info


# --------------------------------------------------------------------------- filter and pipeline


def reader_predict(reader) -> Predict:
    """The harness's extractive reader (``harness.methods.reader.Reader``) as a (question, passage) ->
    answer callable, reading the one passage."""
    return lambda question, doc: reader.predict(question, [doc])["answer"]


def filter_by_reader(pairs: Sequence[Candidate], predict: Predict) -> tuple[list[GeneratedQuestion], dict[str, int]]:
    """Keep a generated pair when ``predict(question, passage)`` exact-matches its answer
    (SQuAD-normalised, ``harness.evaluate.qa.exact_match``). Empty questions are dropped without
    asking the reader. Stats: generated, empty, checked, kept, rejected."""
    from harness.evaluate.qa import exact_match

    kept: list[GeneratedQuestion] = []
    stats = {"generated": len(pairs), "empty": 0, "checked": 0, "kept": 0, "rejected": 0}
    for c in pairs:
        if not c.question.strip():
            stats["empty"] += 1
            continue
        stats["checked"] += 1
        if exact_match(predict(c.question, c.passage), [c.answer]):
            kept.append(GeneratedQuestion(c.passage.id, c.question, c.answer, c.start, c.end))
        else:
            stats["rejected"] += 1
    stats["kept"] = len(kept)
    return kept, stats


def run_pipeline(passages: Sequence[Doc], settings: QGSettings | Mapping[str, Any] | None, *, model, tokenizer,
                 ner: NER, predict: Predict, seed: int = 0) -> tuple[list[GeneratedQuestion], dict[str, int]]:
    """NER -> highlight -> generate -> filter over ``passages`` (a seeded subsample of
    ``max_passages`` when set). Returns the kept pairs (passage id, question, answer, span in the
    passage text) and stats: passages, passages_without_candidates, candidates, cropped,
    generated (= candidates), empty, checked, kept, rejected."""
    from harness.train import subsample

    s = _settings(settings)
    docs = subsample(list(passages), s.max_passages, seed)
    if len({d.id for d in docs}) != len(docs):
        raise ValueError("run_pipeline: passage ids must be unique")
    spans = candidate_answers([d.text for d in docs], ner, labels=s.ner_labels, dedupe=s.dedupe)
    cands = [Candidate(d, a, b, t) for d, sp in zip(docs, spans) for a, b, t in sp]
    built = [make_source(tokenizer, c.passage.text, c.start, c.end, s) for c in cands]
    questions = generate(model, tokenizer, [b[0] for b in built], s)
    cands = [c._replace(question=q) for c, q in zip(cands, questions)]
    kept, fstats = filter_by_reader(cands, predict)
    stats = {"passages": len(docs), "passages_without_candidates": sum(1 for sp in spans if not sp),
             "candidates": len(cands), "cropped": sum(1 for b in built if b[1]), **fstats}
    return kept, stats
