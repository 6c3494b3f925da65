"""Answer-match rules (top-k accuracy) and reader exact match, hand-checked against DPR's
qa_validation.py (facebookresearch/DPR) and the notes in notes/seed-code-facts.md."""
from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.evaluate.qa import (
    ANSWER_RULES,
    exact_match,
    first_hit_ranks,
    has_answer,
    normalize_answer,
    simple_tokenize,
    topk_accuracy,
)

STRING_RULES = ["string", "dpr-string", "vsearch-string", "bpr-string"]

E_ACUTE = "\u00e9"          # é, precomposed
E_DECOMP = "e\u0301"        # e + COMBINING ACUTE ACCENT
U_UML = "\u00fc"            # ü, precomposed
U_DECOMP = "u\u0308"        # u + COMBINING DIAERESIS


# --------------------------------------------------------------------------- simple_tokenize

@pytest.mark.parametrize("text, tokens", [
    ("Hello World", ["hello", "world"]),
    # punctuation characters are single tokens
    ("U.S.", ["u", ".", "s", "."]),
    ("U.S", ["u", ".", "s"]),
    # numbers with separators split at the separator
    ("1,000", ["1", ",", "000"]),
    ("Wendy\u2019s", ["wendy", "\u2019", "s"]),
    ("Wendy's", ["wendy", "'", "s"]),
    # combining marks (\p{M}) stay inside the word; precomposed letters are letters
    (f"caf{E_DECOMP} au lait", [f"caf{E_DECOMP}", "au", "lait"]),
    (f"caf{E_ACUTE}", [f"caf{E_ACUTE}"]),
    # separators (\p{Z}) and control characters (\p{C}) are never tokens
    ("  \t\n ", []),
    ("New\nYork", ["new", "york"]),
    ("", []),
])
def test_simple_tokenize(text, tokens):
    assert simple_tokenize(text) == tokens


# --------------------------------------------------------------------------- string rules

@pytest.mark.parametrize("mode", STRING_RULES)
@pytest.mark.parametrize("answers, text, expected", [
    # token boundaries: a substring inside a word is not a match
    (["art"], "The party was fun.", False),
    (["art"], "He studied modern art.", True),
    (["art"], "Art is long.", True),
    # case-insensitive, answer as consecutive tokens of a longer phrase
    (["New York"], "He moved to new york city in 1990.", True),
    (["New York"], "New jersey, York and more", False),   # not consecutive
    (["york new"], "New York", False),                    # order matters
    # punctuation tokens: "U.S" is a token prefix of "U.S." but not vice versa
    (["U.S"], "the U.S. army", True),
    (["U.S."], "the U.S army", False),
    (["US"], "the U.S. army", False),
    # numbers: "1,000" -> 1 , 000
    (["1,000"], "about 1,000 people", True),
    (["1,000"], "about 1000 people", False),
    (["1000"], "about 1,000 people", False),
    (["000"], "about 1,000 people", True),               # DPR: "000" is its own token
    # several answers: any one matching is enough
    (["Lyon", "Paris"], "The capital is Paris.", True),
    (["Lyon", "Marseille"], "The capital is Paris.", False),
    ([], "The capital is Paris.", False),
    # the answer longer than the text
    (["New York City Hall"], "New York City", False),
])
def test_string_rules_token_matching(mode, answers, text, expected):
    assert has_answer(answers, text, mode) is expected


@pytest.mark.parametrize("mode", STRING_RULES)
@pytest.mark.parametrize("answer, text, expected", [
    (f"caf{E_ACUTE}", f"a small caf{E_DECOMP} here", True),   # precomposed answer, decomposed text
    (f"caf{E_DECOMP}", f"a small caf{E_ACUTE} here", True),   # decomposed answer, precomposed text
    (f"Z{U_UML}rich", f"He lives in Z{U_DECOMP}rich.", True),
    (f"Z{U_DECOMP}rich", f"He lives in Z{U_UML}rich.", True),
    (f"Z{U_UML}RICH", f"z{U_UML}rich", True),
    # the accent is part of the token: no accent folding
    ("cafe", f"a small caf{E_ACUTE} here", False),
    ("Zurich", f"He lives in Z{U_UML}rich.", False),
])
def test_string_rules_unicode_nfd(mode, answer, text, expected):
    assert has_answer([answer], text, mode) is expected


@pytest.mark.parametrize("mode", STRING_RULES)
@pytest.mark.parametrize("answer", ["", " ", "   \t ", "\n"])
def test_empty_or_blank_answer_never_matches_string_rules(mode, answer):
    # documented deviation from DPR (there an empty answer matches every passage)
    assert has_answer([answer], "Some passage text with words.", mode) is False
    assert has_answer([answer], "", mode) is False
    # a blank answer does not hide a real one next to it
    assert has_answer([answer, "words"], "Some passage text with words.", mode) is True


def test_vsearch_string_normalises_right_single_quote():
    text = "They ate at Wendy\u2019s yesterday."
    assert has_answer(["Wendy's"], text, "vsearch-string") is True
    assert has_answer(["Wendy's"], text, "dpr-string") is False
    assert has_answer(["Wendy's"], text, "string") is False
    assert has_answer(["Wendy's"], text, "bpr-string") is False
    # and the other way round: curly quote in the answer, straight quote in the text
    assert has_answer(["Wendy\u2019s"], "They ate at Wendy's.", "vsearch-string") is True
    assert has_answer(["Wendy\u2019s"], "They ate at Wendy's.", "dpr-string") is False


def test_string_mode_is_dpr_string_rule():
    text = "Ray Charles was born in 1930."
    for answers in (["Ray Charles"], ["ray"], ["charle"], ["Ray(mond)? Charles"]):
        assert has_answer(answers, text, "string") is has_answer(answers, text, "dpr-string")
    # in string mode a regex is a literal token sequence, so it does not match
    assert has_answer(["Ray(mond)? Charles"], text, "string") is False


def test_only_the_passed_text_is_searched_not_a_title():
    # a passage titled "Paris" whose text does not mention Paris: DPR uses the text only
    passages = {"d1": {"title": "Paris", "text": "The city lies on the Seine."},
                "d2": {"title": "Lyon", "text": "Paris is the capital of France."}}
    ranks = first_hit_ranks({"q": ["d1", "d2"]}, {"q": ["Paris"]}, lambda d: passages[d]["text"])
    assert ranks == {"q": 2}


# --------------------------------------------------------------------------- regex rule

@pytest.mark.parametrize("mode", ["regex", "dpr-regex"])
@pytest.mark.parametrize("answers, text, expected", [
    (["Ray(mond)? Charles"], "The singer Ray Charles was born in 1930.", True),
    (["Ray(mond)? Charles"], "the singer RAYMOND CHARLES was born", True),      # case-insensitive
    (["Ray(mond)? Charles"], "Ray Charle was here", False),
    (["Ray(mond)? Charles"], "Raymon Charles", False),
    # a pattern that spans several words of the text
    ([r"born in \d{4} in Georgia"], "He was born in 1930 in Georgia, USA.", True),
    ([r"born in \d{4} in Georgia"], "He was born in 30 in Georgia.", False),
    # multiline: ^ anchors at a line start
    (["^Charles"], "Ray\nCharles", True),
    (["^Charles"], "Ray Charles", False),
    # regex mode is a plain search: no token boundaries (unlike string mode)
    (["art"], "The party was fun.", True),
    # a broken regex is no match, and does not hide a valid one
    (["(unclosed"], "(unclosed paren here", False),
    (["(unclosed", "Charles"], "Ray Charles", True),
    (["[a-"], "anything [a- here", False),
    # NFD on both sides
    ([f"Z{U_UML}rich"], f"in Z{U_DECOMP}rich", True),
    ([f"Z{U_DECOMP}rich"], f"in Z{U_UML}rich", True),
    ([f"caf{E_ACUTE}|bistro"], f"a caf{E_DECOMP}", True),
])
def test_regex_rule(mode, answers, text, expected):
    assert has_answer(answers, text, mode) is expected


def test_broken_regex_does_not_raise():
    # patterns the `regex` module (which DPR's qa_validation.py imports as re) cannot compile
    for pattern in ("(unclosed", "[", "*abc", "a{2,1}", "a)", "\\"):
        assert has_answer([pattern], "a aa a) (unclosed [ *abc \\", "regex") is False


def test_empty_answer_never_matches_regex_rule():
    assert has_answer([""], "Some passage text.", "regex") is False


# --------------------------------------------------------------------------- rule registry

def test_rule_names_and_unknown_mode():
    assert set(ANSWER_RULES.names()) >= {"dpr-string", "dpr-regex", "vsearch-string", "bpr-string"}
    with pytest.raises(ConfigError) as exc:
        has_answer(["x"], "x", "dpr-strin")
    assert "dpr-string" in str(exc.value)


def test_rules_callable_directly_from_registry():
    assert ANSWER_RULES.get("bpr-string")(["New York"], "NEW YORK city") is True
    assert ANSWER_RULES.get("bpr-string")(["art"], "party") is False
    assert ANSWER_RULES.get("dpr-regex")(["Ray(mond)? Charles"], "raymond charles") is True


# --------------------------------------------------------------------------- exact match

@pytest.mark.parametrize("s, norm", [
    ("The Beatles", "beatles"),
    ("Paris.", "paris"),
    ("an apple", "apple"),
    ("  A  cat,  THE dog!! ", "cat dog"),
    ("The theatre", "theatre"),          # articles only as whole words
    ("Anne and Theo", "anne and theo"),
    ("U.S.", "us"),
    ("1,000", "1000"),
    ("", ""),
    (f"Z{U_UML}rich", f"z{U_DECOMP}rich"),  # NFD
])
def test_normalize_answer(s, norm):
    assert normalize_answer(s) == norm


@pytest.mark.parametrize("prediction, answers, expected", [
    ("The Beatles", ["beatles"], True),
    ("beatles", ["The Beatles"], True),
    ("Paris.", ["paris"], True),
    ("an apple", ["apple"], True),
    ("an apple", ["a pear", "apple"], True),       # max over gold answers
    ("apple pie", ["apple"], False),               # not a substring match
    ("apple", ["apple pie"], False),
    ("U.S.", ["US"], True),
    (f"Z{U_UML}rich", [f"Z{U_DECOMP}rich"], True),
    (f"caf{E_DECOMP}", [f"Caf{E_ACUTE}"], True),
    ("cafe", [f"caf{E_ACUTE}"], False),            # accents are kept
    ("Paris", [], False),
])
def test_exact_match(prediction, answers, expected):
    assert exact_match(prediction, answers) is expected


# --------------------------------------------------------------------------- first hit / top-k

def test_first_hit_ranks():
    texts = {
        "a": "Ray Charles sang.",
        "b": "The party was fun.",
        "c": "Modern art museum.",
        "d": "Nothing here.",
    }
    results = {"q1": ["b", "c", "a"], "q2": ["d", "b"], "q3": ["a"], "extra": ["a"]}
    answers = {"q1": ["art"], "q2": ["art"], "q3": ["Ray Charles"], "q4": ["anything"]}
    ranks = first_hit_ranks(results, answers, texts.__getitem__)
    # q1: "b" has "party" (no token match), "c" has "art" -> rank 2; q2: never; q3: rank 1;
    # q4: no results at all -> None; "extra" has no answers -> not scored
    assert ranks == {"q1": 2, "q2": None, "q3": 1, "q4": None}
    # the regex rule has no token boundaries: "party" contains "art"
    assert first_hit_ranks(results, answers, texts.__getitem__, rule="dpr-regex")["q1"] == 1


def test_first_hit_ranks_rule_choice():
    texts = {"x": "They ate at Wendy\u2019s.", "y": "Wendy's burgers"}
    results = {"q": ["x", "y"]}
    answers = {"q": ["Wendy's"]}
    assert first_hit_ranks(results, answers, texts.__getitem__, rule="dpr-string") == {"q": 2}
    assert first_hit_ranks(results, answers, texts.__getitem__, rule="vsearch-string") == {"q": 1}


def test_topk_accuracy():
    hits = {"a": 1, "b": 3, "c": 7, "d": None, "e": 20}
    # @1: a -> 1/5; @5: a, b -> 2/5; @20: a, b, c, e -> 4/5
    expected = {"Success@1": 0.2, "Success@5": 0.4, "Success@20": 0.8}
    assert topk_accuracy(hits, [1, 5, 20]) == pytest.approx(expected)
    assert list(topk_accuracy(hits, [1, 5, 20])) == ["Success@1", "Success@5", "Success@20"]


def test_topk_accuracy_edge_cases():
    assert topk_accuracy({}, [1, 5, 20]) == {"Success@1": 0.0, "Success@5": 0.0, "Success@20": 0.0}
    assert topk_accuracy({"a": None, "b": None}, [1, 100]) == {"Success@1": 0.0, "Success@100": 0.0}
    # rank exactly at the cutoff counts; one past does not
    assert topk_accuracy({"a": 5, "b": 6}, [5]) == {"Success@5": 0.5}
    assert topk_accuracy({"a": 1, "b": 2, "c": 3}, [3]) == {"Success@3": 1.0}
