"""harness.decontam.simhash against PyPI simhash==2.1.2 (the package tDRO uses), bit for bit."""
from __future__ import annotations

import hashlib
import logging
import random
import re

import numpy as np
import pytest

from harness.bench.decontam import TEST_SOURCES, TRAIN_SOURCES, default_data_dir, load_queries
from harness.decontam import simhash as sh
from harness.decontam.simhash import (
    FingerprintIndex,
    feature_hash,
    fingerprint,
    fingerprints,
    format_query,
    md5_tail64,
    near_duplicates,
    windows,
)
from harness.errors import ConfigError, DataError

simhash = pytest.importorskip("simhash")
logging.getLogger("simhash").setLevel(logging.ERROR)

DATA = default_data_dir()
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data folder {DATA} is absent")


def package_value(text: str) -> int:
    """``Simhash(format_query(text)).value``; for a window repeated > 255 times the package
    raises OverflowError under NumPy 2, and ``Simhash(windows)`` gives the value it defines."""
    q = format_query(text)
    try:
        return simhash.Simhash(q).value
    except OverflowError:
        return simhash.Simhash(windows(q)).value


def package_near_dups(train_objs: list, test_objs: list, k: int) -> list[list[int]]:
    index = simhash.SimhashIndex([(str(j), s) for j, s in enumerate(test_objs)], k=k)
    return [sorted(int(x) for x in index.get_near_dups(s)) for s in train_objs]


# ------------------------------------------------------------------------ hand-checked


def h(feature: str) -> int:
    return int.from_bytes(hashlib.md5(feature.encode("utf-8")).digest()[-8:], "big")


def test_windows_follow_the_package_tokenizer() -> None:
    assert windows("") == [""]
    assert windows("ab") == ["ab"]
    assert windows("Hello, World!") == ["hell", "ello", "llow", "lowo", "owor", "worl", "orld"]
    assert windows("a b c d") == ["abcd"]
    assert windows("北京 大学") == ["北京大学"]


def test_format_query_drops_underscores_and_fixes_sigma_only_for_chinese() -> None:
    assert format_query("a_b__c") == "abc"
    assert format_query("ΑΣ") == "ΑΣ"  # no Chinese: lower() decides (final sigma)
    assert format_query("ΑΣ中文") == "Ασ中文"  # jieba would isolate Σ -> it lower-cases to σ


def test_single_window_is_its_hash() -> None:
    for text, feat in [("", ""), ("abc", "abc"), ("A_B", "ab"), ("?!", ""), ("Abcd", "abcd"), ("中文", "中文")]:
        assert fingerprint(text) == h(feat)
        assert fingerprint(text) == package_value(text)


def test_majority_of_two_and_three_windows() -> None:
    a, b = h("abcd"), h("bcde")
    assert fingerprint("abcde") == a & b  # 2 windows: a bit needs both (more than half)
    x, y, z = h("abcd"), h("bcde"), h("cdef")
    assert fingerprint("ABC-DEF") == (x & y) | (x & z) | (y & z)


def test_repeated_window_counts_and_overflow_case() -> None:
    # "aaaa" 197 times: one feature, weight 197 -> its hash; 297 times crashes the package
    assert fingerprint("a" * 200) == h("aaaa") == simhash.Simhash("a" * 200).value
    assert fingerprint("a" * 300) == h("aaaa")
    with pytest.raises(OverflowError):
        simhash.Simhash("a" * 300)


def test_fingerprint_input_errors() -> None:
    with pytest.raises(DataError, match="text #1"):
        fingerprints(["ok", None])  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        fingerprints("one string")
    assert fingerprints([]).shape == (0,)


def test_index_hand_cases_around_block_edges() -> None:
    # k=2: blocks are bits [0,21), [21,42), [42,64)
    base = 0x0123456789ABCDEF
    flips = {0: [], 1: [0], 2: [20, 21], 3: [41, 42, 63], 4: [63], 5: [0, 21, 42], 6: [10, 11]}
    test = np.array([base ^ sum(1 << b for b in bits) for bits in flips.values()], dtype=np.uint64)
    qi, tj = FingerprintIndex(test, 2).query(np.array([base], dtype=np.uint64))
    assert qi.tolist() == [0, 0, 0, 0, 0] and tj.tolist() == [0, 1, 2, 4, 6]
    qi, tj = FingerprintIndex(test, 0).query(np.array([base], dtype=np.uint64))
    assert tj.tolist() == [0]
    qi, tj = FingerprintIndex(test, 3).query(np.array([base], dtype=np.uint64))
    assert tj.tolist() == [0, 1, 2, 3, 4, 5, 6]
    qi, tj = FingerprintIndex(test, 64).query(np.array([base, 0], dtype=np.uint64))
    assert qi.tolist() == [0] * 7 + [1] * 7


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5, 10])
def test_index_equals_brute_force(k: int) -> None:
    rng = np.random.default_rng(k)
    test = rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64, endpoint=True)
    test[:50] = test[50:100]  # repeated fingerprints
    # queries: exact copies and copies with 1..6 random bit flips, plus random ones
    src = test[rng.integers(0, len(test), 2000)]
    flips = np.zeros(len(src), dtype=np.uint64)
    for _ in range(6):
        use = rng.random(len(src)) < 0.6
        flips[use] ^= np.uint64(1) << rng.integers(0, 64, use.sum()).astype(np.uint64)
    queries = np.concatenate([src ^ flips, rng.integers(0, 2**63, 500, dtype=np.uint64)])
    qi, tj = FingerprintIndex(test, k).query(queries, chunk=700, max_candidates=1000)
    d = np.bitwise_count(queries[:, None] ^ test[None, :])
    bi, bj = np.nonzero(d <= k)
    assert qi.tolist() == bi.tolist() and tj.tolist() == bj.tolist()


def test_k_is_checked() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError):
            near_duplicates(["a"], ["a"], k=bad)  # type: ignore[arg-type]


def test_near_duplicates_hand_case() -> None:
    test = ["Where did Abraham Lincoln die?", "What is the capital of France", "???"]
    train = ["where did abraham lincoln died", "what is the capital of france?", "A totally unrelated query", "!!"]
    assert near_duplicates(train, test, k=2) == [[0], [1], [], [2]]
    assert near_duplicates(train, test, k=0) == [[], [1], [], [2]]


# --------------------------------------------------------------- edge cases and real data

EDGE = [
    "", " ", "a", "ab", "abc", "abcd", "?", "...", "___", "_a_", "a_b_c_d_e", "A", "AB", "ABC",
    "\x00", "a\x00b", "ab\x00cd", "\x00\x00", "\ud800abc", "abc\udfff", "tab\there", "new\nline",
    "ΑΣ", "ΑΣ.", "ΑΣ中文", "中文ABΣ", "ὈΔΥΣΣΕΎΣ", "İstanbul", "İΣ", "ǅemal", "ß", "ﬁsh", "Straße",
    "𠀀", "𠀀𠀁𠀂𠀃𠀄", "a𝐀b", "😀😀", "x😀y", "e\u0301te\u0301", "\u200bzero\u200bwidth", "①②③④",
    "北京大学", "北", "北京", "中文_测试", "ｆｕｌｌｗｉｄｔｈ", "١٢٣٤", "Привет мир", "नमस्ते दुनिया",
    "a" * 200, "a" * 300, "ab" * 400, "x" * 4, "abcd" * 70, "word " * 300, "北京" * 200,
]


def perturb(text: str, rng: random.Random) -> list[str]:
    """Edits of 1-3 characters, case changes, punctuation, underscores, truncation."""
    out = []
    alphabet = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 ?!.,'-_中文é"
    for n_edits in (1, 2, 3):
        t = list(text)
        for _ in range(n_edits):
            op = rng.randrange(3)
            i = rng.randrange(len(t) + 1)
            if op == 0 or not t:
                t.insert(i, rng.choice(alphabet))
            elif op == 1:
                del t[min(i, len(t) - 1)]
            else:
                t[min(i, len(t) - 1)] = rng.choice(alphabet)
        out.append("".join(t))
    out += [text.upper(), text.swapcase(), text.title(), text.rstrip("?.!") + "?", re.sub(r"\s+", "_", text),
            "_" + text + "_", re.sub(r"[^\w\s]", "", text), text[:3], text[:2]]
    return out


@pytest.fixture(scope="module")
def real_queries() -> list[str]:
    if not DATA.is_dir():
        pytest.skip(f"shared data folder {DATA} is absent")
    pool = [q for _, q in load_queries(DATA, TEST_SOURCES + TRAIN_SOURCES)]
    if len(pool) < 1000:
        pytest.skip(f"too few queries under {DATA}")
    rng = random.Random(0)
    sample = rng.sample(pool, 2500)
    zh = [q for q in pool if re.search("[\u4e00-\u9fff]", q)]
    return sample + rng.sample(zh, min(500, len(zh)))


def test_edge_cases_match_package() -> None:
    expected = [package_value(t) for t in EDGE]
    assert fingerprints(EDGE).tolist() == expected  # one batch: capital sigma -> the string path
    assert fingerprints(EDGE, batch_size=1).tolist() == expected  # most texts alone: the table path
    no_sigma = [(t, v) for t, v in zip(EDGE, expected) if "Σ" not in t and "\x00" not in t]
    assert fingerprints([t for t, _ in no_sigma]).tolist() == [v for _, v in no_sigma]
    for text, value in zip(EDGE, expected):
        assert fingerprint(text) == value, repr(text)


def test_vectorised_md5_equals_hashlib() -> None:
    rng = np.random.default_rng(0)
    pool = np.array([0x30, 0x61, 0x7A, 0x7F, 0x80, 0xE9, 0x3B1, 0x7FF, 0x800, 0x4E2D, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF])
    units = rng.choice(pool, (5000, 4)).astype(np.uint32)
    for i, n in enumerate(rng.integers(0, 5, len(units))):
        units[i, n:] = 0
    expected = [h("".join(chr(c) for c in row if c)) for row in units.tolist()]
    assert md5_tail64(units).tolist() == expected
    assert md5_tail64(np.zeros((0, 4), dtype=np.uint32)).shape == (0,)


@needs_data
def test_fingerprints_match_package_on_real_and_perturbed(real_queries: list[str]) -> None:
    rng = random.Random(1)
    texts = list(real_queries)
    for q in real_queries[:1200]:
        texts += perturb(q, rng)
    texts += EDGE
    expected = np.array([package_value(t) for t in texts], dtype=np.uint64)
    assert np.array_equal(fingerprints(texts), expected)
    # the batch boundaries and the feature cache must not matter
    sh._cache = sh._HashCache(bits=4)
    assert np.array_equal(fingerprints(texts, batch_size=7), expected)
    assert np.array_equal(fingerprints(texts[::-1], batch_size=997), expected[::-1])


@needs_data
def test_near_duplicates_match_package(real_queries: list[str]) -> None:
    rng = random.Random(2)
    test = real_queries[:2000]
    train = real_queries[1500:2500]  # exact overlap with the test side
    for q in test[:700]:
        train += perturb(q, rng)[:5]  # 1-3 character edits, case, punctuation
    train += EDGE + ["", "?", "ab"]
    test = test + ["", "?!", "abc", "___x"]
    test_objs = [simhash.Simhash(package_value(t)) for t in test]
    train_objs = [simhash.Simhash(package_value(t)) for t in train]
    for k in (0, 1, 2, 3):
        expected = package_near_dups(train_objs, test_objs, k)
        got = near_duplicates(train, test, k=k)
        assert got == expected, f"k={k}"
        if k == 2:
            assert sum(1 for g in got if g) > 1000  # the check is not vacuous


@needs_data
def test_matches_tdro_with_jieba_when_available(real_queries: list[str]) -> None:
    jieba = pytest.importorskip("jieba", reason="jieba is not installed (optional cross-check of format_query)")
    jieba.setLogLevel(logging.ERROR)
    han = re.compile("[\u4e00-\u9fa5]")

    def tdro_format(q: str) -> str:  # tDRO data/inspect_duplicates.py
        q = q.replace("_", "")
        return " ".join(jieba.lcut(q)) if han.search(q) else q

    rng = random.Random(3)
    zh = [q for q in real_queries if han.search(q)]
    texts = zh + ["ΑΣ中文", "中文ABΣ", "中文ΑΣ?", "ΣΑΣ 中", "ὈΔΥΣΣΕΎΣ 中国", "中_文_Σ", "İΣ中"]
    for q in zh[:200]:
        i = rng.randrange(len(q) + 1)
        texts.append(q[:i] + rng.choice(["ΑΣ", "Σ", "aΣ", "AΣ.", "_x_"]) + q[i:])
    expected = np.array([simhash.Simhash(tdro_format(t)).value for t in texts], dtype=np.uint64)
    assert np.array_equal(fingerprints(texts), expected)


def test_feature_hash_is_the_package_hashfunc() -> None:
    for feat in ["", "abcd", "中文测试", "ß"]:
        digest = simhash._hashfunc(feat.encode("utf-8"))
        assert feature_hash(feat) == int.from_bytes(digest[-8:], "big")
