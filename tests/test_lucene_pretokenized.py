"""Index kind ``lucene:pretokenized`` (QCR's code tokens in Lucene, BM25) and ``analyze_words``:
BM25 scores against Lucene's formula by hand, verbatim tokens, repeated query tokens, save/load
through meta.json, spec mismatches, refused payloads."""
from __future__ import annotations

import math

import pytest

from harness.datasets import Doc
from harness.errors import ConfigError, DataError
from harness.indexes import build_index, index_bytes, load_index
from harness.indexes.lucene import ANALYZER_FILE, LUCENE_DIR, analyze_words
from harness.meta import write_meta

# Every document has 4 tokens (avgdl = 4): Lucene's lossy length norm plays no part (and lengths
# below 24 are stored exactly anyway). Token statistics, N = 5:
#   0_c52: df 1 (d1: tf 2)      1_c7: df 2 (d1: tf 1, d3: tf 3)      0_C52: df 1 (d2: tf 1)
#   1_c52: df 1 (d2: tf 1)      w: df 2 (d3: tf 1, d5: tf 1)
DOCS = [
    ("d1", "0_c52 1_c7 0_c52 x"),
    ("d2", "0_C52 1_c52 y z"),
    ("d3", "1_c7 1_c7 1_c7 w"),
    ("d4", ["a", "b", "c", "d"]),  # a token list works as well
    ("d5", "w river flow sea"),
]
N = 5


def lucene_bm25(tf: int, df: int, dl: int = 4, avgdl: float = 4.0, k1: float = 0.9, b: float = 0.4) -> float:
    """Lucene 9's BM25Similarity (no (k1 + 1) factor)."""
    idf = math.log(1 + (N - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


def close(got: float, want: float) -> bool:
    """Anserini rounds every score to 4 decimals (ScoreTiesAdjusterReranker): at most 5e-5 off,
    plus float32 rounding inside Lucene."""
    return abs(got - want) <= 5e-5 + 1e-6


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_index("lucene:pretokenized", DOCS, out=tmp_path_factory.mktemp("pretok") / LUCENE_DIR)


def test_spec_and_counts(index):
    assert index.spec == "lucene:pretokenized"
    assert index.num_docs == 5
    assert (index.path / ANALYZER_FILE).read_text().strip() == "WhitespaceAnalyzer"


def test_bm25_scores_equal_lucene_formula_by_hand(index):
    hits = index.search({"q1": "0_c52", "q2": "1_c7", "q3": "0_c52 w"}, 10)
    # by hand: idf(df 1) = ln(1 + 4.5/1.5) = ln 4 = 1.386294; idf(df 2) = ln(1 + 3.5/2.5) = ln 2.4 = 0.875469
    # d1/0_c52: 1.386294 * 2 / (2 + 0.9) = 0.956065
    assert [d for d, _ in hits["q1"]] == ["d1"]
    assert close(hits["q1"][0][1], 0.9561)
    assert close(hits["q1"][0][1], lucene_bm25(tf=2, df=1))
    # 1_c7: d3 (tf 3) 0.875469 * 3 / 3.9 = 0.673438 above d1 (tf 1) 0.875469 / 1.9 = 0.460773
    assert [d for d, _ in hits["q2"]] == ["d3", "d1"]
    assert close(hits["q2"][0][1], 0.6734) and close(hits["q2"][1][1], 0.4608)
    assert close(hits["q2"][0][1], lucene_bm25(3, 2)) and close(hits["q2"][1][1], lucene_bm25(1, 2))
    # a query's tokens add up: d1 has only 0_c52, d3 and d5 only w (tf 1, df 2)
    assert hits["q3"][0][0] == "d1"
    got = dict(hits["q3"])
    assert set(got) == {"d1", "d3", "d5"}
    assert close(got["d1"], lucene_bm25(2, 1))
    assert close(got["d3"], lucene_bm25(1, 2)) and close(got["d5"], lucene_bm25(1, 2))


def test_k1_b_options_reach_the_searcher(tmp_path):
    docs = [("s", "t u"), ("l", "t u v w x y z q")]  # lengths 2 and 8: avgdl 5
    index = build_index("lucene:pretokenized", docs, k1=1.2, b=0.75)
    hits = dict(index.search({"q": "t"}, 5)["q"])
    idf = math.log(1 + (2 - 2 + 0.5) / (2 + 0.5))  # ln 1.2 = 0.182322
    assert close(hits["s"], idf / (1 + 1.2 * (0.25 + 0.75 * 2 / 5)))  # 0.182322 / 1.66 = 0.109833
    assert close(hits["l"], idf / (1 + 1.2 * (0.25 + 0.75 * 8 / 5)))  # 0.182322 / 2.74 = 0.066541
    assert close(hits["s"], 0.1098) and close(hits["l"], 0.0665)


def test_tokens_are_verbatim(index):
    hits = index.search({"lower": "0_c52", "upper": "0_C52", "other": "1_c52", "stem": "rivers", "stop": "the"}, 10)
    assert [d for d, _ in hits["lower"]] == ["d1"]  # not d2's 0_C52 nor 1_c52
    assert [d for d, _ in hits["upper"]] == ["d2"]  # case kept
    assert [d for d, _ in hits["other"]] == ["d2"]  # 1_c52 is not 0_c52
    assert hits["stem"] == []  # no stemming: "rivers" is not d5's "river"
    assert hits["stop"] == []  # no stopword list either: "the" is just absent


def test_repeated_query_tokens_count_as_often_as_they_occur(index):
    # Anserini's BagOfWordsQueryGenerator: one clause per distinct token, boosted by its count
    hits = index.search({"once": "1_c7", "twice": "1_c7 1_c7", "mixed": ["1_c7", "0_c52", "1_c7"]}, 10)
    once, twice, mixed = (dict(hits[q]) for q in ("once", "twice", "mixed"))
    assert close(twice["d3"], 2 * lucene_bm25(3, 2)) and close(twice["d1"], 2 * lucene_bm25(1, 2))
    assert close(once["d3"], lucene_bm25(3, 2))  # twice the single-token score (up to the rounding)
    assert close(mixed["d1"], 2 * lucene_bm25(1, 2) + lucene_bm25(2, 1))


def test_empty_and_unknown_queries_find_nothing(index):
    assert index.search({"empty": "  ", "none": [], "unknown": "9_c9"}, 3) == {"empty": [], "none": [], "unknown": []}
    with pytest.raises(ConfigError, match="'bad'"):
        index.search({"bad": ["a b"]}, 3)


def test_query_token_limit(tmp_path):
    index = build_index("lucene:pretokenized", [("d", " ".join(f"t{i}" for i in range(1100)))])
    at_limit = " ".join(f"t{i}" for i in range(1024)) + " t0 t1"  # 1024 distinct: fine
    assert [d for d, _ in index.search({"q": at_limit}, 3)["q"]] == ["d"]
    with pytest.raises(ConfigError, match="query 'long' has 1025 distinct tokens"):
        index.search({"long": " ".join(f"t{i}" for i in range(1025))}, 3)


def test_analyze_words_is_the_bm25_analyser():
    assert analyze_words(["The rivers are flowing into the grey seas", "0_c52 Running dogs"]) == [
        ["river", "flow", "grei", "sea"],  # stopwords the/are/into dropped, Porter stems, lower case
        ["0_c52", "run", "dog"],
    ]
    stop = ("a an and are as at be but by for if in into is it no not of on or such that the their then there "
            "these they this to was will with")
    assert analyze_words([stop, "his we"]) == [[], ["hi", "we"]]  # Lucene's 33 English stopwords only
    assert analyze_words([]) == []
    with pytest.raises(ConfigError, match="one string"):
        analyze_words("a sentence")


def test_codes_plus_analysed_words_match_like_text(index):
    words = analyze_words(["The grey seas"])[0]  # -> grei, sea: d5 holds "sea"
    hits = index.search({"q": " ".join(["1_c7", *words])}, 10)
    assert {d for d, _ in hits["q"]} == {"d1", "d3", "d5"}


def test_save_load_round_trip_through_meta(index, tmp_path):
    queries = {"q1": "0_c52 w", "q2": "1_c7 1_c7"}
    before = index.search(queries, 10)
    folder = tmp_path / "idx"
    folder.mkdir()
    index.save(folder)
    write_meta(folder, "index", spec="lucene:pretokenized")
    assert (folder / LUCENE_DIR / ANALYZER_FILE).is_file()
    assert index_bytes(folder) > 0
    loaded = load_index(folder)
    assert loaded.spec == "lucene:pretokenized"
    assert loaded.search(queries, 10) == before
    other = load_index(folder, k1=1.2, b=0.75).search({"q": "1_c7"}, 10)["q"]
    assert close(dict(other)["d3"], lucene_bm25(3, 2, k1=1.2, b=0.75))


def test_meta_spec_mismatch_fails(index, tmp_path):
    pre = tmp_path / "pre"
    pre.mkdir()
    index.save(pre)
    write_meta(pre, "index", spec="lucene:bm25")
    with pytest.raises(DataError, match="reads back as 'lucene:pretokenized'"):
        load_index(pre)

    bm25 = build_index("lucene:bm25", [Doc("a", "", "grey sea"), Doc("b", "", "river")], contents="text")
    assert bm25.spec == "lucene:bm25"
    text = tmp_path / "text"
    text.mkdir()
    bm25.save(text)
    write_meta(text, "index", spec="lucene:pretokenized")
    with pytest.raises(DataError, match="reads back as 'lucene:bm25'"):
        load_index(text)


@pytest.mark.parametrize("payload, match", [
    ([("ok", "a"), ("empty", "   ")], "'empty' has no tokens"),
    ([("ok", "a"), ("nil", [])], "'nil' has no tokens"),
    ([("spaced", ["a", "b c"])], "'spaced' has the token 'b c'"),
    ([("blank", ["a", ""])], "'blank' has the token ''"),
    ([("long", "x" * 256)], "'long' has a token of 256 characters"),
    ([("num", 5)], "'num' must be a string"),
    (["not-a-pair"], "document 0 is not a"),
])
def test_bad_payloads_are_refused(payload, match):
    with pytest.raises(ConfigError, match=match):
        build_index("lucene:pretokenized", payload)


def test_unknown_option_is_refused():
    with pytest.raises(ConfigError, match="unknown option.*contents"):
        build_index("lucene:pretokenized", [("a", "b")], contents="text")
