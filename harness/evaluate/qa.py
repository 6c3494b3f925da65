"""Reader exact match and F1, top-k accuracy over ranked lists, and DensePhrases' question
preprocessing. Whether a passage holds an answer is the dataset's answer rule
(:mod:`harness.datasets.answers`, ANSWER_RULES: DPR's, CuratedTREC's, SVDR's and BPR's).

Reader side (DensePhrases' ``eval_utils.py``, from DrQA): :func:`exact_match` (SQuAD
normalisation, max over answers), :func:`regex_match` for CuratedTREC (Python ``re``,
``re.match``: anchored at the start of the prediction, not searched), :func:`f1_score`
(SQuAD v1.1), :func:`em_rule` / :func:`answer_em` to pick the EM function from a dataset's answer
rule, and :func:`prepare_question` (one trailing "?" removed, all-lower-case questions truecased).
"""
from __future__ import annotations

import re as std_re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.datasets.answers import ANSWER_RULES, RULE_ALIASES, nfd


def normalize_answer(s: str) -> str:
    """SQuAD normalisation (after NFD): lower-case, drop punctuation, drop a/an/the, squeeze spaces."""
    s = nfd(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = std_re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


_PUNCT = set(string.punctuation)


def exact_match(prediction: str, answers: list[str]) -> bool:
    """Reader EM: max over gold answers of SQuAD-normalised string equality."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)


def _f1_tokens(pred: list[str], gold: list[str]) -> float:
    num_same = sum((Counter(pred) & Counter(gold)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred)
    recall = num_same / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answers: list[str]) -> float:
    """SQuAD v1.1's official F1, max over gold answers: tokens of the normalised strings (split on
    white space), overlap counted with multiplicity (Counter intersection), 0 when no token is
    shared. So an empty prediction or an empty gold answer scores 0 (even against each other: that
    1.0 is SQuAD v2.0's rule, not v1.1's). No gold answers: 0.0 (the official script raises;
    DensePhrases scores such a question 0). DensePhrases' own ``f1_score`` also zeroes a pair where
    one side normalises to yes/no/noanswer and they differ (HotpotQA's rule); that is not applied."""
    if not answers:
        return 0.0
    pred = normalize_answer(prediction).split()
    return max(_f1_tokens(pred, normalize_answer(a).split()) for a in answers)


@lru_cache(maxsize=4096)
def _compile_std(pattern: str) -> std_re.Pattern | None:
    try:
        return std_re.compile(pattern, flags=std_re.IGNORECASE | std_re.UNICODE | std_re.MULTILINE)
    except Exception:  # noqa: BLE001 -- DrQA/DensePhrases: a pattern that fails to compile is no match
        return None


def regex_match(prediction: str, patterns: list[str]) -> bool:
    """CuratedTREC EM as DensePhrases/DrQA score it (``drqa_regex_match_score``), max over patterns:
    each pattern compiled with Python's ``re`` (IGNORECASE, UNICODE, MULTILINE) and tried with
    ``.match`` on the prediction as it is (no normalisation): anchored at its start, not searched,
    and the match need not reach its end. A pattern that fails to compile is no match; an empty
    pattern matches any prediction (as in DrQA)."""
    for pattern in patterns:
        compiled = _compile_std(pattern)
        if compiled is not None and compiled.match(prediction) is not None:
            return True
    return False


def em_rule(rule: str) -> Callable[[str, list[str]], bool]:
    """The reader EM function for a dataset's answer rule (an ANSWER_RULES name, or has_answer's
    modes "string"/"regex"): ``dpr-regex`` -> :func:`regex_match`, every string rule ->
    :func:`exact_match`. An unknown rule is a ConfigError."""
    name = RULE_ALIASES.get(rule, rule)
    ANSWER_RULES.get(name)  # unknown rule: ConfigError naming close matches
    return regex_match if name == "dpr-regex" else exact_match


def answer_em(prediction: str, answers: list[str], rule: str = "dpr-string") -> bool:
    """Reader EM of ``prediction`` against ``answers`` by the dataset's answer ``rule`` (see em_rule)."""
    return em_rule(rule)(prediction, answers)


# --------------------------------------------------------------------------- question preprocessing

def _first_upper(token: str) -> str:
    # DensePhrases' TrueCaser.first_token_case; PyPI truecase's ``str.capitalize`` would also
    # lower-case the rest of the token ("NASA" -> "Nasa").
    return token[:1].upper() + token[1:]


@lru_cache(maxsize=4)
def truecaser(model: str | None = None) -> Any:
    """PyPI ``truecase``'s TrueCaser, loaded once per model file (``None``: the package's bundled
    ``english.dist``; DensePhrases' ``english_with_questions.dist`` if you have it). Loading takes
    a few seconds (nltk import and a 76 MB pickle) and needs no download."""
    from truecase.TrueCaser import TrueCaser  # lazy: imports nltk

    caser = TrueCaser(str(model) if model is not None else None)
    caser.first_token_case = _first_upper
    return caser


def _truecase(text: str, model: str | None) -> str:
    # DensePhrases' TrueCaser.get_true_case: white-space tokens (so nltk's punkt data is never
    # needed), the truecase package's scoring, then its own join: a space before every token
    # except punctuation characters and tokens starting with an apostrophe.
    tokens = text.split()
    cased = truecaser(model).get_true_case_from_tokens(tokens, out_of_vocabulary_token_option="title")
    return "".join(t if t.startswith("'") or t in string.punctuation else " " + t for t in cased).strip()


def prepare_question(text: str, *, strip_qmark: bool = True, truecase: bool = True,
                     truecase_model: str | Path | None = None) -> str:
    """A question as DensePhrases feeds it to the query encoder (``load_qa_pairs``): trailing white
    space removed, then exactly one trailing "?" (``strip_qmark``); then, only when the question is
    entirely lower case and has a letter, truecased (``truecase``) with the truecase package's
    statistical truecaser driven as DensePhrases' vendored TrueCaser drives it (white-space tokens,
    first token's first letter upper-cased, out-of-vocabulary tokens title-cased, tokens re-joined
    with single spaces; see :func:`truecaser`). Already-cased questions are left as they are.
    Differences from DensePhrases: it strips "?" only when it is the very last character (no
    white-space strip first) and truecases letterless lower-case strings too (which only squeezes
    their spaces); its model file is ``english_with_questions.dist`` from its data download, the
    default here is the package's ``english.dist`` (pass ``truecase_model`` to use another)."""
    text = text.rstrip()
    if strip_qmark and text.endswith("?"):
        text = text[:-1]
    if truecase and text == text.lower() and any(ch.isalpha() for ch in text):
        text = _truecase(text, None if truecase_model is None else str(truecase_model))
    return text


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


def per_query_success(first_hits: dict[str, int | None], cutoffs: Sequence[int]) -> dict[str, dict[str, float]]:
    """``{qid: {"Success@k": 1.0 or 0.0}}``: each question's top-k accuracy (their mean is
    :func:`topk_accuracy`)."""
    return {q: {f"Success@{k}": float(r is not None and r <= k) for k in cutoffs} for q, r in first_hits.items()}


def topk_accuracy(first_hits: dict[str, int | None], cutoffs: Sequence[int]) -> dict[str, float]:
    """``Success@k`` as DPR's top-k accuracy: share of questions answered within the top k."""
    n = len(first_hits)
    if n == 0:
        return {f"Success@{k}": 0.0 for k in cutoffs}
    return {f"Success@{k}": sum(1 for r in first_hits.values() if r is not None and r <= k) / n for k in cutoffs}
