"""harness.analysis.codebook: QCR's codebook analyses (Figures 2, 3, A.2 and Table 2), hand-checked."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness.methods.qcr.codebook import (
    code_tokens,
    collapsed,
    grid_summary,
    match_count_summary,
    match_counts,
    plot_grid,
    plot_match_counts,
    plot_usage,
    pmi_words,
    usage,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == PNG_SIGNATURE


# -- code_tokens --------------------------------------------------------------------------------

def test_code_tokens_positional_and_plain():
    codes = np.array([[52, 113, 23], [0, 3124, 52]])
    assert code_tokens(codes) == [["0_c52", "1_c113", "2_c23"], ["0_c0", "1_c3124", "2_c52"]]
    assert code_tokens(codes, positional=False) == [["c52", "c113", "c23"], ["c0", "c3124", "c52"]]
    # Plain Python ints in the strings, whatever the dtype.
    assert code_tokens(codes.astype(np.uint16))[0][0] == "0_c52"


def test_code_tokens_rejects_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        code_tokens(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="non-negative"):
        code_tokens(np.array([[1, -2]]))
    with pytest.raises(ValueError, match="integer"):
        code_tokens(np.array([[1.5, 2.0]]))


# -- match_counts -------------------------------------------------------------------------------

def test_match_counts_positional_vs_plain():
    q = np.array([[5, 7, 5], [1, 2, 3], [4, 4, 4]])
    d = np.array([[5, 9, 7], [3, 2, 1], [0, 0, 4]])
    # Positional: only same code at the same position matches.
    #   pair 0: 0_c5 matches; 1_c7 (doc has 2_c7) and 2_c5 (doc has 0_c5) do not -> 1
    #   pair 1: only 1_c2 -> 1;  pair 2: only 2_c4 -> 1
    pos = match_counts(code_tokens(q), code_tokens(d))
    assert pos.tolist() == [1, 1, 1]
    assert pos.dtype == np.int64
    # Plain: every query occurrence of a code present anywhere in the doc counts, with multiplicity.
    #   pair 0: c5, c7, c5 all present -> 3;  pair 1: 3;  pair 2: c4 x3 present -> 3
    assert match_counts(code_tokens(q, False), code_tokens(d, False)).tolist() == [3, 3, 3]


def test_match_counts_multiplicity_is_the_querys():
    # Repeated query tokens count once per occurrence; repeated document tokens do not multiply.
    assert match_counts([["x", "y", "x"]], [["x"]]).tolist() == [2]
    assert match_counts([["x", "y"]], [["x", "x", "x"]]).tolist() == [1]
    assert match_counts([[], ["a"]], [["a"], []]).tolist() == [0, 0]


def test_match_counts_requires_aligned_pairs():
    with pytest.raises(ValueError, match="aligned"):
        match_counts([["a"]], [["a"], ["b"]])


# -- match_count_summary ------------------------------------------------------------------------

def test_match_count_summary_hand_example():
    s = match_count_summary({"positive": np.array([3, 3, 1, 2]), "random": np.array([0, 0, 1]),
                             "hard_negative": np.array([], dtype=int)})
    assert list(s) == ["positive", "random", "hard_negative"]
    pos = s["positive"]
    assert pos["n"] == 4
    assert pos["mean"] == pytest.approx(2.25)
    assert pos["median"] == pytest.approx(2.5)
    assert pos["std"] == pytest.approx(math.sqrt(2.75 / 4))  # population std
    assert pos["p10"] == pytest.approx(1.3)  # sorted [1, 2, 3, 3], linear at 0.3
    assert pos["p90"] == pytest.approx(3.0)
    # Shared integer bins 0..max(3) over all groups.
    assert pos["histogram"]["bin_edges"] == [0, 1, 2, 3, 4]
    assert pos["histogram"]["counts"] == [0, 1, 1, 2]
    assert pos["histogram"]["fractions"] == pytest.approx([0, 0.25, 0.25, 0.5])
    assert s["random"]["histogram"]["counts"] == [2, 1, 0, 0]
    assert s["random"]["median"] == 0.0
    empty = s["hard_negative"]
    assert empty["n"] == 0 and empty["mean"] is None and empty["histogram"]["counts"] == [0, 0, 0, 0]


def test_match_count_summary_rejects_negative():
    with pytest.raises(ValueError, match="non-negative"):
        match_count_summary({"x": np.array([1, -1])})


# -- usage / collapsed --------------------------------------------------------------------------

def test_usage_uniform_over_half_the_codebook():
    idx = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [0, 1, 2, 3]])  # uniform over 4 of 8 codes
    u = usage(idx, 8)
    assert u["n"] == 12 and u["codebook_size"] == 8
    assert u["used"] == 4
    assert u["fraction_used"] == pytest.approx(0.5)
    assert u["entropy"] == pytest.approx(math.log(4))
    assert u["perplexity"] == pytest.approx(4.0)
    assert u["perplexity_ratio"] == pytest.approx(0.5)
    assert u["max_entropy"] == pytest.approx(math.log(8))
    assert u["top_share"] == pytest.approx(0.25)
    assert u["counts"] == [3, 3, 3, 3]
    assert not collapsed(u, 0.5)
    assert collapsed(u, 0.6)


def test_usage_skewed_and_single_code():
    u = usage(np.array([2, 2, 2, 5]), 8)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert u["entropy"] == pytest.approx(h)
    assert u["perplexity"] == pytest.approx(math.exp(h))
    assert u["counts"] == [3, 1]
    assert u["top_share"] == pytest.approx(0.75)
    one = usage(np.array([7, 7, 7]), 3125)
    assert one["entropy"] == 0.0 and one["perplexity"] == pytest.approx(1.0) and one["used"] == 1
    assert collapsed(one, 0.01)


def test_usage_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match=r"code id 8 is outside the codebook \[0, 8\)"):
        usage(np.array([0, 8]), 8)
    with pytest.raises(ValueError, match=r"code id -1 is outside"):
        usage(np.array([-1, 3]), 8)
    with pytest.raises(ValueError, match="empty"):
        usage(np.array([], dtype=int), 8)
    with pytest.raises(ValueError, match="codebook_size"):
        usage(np.array([0]), 0)


# -- pmi_words ----------------------------------------------------------------------------------

# 4 documents; duplicates inside a document count once.
DOC_CODES = [[1, 1], [1], [2], [2]]
DOC_WORDS = [["a", "a", "b"], ["a", "c"], ["b", "c"], ["b", "c"]]
# N = 4; N_1 = N_2 = 2; N_a = 2, N_b = 3, N_c = 3.


def test_pmi_words_hand_computed():
    out = pmi_words(DOC_CODES, DOC_WORDS, codes=[1, 2], min_count=1)
    assert list(out) == [1, 2]
    # code 1: a in both of its docs: ln(2*4 / (2*2)) = ln 2; b, c once: ln(1*4 / (3*2)) = ln(2/3);
    # b and c tie and are ordered by word.
    assert [w for w, _ in out[1]] == ["a", "b", "c"]
    assert out[1][0][1] == pytest.approx(math.log(2))
    assert out[1][1][1] == pytest.approx(math.log(2 / 3))
    assert out[1][1][1] == out[1][2][1]  # exact tie
    # code 2: b, c in both its docs: ln(2*4 / (3*2)) = ln(4/3); a never co-occurs -> absent.
    assert out[2] == [("b", pytest.approx(math.log(4 / 3))), ("c", pytest.approx(math.log(4 / 3)))]


def test_pmi_words_min_count_top_and_code_choice():
    # min_count=3 drops "a" (2 documents).
    out = pmi_words(DOC_CODES, DOC_WORDS, codes=[1], min_count=3)
    assert [w for w, _ in out[1]] == ["b", "c"]
    assert [w for w, _ in pmi_words(DOC_CODES, DOC_WORDS, codes=[1], top=1, min_count=1)[1]] == ["a"]
    # codes=None: the n_codes codes in most documents, ties by smaller id.
    assert list(pmi_words(DOC_CODES, DOC_WORDS, n_codes=1, min_count=1)) == [1]
    more = DOC_CODES + [[2, 9]]
    words = DOC_WORDS + [["d"]]
    chosen = pmi_words(more, words, n_codes=2, min_count=1)
    assert list(chosen) == [2, 1]  # N_2 = 3 > N_1 = 2 = ... > N_9 = 1
    # A code in no document yields an empty list.
    assert pmi_words(DOC_CODES, DOC_WORDS, codes=[42], min_count=1) == {42: []}


def test_pmi_words_numpy_rows_and_alignment():
    codes = np.array([[1, 1], [1, 3], [2, 3], [2, 2]])
    out = pmi_words(codes, DOC_WORDS, codes=[1], min_count=1)
    assert out[1][0] == ("a", pytest.approx(math.log(2)))
    with pytest.raises(ValueError, match="aligned"):
        pmi_words(DOC_CODES, DOC_WORDS[:3])


# -- grid_summary -------------------------------------------------------------------------------

def test_grid_summary_with_missing_cell():
    points = {(512, 150): 0.6, (256, 150): 0.5, (256, 250): 0.55}
    g = grid_summary(points)
    assert g["batch_sizes"] == [256, 512]
    assert g["lengths"] == [150, 250]
    # values[length][batch_size]
    assert g["values"] == [[0.5, 0.6], [0.55, None]]
    assert grid_summary({}) == {"batch_sizes": [], "lengths": [], "values": []}


# -- plots --------------------------------------------------------------------------------------

def test_plot_match_counts_writes_png(tmp_path):
    rng = np.random.default_rng(0)
    summary = match_count_summary({"positive": rng.binomial(40, 0.3, 200),
                                   "hard_negative": rng.binomial(40, 0.15, 200),
                                   "random": rng.binomial(40, 0.02, 200)})
    path = plot_match_counts(summary, tmp_path / "fig2" / "matches.png", "qcr-sup / msmarco dev")
    assert path == tmp_path / "fig2" / "matches.png"
    assert _is_png(path)


def test_plot_usage_writes_png(tmp_path):
    rng = np.random.default_rng(0)
    usages = {"documents, entropy loss": usage(rng.integers(0, 3125, 20000), 3125),
              "queries, no entropy loss": usage(rng.zipf(1.5, 5000) % 3125, 3125)}
    path = plot_usage(usages, tmp_path / "usage.png", "qcr-sup / msmarco")
    assert _is_png(path)


def test_plot_grid_writes_png(tmp_path):
    g = grid_summary({(256, 150): 0.50, (512, 150): 0.58, (1024, 150): 0.63,
                      (256, 250): 0.55, (512, 250): 0.61})
    path = plot_grid(g, tmp_path / "grid.png", "qcr-sup / msmarco hard negatives")
    assert _is_png(path)
    path = plot_grid(g, str(tmp_path / "grid1000.png"), "x", metric="Success@1000")
    assert _is_png(path)
