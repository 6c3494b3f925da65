"""Answer-match rules for open-domain QA: is a dataset's gold answer in a passage? A dataset
names its rule (config key ``datasets.<key>.answer_rule``); top-k accuracy (harness.evaluate.qa),
BM25 hard-negative mining and SVDR's training positives all judge passages by it.

The papers decide "the answer is in the passage" differently (notes/seed-code-facts.md);
each rule is a named function in ANSWER_RULES, and every table says which rule produced it.

* ``dpr-string`` (DPR's qa_validation.py): passage text only, NFD-normalised; text and answer
  are tokenised by DPR's SimpleTokenizer (runs of letters/numbers/marks, or single other
  non-space characters), lower-cased; the answer must appear as consecutive tokens.
* ``dpr-regex`` (CuratedTREC): the NFD answer is a regex compiled case-insensitive, unicode,
  multiline and searched in the NFD text; a regex that fails to compile is no match.
* ``vsearch-string`` (SVDR/VDR code): like dpr-string after replacing ’ by ' and newlines by spaces.
* ``bpr-string`` (BPR code): like dpr-string, lower-casing before NFD.

Empty answers, as DPR's code has them: an answer with no tokens (empty, only white space, or only
separator/control characters; :func:`is_empty_answer`) matches every text, the empty text
included, under every string rule. DPR loops ``for i in range(0, len(text) - len(ans) + 1)``,
so i = 0 is always tried and ``[] == text[0:0]`` holds. The VDR code (jzhoubu/vsearch,
``src/ir/utils/qa_utils.py``) and the BPR code (studio-ousia/bpr, ``evaluate_retriever.py``)
use the same loop, so vsearch-string and bpr-string count empty answers the same way. Datasets
record how many questions have such an answer (``empty_answers`` in their meta.json).
One deviation remains, in ``dpr-regex`` only: a blank pattern is skipped (never matches), where
DPR's ``regex_match`` would match every text with an empty pattern.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache

import regex

from harness.registry import Registry

_TOKEN = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)


def simple_tokenize(text: str) -> list[str]:
    """DPR's SimpleTokenizer, lower-cased words."""
    return [m.group().lower() for m in _TOKEN.finditer(text)]


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> tuple[str, ...]:
    # Cached: evaluation and negative mining test the same passages against many questions.
    return tuple(simple_tokenize(text))


def is_empty_answer(answer: str) -> bool:
    """True if DPR's tokenizer finds no token in ``answer`` (empty, white space only, or only
    separator/control characters): such an answer matches every text under the string rules."""
    return _TOKEN.search(nfd(answer)) is None


@lru_cache(maxsize=1 << 16)
def _prepared(text: str, prep: Callable[[str], str]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The tokens of ``prep(text)`` and their set, once per text: a passage is tested against many
    questions and, in an evaluate job, once per system (its NFD form and its tokens cost more than
    the test)."""
    tokens = _tokens(prep(text))
    return tokens, frozenset(tokens)


def _contains_tokens(answers: Sequence[str], text: str, prep: Callable[[str], str]) -> bool:
    tokens, vocab = _prepared(text, prep)
    for answer in answers:
        ans = _prepared(answer, prep)[0]
        if not ans:
            return True  # DPR: range(0, len(tokens) + 1) always tries i = 0, and [] == tokens[0:0]
        if ans[0] not in vocab:  # no window can start with it: the same answer as the scan, sooner
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
    return _contains_tokens(answers, text, nfd)


@ANSWER_RULES.register("dpr-regex")
def dpr_regex(answers: Sequence[str], text: str) -> bool:
    text = nfd(text)
    for answer in answers:
        if not answer.strip():
            continue
        pat = _compile(nfd(answer))
        if pat is not None and pat.search(text) is not None:
            return True
    return False


@ANSWER_RULES.register("vsearch-string")
def vsearch_string(answers: Sequence[str], text: str) -> bool:
    def prep(s: str) -> str:
        return nfd(s.replace("\u2019", "'").replace("\n", " "))

    return _contains_tokens(answers, text, prep)


@ANSWER_RULES.register("bpr-string")
def bpr_string(answers: Sequence[str], text: str) -> bool:
    return _contains_tokens(answers, text, lambda s: nfd(s.lower()))


RULE_ALIASES = {"string": "dpr-string", "regex": "dpr-regex"}


def has_answer(answers: list[str], text: str, mode: str = "string") -> bool:
    """True if some answer occurs in ``text`` by DPR's rule: ``mode`` "string" or "regex"
    (CuratedTREC), or any rule name of ANSWER_RULES."""
    return ANSWER_RULES.get(RULE_ALIASES.get(mode, mode))(answers, text)
