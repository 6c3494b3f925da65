"""Answer-match rules for open-domain QA (top-k accuracy) and reader exact match.

The papers decide "the answer is in the passage" differently (notes/seed-code-facts.md);
each rule is a named function in ANSWER_RULES, and every table says which rule produced it.

* ``dpr-string`` (DPR's qa_validation.py): passage text only, NFD-normalised; text and answer
  are tokenised by DPR's SimpleTokenizer (runs of letters/numbers/marks, or single other
  non-space characters), lower-cased; the answer must appear as consecutive tokens.
* ``dpr-regex`` (CuratedTREC): the NFD answer is a regex compiled case-insensitive, unicode,
  multiline and searched in the NFD text; a regex that fails to compile is no match.
* ``vsearch-string`` (SVDR/VDR code): like dpr-string after replacing ’ by ' and newlines by spaces.
* ``bpr-string`` (BPR code): like dpr-string, lower-casing before NFD.

One deviation from DPR: an answer with no tokens (empty or only spaces) never matches; in
DPR's code it matches every passage.
"""
from __future__ import annotations

import re as std_re
import string
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache

import regex

from harness.registry import Registry

_TOKEN = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)


def simple_tokenize(text: str) -> list[str]:
    """DPR's SimpleTokenizer, lower-cased words."""
    return [m.group().lower() for m in _TOKEN.finditer(text)]


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> tuple[str, ...]:
    # Cached: evaluation and negative mining test the same passages against many questions.
    return tuple(simple_tokenize(text))


def _contains_tokens(answers: Sequence[str], text: str, prep: Callable[[str], str]) -> bool:
    tokens = _tokens(prep(text))
    for answer in answers:
        ans = _tokens(prep(answer))
        if not ans:
            continue
        n = len(ans)
        first = ans[0]
        for i in range(len(tokens) - n + 1):
            if tokens[i] == first and tokens[i:i + n] == ans:
                return True
    return False


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> regex.Pattern | None:
    try:
        return regex.compile(pattern, flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)
    except Exception:  # DPR: a regex that fails to compile counts as no match
        return None


ANSWER_RULES: Registry[Callable[[Sequence[str], str], bool]] = Registry("answer-match rule")


@ANSWER_RULES.register("dpr-string")
def dpr_string(answers: Sequence[str], text: str) -> bool:
    return _contains_tokens(answers, text, _nfd)


@ANSWER_RULES.register("dpr-regex")
def dpr_regex(answers: Sequence[str], text: str) -> bool:
    text = _nfd(text)
    for answer in answers:
        if not answer.strip():
            continue
        pat = _compile(_nfd(answer))
        if pat is not None and pat.search(text) is not None:
            return True
    return False


@ANSWER_RULES.register("vsearch-string")
def vsearch_string(answers: Sequence[str], text: str) -> bool:
    def prep(s: str) -> str:
        return _nfd(s.replace("\u2019", "'").replace("\n", " "))

    return _contains_tokens(answers, text, prep)


@ANSWER_RULES.register("bpr-string")
def bpr_string(answers: Sequence[str], text: str) -> bool:
    return _contains_tokens(answers, text, lambda s: _nfd(s.lower()))


_MODES = {"string": "dpr-string", "regex": "dpr-regex"}


def has_answer(answers: list[str], text: str, mode: str = "string") -> bool:
    """True if some answer occurs in ``text`` by DPR's rule: ``mode`` "string" or "regex"
    (CuratedTREC), or any rule name of ANSWER_RULES."""
    return ANSWER_RULES.get(_MODES.get(mode, mode))(answers, text)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation (after NFD): lower-case, drop punctuation, drop a/an/the, squeeze spaces."""
    s = _nfd(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = std_re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


_PUNCT = set(string.punctuation)


def exact_match(prediction: str, answers: list[str]) -> bool:
    """Reader EM: max over gold answers of SQuAD-normalised string equality."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)


def first_hit_ranks(results: dict[str, list[str]], answers: dict[str, list[str]], texts: Callable[[str], str],
                    rule: str = "dpr-string") -> dict[str, int | None]:
    """For each query, the 1-based rank of the first passage containing an answer (None: none)."""
    match = ANSWER_RULES.get(rule)
    out: dict[str, int | None] = {}
    for qid, ans in answers.items():
        out[qid] = None
        for rank, doc_id in enumerate(results.get(qid, []), 1):
            if match(ans, texts(doc_id)):
                out[qid] = rank
                break
    return out


def topk_accuracy(first_hits: dict[str, int | None], cutoffs: Sequence[int]) -> dict[str, float]:
    """``Success@k`` as DPR's top-k accuracy: share of questions answered within the top k."""
    n = len(first_hits)
    if n == 0:
        return {f"Success@{k}": 0.0 for k in cutoffs}
    return {f"Success@{k}": sum(1 for r in first_hits.values() if r is not None and r <= k) / n for k in cutoffs}
