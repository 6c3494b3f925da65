"""BM25 through pyserini/Lucene, checked against a numpy BM25 over the same Lucene analysis."""
from __future__ import annotations

import math

import pytest

from harness.datasets import Doc
from harness.indexes import lucene, pyserini_env

DOCS = [
    Doc("d1", "", "the river flows into the grey sea"),
    Doc("d2", "", "a town on the river"),
    Doc("d3", "", "copper kettles from the town"),
    Doc("d4", "", "grey kettles and grey cloth"),
    Doc("d5", "", "sea birds over the sea"),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    out = tmp_path_factory.mktemp("bm25") / "index"
    n = lucene.build("bm25", DOCS, out, contents="text", threads=1)
    assert n == len(DOCS)
    return out


def numpy_bm25(query: str, k1: float, b: float) -> dict[str, float]:
    pyserini_env.setup()
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    an = Analyzer(get_lucene_analyzer())
    docs = {d.id: an.analyze(d.text) for d in DOCS}
    avgdl = sum(len(t) for t in docs.values()) / len(docs)
    scores = {}
    for did, toks in docs.items():
        s = 0.0
        for term in set(an.analyze(query)):
            n = sum(1 for t in docs.values() if term in t)
            if n == 0:
                continue
            tf = toks.count(term)
            if tf == 0:
                continue
            idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
            s += idf * tf / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        if s > 0:
            scores[did] = s
    return scores


@pytest.mark.parametrize("query", ["grey sea", "town river", "kettles"])
def test_lucene_bm25_matches_formula(index, query):
    searcher = lucene.LuceneBM25(index, k1=0.9, b=0.4)
    got = searcher.search([query], ["q"], k=10)["q"]
    want = numpy_bm25(query, 0.9, 0.4)
    assert {d for d, _ in got} == set(want)
    for doc, score in got:
        assert score == pytest.approx(want[doc], rel=1e-4)
    assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)


def test_the_index_stores_postings_not_documents_and_searches_as_one_that_stores_them(index, tmp_path):
    """No stored fields (nothing reads a document back; SVDR Table 3 compares the index's storage with
    a postings index): the same hits and scores as the index with the raw documents stored, and smaller."""
    from harness.meta import folder_bytes

    stored = tmp_path / "stored"
    lucene.index_jsonl(({"id": d.id, "contents": d.text} for d in DOCS), stored, "JsonCollection", ["-storeRaw"])
    for q in ("grey sea", "town river", "kettles"):
        assert lucene.LuceneBM25(index).search([q], ["q"], 10) == lucene.LuceneBM25(stored).search([q], ["q"], 10)
    assert pyserini_env.lucene_searcher(str(index)).doc("d1").raw() is None
    assert pyserini_env.lucene_searcher(str(stored)).doc("d1").raw() is not None
    assert folder_bytes(index) < folder_bytes(stored)


def test_unknown_lucene_spec(tmp_path):
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown lucene spec"):
        lucene.build("bm26", DOCS, tmp_path / "x")


def test_lucene_searchers_import_without_pyserini_encode():
    """pyserini_env.lucene_module leaves out pyserini.encode's query encoders (openai, sklearn, torch:
    seconds per job), yet a name the searchers took from it still builds the real class, and
    pyserini.encode stays importable."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        from harness.indexes import pyserini_env
        m = pyserini_env.lucene_module()
        assert m.LuceneSearcher and m.LuceneImpactSearcher
        assert "pyserini.encode" not in sys.modules and "torch" not in sys.modules, "heavy imports"
        import pyserini.search.lucene._impact_searcher as imp
        enc = imp.QueryEncoder()                      # the placeholder: imports the real module now
        import pyserini.encode
        assert type(enc) is pyserini.encode.QueryEncoder and not enc.has_encoded_query
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
