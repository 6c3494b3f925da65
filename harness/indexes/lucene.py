"""Lucene indexes through pyserini/Anserini (specs ``lucene:bm25``, ``lucene:impact``, ``lucene:pretokenized``).

``lucene:pretokenized`` indexes whitespace-separated tokens verbatim (QCR's FSQ code tokens such as
``0_c52 1_c113``, optionally followed by the document's words as :func:`analyze_words` gives them)
and searches them with BM25; see :func:`build_pretokenized` and :class:`LuceneIndex`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.datasets import Doc
from harness.errors import ConfigError, DataError
from harness.indexes import pyserini_env

SPECS = ("bm25",)


def search_threads() -> int:
    """Lucene's search threads where none is asked for: the cores the job was given (Snakemake exports
    a job's threads as ``OMP_NUM_THREADS``; a QCR or LightRetriever job books two and its Lucene
    search left one idle), else 1. A query's hits never depend on it: each query is searched whole
    by one thread. Indexing keeps one thread (several would add documents in another order)."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def doc_contents(doc: Doc, contents: str) -> str:
    """What Lucene indexes: DPR's BM25 uses title and text (``title_text``); or text alone."""
    if contents == "title_text":
        return f"{doc.title}\n{doc.text}" if doc.title else doc.text
    if contents == "text":
        return doc.text
    raise ConfigError(f"config key methods.bm25.contents: {contents!r} (use title_text or text)")


def build(spec: str, docs: Iterable[Doc], out: Path, *, contents: str = "title_text", threads: int = 1) -> int:
    """Index ``docs`` into folder ``out`` (which must not exist yet); returns the document count."""
    if spec not in SPECS:
        raise ConfigError(f"unknown lucene spec {spec!r}; known: {', '.join(SPECS)}")
    rows = ({"id": d.id, "contents": doc_contents(d, contents)} for d in docs)
    # postings only, no stored documents: nothing reads a document back from the index (a search returns
    # ids), and SVDR Table 3 compares the index's storage with BM25's 2.3 GB for the 21M passages, which
    # cannot hold their text (the stored raw JSON was 72 % of the rehearsal's BM25 index of 2,067 passages)
    return index_jsonl(rows, out, "JsonCollection", [], threads=threads)


def index_jsonl(rows: Iterable[Mapping[str, Any]], out: Path, collection: str, flags: Sequence[str], *,
                threads: int = 1) -> int:
    """Write ``rows`` (Anserini JSON documents) to a temporary JSONL file and index it into folder
    ``out`` (which must not exist yet) with Anserini's IndexCollection: ``collection`` (JsonCollection,
    JsonVectorCollection), DefaultLuceneDocumentGenerator and the extra ``flags``. Returns the rows
    written (``rows`` may raise while being written: nothing is indexed then)."""
    n = 0
    with tempfile.TemporaryDirectory(prefix="jsoncoll-") as coll:
        with open(Path(coll) / "docs.jsonl", "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        pyserini_env.index_collection([
            "-collection", collection, "-input", coll, "-index", str(out),
            "-generator", "DefaultLuceneDocumentGenerator", *flags, "-threads", str(threads), "-quiet",
        ])
    return n


class LuceneBM25:
    """A BM25 searcher over a Lucene index (Anserini's defaults k1=0.9, b=0.4 unless set)."""

    def __init__(self, index_dir: Path, k1: float = 0.9, b: float = 0.4) -> None:
        self.index_dir = str(index_dir)
        self.searcher = pyserini_env.lucene_searcher(self.index_dir)
        self.searcher.set_bm25(k1, b)
        self._hits: Any = None

    @property
    def num_docs(self) -> int:
        return int(self.searcher.num_docs)

    def search(self, texts: Sequence[str], qids: Sequence[str], k: int,
               threads: int | None = None) -> dict[str, list[tuple[str, float]]]:
        """What pyserini's ``LuceneSearcher.batch_search`` returns, as (docid, score) pairs per qid,
        read through :class:`pyserini_env.SortedHits`."""
        if self._hits is None:
            self._hits = pyserini_env.SortedHits(self.searcher.object, self.index_dir)
        hits = self._hits.search([str(t) for t in texts], [str(q) for q in qids], k,
                                 search_threads() if threads is None else threads)
        return {q: hits.get(q, []) for q in qids}


def analyze_words(texts: Sequence[str]) -> list[list[str]]:
    """The tokens Lucene's default English analyser makes of each text: the analyser ``lucene:bm25``
    indexes and searches with (Anserini's DefaultEnglishAnalyzer: Lucene's standard tokenizer,
    lower-casing, Lucene's 33 English stopwords dropped, Porter stemming; pyserini's
    ``get_lucene_analyzer()`` defaults). Why: a ``lucene:pretokenized`` document or query made of
    codes plus these tokens matches words the way BM25 on the text would."""
    if isinstance(texts, str):
        raise ConfigError("analyze_words: texts must be a sequence of strings, got one string",
                          fix="pass [text]")
    analyzer = _english_analyzer()
    return [[str(t) for t in analyzer.analyze(str(text))] for text in texts]


@lru_cache(maxsize=1)
def _english_analyzer() -> Any:
    """pyserini's Analyzer over the default English analyser (created once, then reused)."""
    pyserini_env.setup()
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    return Analyzer(get_lucene_analyzer())


# --------------------------------------------------------------------------------------------
# impact and pretokenized indexes and the uniform backend interface (harness.indexes)
# --------------------------------------------------------------------------------------------
KINDS = ("bm25", "impact", "pretokenized")  # the spec parts of backend ``lucene``
LUCENE_DIR = "lucene"  # the Lucene index inside an index folder (meta.json sits beside it; as methods.bm25)
#: a file beside the Lucene files naming the Java analyzer the index was built with; only
#: pretokenized indexes write it (Lucene keeps no record of the analyzer, and ignores unknown files)
ANALYZER_FILE = "harness-analyzer.txt"
WHITESPACE = "WhitespaceAnalyzer"
ENGLISH = "DefaultEnglishAnalyzer"
#: (similarity, query analyzer) of the opened searcher -> spec part (impact searchers have no analyzer)
_READ_BACK = {("BM25Similarity", ENGLISH): "bm25", ("BM25Similarity", WHITESPACE): "pretokenized",
              ("ImpactSimilarity", None): "impact"}
_OPTIONS = {"bm25": {"contents", "threads", "k1", "b", "out"}, "impact": {"threads", "out"},
            "pretokenized": {"threads", "k1", "b", "out"}}
#: Lucene's WhitespaceTokenizer cuts tokens longer than this into pieces (CharTokenizer's default)
MAX_TOKEN_CHARS = 255
#: Lucene's IndexSearcher.maxClauseCount: a query of more distinct tokens fails inside Anserini
#: (with an unhelpful "queryCount = 1 is not equal to completedTaskCount = 0")
MAX_QUERY_TOKENS = 1024


def _int_weights(vector: Mapping[str, Any], what: str) -> dict[str, int]:
    """{token: positive int} from a {token: weight} map: zero weights dropped; non-integer or
    negative weights and tokens that are empty or hold whitespace refused (``what`` names the vector)."""
    if not isinstance(vector, Mapping):
        raise ConfigError(f"lucene:impact: {what} must be a {{token: int weight}} mapping, got {type(vector).__name__}")
    out: dict[str, int] = {}
    for tok, w in vector.items():
        if type(w) is int and w > 0 and type(tok) is str and tok.split() == [tok]:  # the common case, at C speed
            out[tok] = w
            continue
        if not isinstance(tok, str) or not tok or any(c.isspace() for c in tok):
            raise ConfigError(f"lucene:impact: {what} has the token {tok!r}; tokens are non-empty, without whitespace",
                              fix="use the tokenizer's token strings (pre-tokenized)")
        try:
            ok = float(w).is_integer() and w >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ConfigError(f"lucene:impact: {what} gives token {tok!r} the weight {w!r}; impact weights are "
                              "non-negative integers", fix="quantise the weights, e.g. round(w * 100)")
        if int(w):
            out[tok] = int(w)
    return out


def build_impact(docs: Iterable[tuple[str, Mapping[str, Any]]], out: Path, *, threads: int = 1) -> int:
    """Index ``(docid, {token: int weight})`` pairs into folder ``out`` (which must not exist yet) the
    way SPLADE/uniCOIL indexes are built: Anserini's JsonVectorCollection with ``-impact -pretokenized``
    (each weight is stored as the token's term frequency; ImpactSimilarity scores sum q_w * d_w).
    Returns the number of documents written (Anserini skips documents with no token)."""
    rows = ({"id": str(docid), "contents": "", "vector": _int_weights(vector, f"document {docid!r}")}
            for docid, vector in _pairs(docs, "lucene:impact", "{token: weight}"))
    return index_jsonl(rows, out, "JsonVectorCollection", ["-impact", "-pretokenized"], threads=threads)


def _pairs(docs: Iterable[Any], spec: str, shape: str) -> Iterator[tuple[Any, Any]]:
    """Each ``(docid, value)`` item; any other item is a ConfigError naming its position."""
    for i, item in enumerate(docs):
        try:
            docid, value = item
        except (TypeError, ValueError):
            raise ConfigError(f"{spec}: document {i} is not a (docid, {shape}) pair") from None
        yield docid, value


def _token_text(value: Any, what: str, *, allow_empty: bool = False) -> str:
    """``value`` (a string of whitespace-separated tokens, or a sequence of token strings) as the
    tokens joined by single spaces. Python's whitespace includes every character Java's
    ``Character.isWhitespace`` (Lucene's WhitespaceTokenizer) splits on, so Lucene sees exactly these
    tokens. Refused: tokens holding whitespace or longer than Lucene's 255 characters, and no tokens
    at all unless ``allow_empty`` (``what`` names the document or query)."""
    if isinstance(value, str):
        tokens = value.split()
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        tokens = list(value)
        for tok in tokens:
            if not isinstance(tok, str) or not tok or any(c.isspace() for c in tok):
                raise ConfigError(f"lucene:pretokenized: {what} has the token {tok!r}; tokens are non-empty "
                                  "strings without whitespace", fix="split the token or replace its whitespace")
    else:
        raise ConfigError(f"lucene:pretokenized: {what} must be a string of whitespace-separated tokens or a "
                          f"list of tokens, got {type(value).__name__}")
    long = next((t for t in tokens if len(t) > MAX_TOKEN_CHARS), None)
    if long is not None:
        raise ConfigError(f"lucene:pretokenized: {what} has a token of {len(long)} characters ({long[:20]!r}...); "
                          f"Lucene's whitespace tokenizer cuts tokens at {MAX_TOKEN_CHARS}", fix="use shorter tokens")
    if not tokens and not allow_empty:
        raise ConfigError(f"lucene:pretokenized: {what} has no tokens (Anserini would skip it silently)",
                          fix="drop the document or give it at least one token")
    return " ".join(tokens)


def build_pretokenized(docs: Iterable[tuple[str, Any]], out: Path, *, threads: int = 1) -> int:
    """Index ``(docid, "tok1 tok2 ...")`` pairs (or ``(docid, [tok1, tok2, ...])``) into folder ``out``
    (which must not exist yet): Anserini's JsonCollection with ``-pretokenized``, which in Anserini
    1.7.1 (pyserini 1.6) only swaps the default English analyser for Lucene's WhitespaceAnalyzer, so
    tokens are indexed verbatim (case kept, no stemming, no stopwords); term frequencies and document
    lengths are token counts, as BM25 needs. Writes :data:`ANALYZER_FILE` beside the Lucene files so a
    loader opens the searcher with the same analyser. Returns the number of documents."""
    rows = ({"id": str(docid), "contents": _token_text(tokens, f"document {docid!r}")}
            for docid, tokens in _pairs(docs, "lucene:pretokenized", '"tok tok ..."'))
    n = index_jsonl(rows, out, "JsonCollection", ["-pretokenized"], threads=threads)
    (Path(out) / ANALYZER_FILE).write_text(WHITESPACE + "\n", encoding="utf-8")
    return n


def index_analyzer(path: Path) -> str:
    """The analyser a bm25/pretokenized Lucene index was built with: :data:`ANALYZER_FILE` if present,
    else the default English analyser (what ``lucene:bm25`` and methods.bm25 build with)."""
    marker = Path(path) / ANALYZER_FILE
    if not marker.is_file():
        return ENGLISH
    name = marker.read_text(encoding="utf-8").strip()
    if name not in (ENGLISH, WHITESPACE):
        raise DataError(f"{marker} names the analyzer {name!r}; known: {ENGLISH}, {WHITESPACE}",
                        fix="rebuild the index")
    return name


def _queries(queries: Any) -> tuple[list[str], list[Any]]:
    """(qids, queries) from {qid: query} or a sequence (qids "0", "1", ...)."""
    if isinstance(queries, Mapping):
        return [str(q) for q in queries], list(queries.values())
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence):
        raise ConfigError("lucene: queries must be a {qid: query} mapping or a sequence of queries")
    return [str(i) for i in range(len(queries))], list(queries)


class LuceneIndex:
    """A Lucene index folder and its searcher (specs ``lucene:bm25``, ``lucene:impact``, ``lucene:pretokenized``).

    ``search(queries, k)`` takes ``{qid: query}`` (or a sequence: qids ``"0"``, ``"1"``, ...) — query
    text for bm25 (Lucene analyses it), ``{token: int weight}`` for impact, whitespace-separated
    tokens (or a token list) for pretokenized — and returns hits per query, ``{qid: [(docid, score),
    ...]}`` best first (Lucene keeps the doc ids; there are no rows).
    Impact scores are the integer dot products sum q_w * d_w (as float32); among equal scores Anserini
    orders doc ids ascending (as strings) and lowers each later tied score by 1e-6 per place.

    Pretokenized queries are split on whitespace only (Lucene's WhitespaceAnalyzer) and scored with
    Lucene's BM25 (k1, b): sum over distinct query tokens t of ``count_q(t) * idf(t) * tf / (tf + k1 *
    (1 - b + b * dl / avgdl))``, idf = ln(1 + (N - df + 0.5) / (df + 0.5)). A token repeated in the
    query counts that many times: Anserini's BagOfWordsQueryGenerator turns the query into one
    SHOULD clause per distinct token, boosted by its count. Lucene caps a query at 1024 distinct
    tokens (:data:`MAX_QUERY_TOKENS`; more is a ConfigError). As for bm25, Anserini rounds every
    score to 4 decimals, and among equal rounded scores orders doc ids ascending and lowers each
    later tied score by 1e-6 per place.

    The searcher of a bm25 or pretokenized index uses the analyser the index was built with
    (:func:`index_analyzer`), so ``spec`` tells the two apart. ``nbytes`` is the size of the Lucene
    files: Lucene memory-maps them (JVM heap not counted).
    """

    def __init__(self, path: Path, kind: str, *, k1: float = 0.9, b: float = 0.4, threads: int = 1,
                 _tmp: str | None = None) -> None:
        if kind not in KINDS:
            raise ConfigError(f"unknown lucene spec {kind!r}; known: {', '.join(KINDS)}")
        self.path = Path(path)
        self.kind = kind
        self.k1, self.b, self.threads = k1, b, threads
        self._searcher: Any = None
        self._hits: Any = None  # pyserini_env.SortedHits of an impact index, made on first search
        if _tmp is not None:  # built into a temporary folder: removed with the object
            weakref.finalize(self, shutil.rmtree, _tmp, ignore_errors=True)

    @property
    def searcher(self) -> Any:
        """LuceneBM25 (bm25, pretokenized: with the index's own analyser) or pyserini's
        LuceneImpactSearcher (impact), opened on first use."""
        if self._searcher is None:
            if self.kind == "impact":
                self._searcher = pyserini_env.lucene_impact_searcher(str(self.path))
            else:
                analyzer = index_analyzer(self.path)
                searcher = LuceneBM25(self.path, k1=self.k1, b=self.b)
                if analyzer == WHITESPACE:
                    from pyserini.analysis import JWhiteSpaceAnalyzer

                    searcher.searcher.set_analyzer(JWhiteSpaceAnalyzer())
                self._searcher = searcher
        return self._searcher

    @property
    def spec(self) -> str:
        """``lucene:<kind>`` read back from the opened Java searcher: its similarity and, for BM25,
        the class of its query analyser (WhitespaceAnalyzer: pretokenized; DefaultEnglishAnalyzer: bm25)."""
        if self.kind == "impact":
            java, analyzer = self.searcher.object, None
        else:
            java = self.searcher.searcher.object
            analyzer = str(java.get_analyzer().getClass().getName()).rsplit(".", 1)[-1]
        name = pyserini_env.similarity_name(java)
        if (name, analyzer) not in _READ_BACK:
            raise DataError(f"{self.path}: the Lucene searcher uses {name} with {analyzer}, which no lucene spec names")
        return f"lucene:{_READ_BACK[name, analyzer]}"

    @property
    def nbytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    @property
    def num_docs(self) -> int:
        return int(self.searcher.num_docs)

    def save(self, folder: Path) -> Path:
        """Copy the Lucene files to ``folder/lucene`` (nothing to do when they are there already)."""
        target = Path(folder) / LUCENE_DIR
        if target.exists() and target.resolve() == self.path.resolve():
            return target
        if target.exists():
            raise ConfigError(f"{target} exists already", fix="save into a fresh folder")
        shutil.copytree(self.path, target, ignore=shutil.ignore_patterns("write.lock"))
        return target

    def search(self, queries: Any, k: int, *, threads: int | None = None) -> dict[str, list[tuple[str, float]]]:
        """Top-k hits per query (see the class doc)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"lucene:{self.kind}: k must be a positive integer, got {k!r}")
        qids, qs = _queries(queries)
        threads = self.threads if threads is None else threads
        if self.kind == "bm25":
            return self.searcher.search([str(q) for q in qs], qids, k, threads=threads)
        if self.kind == "pretokenized":
            texts = [_token_text(q, f"query {qid!r}", allow_empty=True) for qid, q in zip(qids, qs)]
            for qid, text in zip(qids, texts):
                if len(set(text.split())) > MAX_QUERY_TOKENS:
                    raise ConfigError(f"lucene:pretokenized: query {qid!r} has {len(set(text.split()))} distinct "
                                      f"tokens; Lucene takes at most {MAX_QUERY_TOKENS}",
                                      fix="shorten the query (e.g. fewer codes or words)")
            live = [i for i, t in enumerate(texts) if t]  # an empty query matches nothing: not sent
            out = {q: [] for q in qids}
            if live:
                out.update(self.searcher.search([texts[i] for i in live], [qids[i] for i in live], k, threads=threads))
            return out
        encoded = [_int_weights(q, f"query {qid!r}") for qid, q in zip(qids, qs)]
        live = [i for i, q in enumerate(encoded) if q]  # an empty query matches nothing: not sent
        out: dict[str, list[tuple[str, float]]] = {q: [] for q in qids}
        if live:
            if self._hits is None:
                self._hits = pyserini_env.SortedHits(self.searcher.object, str(self.path))
            hits = self._hits.search(_impact_queries(self.searcher, [encoded[i] for i in live]),
                                     [qids[i] for i in live], k, threads)
            for i in live:
                out[qids[i]] = hits.get(qids[i], [])
        return out


def _impact_queries(searcher: Any, encoded: Sequence[Mapping[str, int]]) -> list[Any]:
    """The Java queries Anserini's SimpleImpactSearcher builds for pyserini's pre-encoded
    ``batch_search``: pyserini keeps the tokens the index knows (``searcher.idf``) whose idf exceeds
    ``searcher.min_idf`` in a ``HashMap<String, Integer>``, and Anserini copies it, in its iteration
    order, into a ``HashMap<String, Float>`` (its ``intToFloat``): the same insertions here, so the
    Boolean query gets its clauses in the same order (scores are summed in that order)."""
    from jnius import autoclass

    jmap, jint, jfloat = autoclass("java.util.HashMap"), autoclass("java.lang.Integer"), autoclass("java.lang.Float")
    queries = []
    for query in encoded:
        ints = jmap()
        for token, weight in query.items():
            if token in searcher.idf and searcher.idf[token] > searcher.min_idf:
                ints.put(token, jint(weight))
        floats = jmap()
        for token in ints.keySet().toArray():
            floats.put(token, jfloat(float(query[token])))
        queries.append(floats)
    return queries


class LuceneBackend:
    """Backend ``lucene``: ``bm25`` over Docs (text), ``impact`` over (docid, {token: int weight}) pairs,
    ``pretokenized`` over (docid, "tok1 tok2 ...") pairs."""

    name = "lucene"

    @staticmethod
    def check_spec(part: str) -> None:
        from harness.indexes import bad_spec

        if part not in KINDS:
            raise bad_spec(f"lucene:{part}", "not a lucene index kind", [f"lucene:{k}" for k in KINDS],
                           " or ".join(f"'lucene:{k}'" for k in KINDS))

    @staticmethod
    def _options(part: str, options: Mapping[str, Any]) -> None:
        bad = sorted(set(options) - _OPTIONS[part])
        if bad:
            raise ConfigError(f"lucene:{part}: unknown option(s) {', '.join(bad)}",
                              fix=f"use {', '.join(sorted(_OPTIONS[part]))}")

    @staticmethod
    def build(part: str, payload: Iterable[Any], **options: Any) -> LuceneIndex:
        """Build into ``out`` (a folder that must not exist), else into a temporary folder that
        ``save`` copies from. bm25 options: contents (title_text | text), threads, k1, b; impact: threads;
        pretokenized: threads, k1, b (BM25 at search time; defaults 0.9, 0.4)."""
        LuceneBackend.check_spec(part)
        LuceneBackend._options(part, options)
        threads = int(options.get("threads", 1))
        tmp = None
        out = options.get("out")
        if out is None:
            tmp = tempfile.mkdtemp(prefix="lucene-")
            out = Path(tmp) / LUCENE_DIR
        if part == "bm25":
            build("bm25", payload, Path(out), contents=options.get("contents", "title_text"), threads=threads)
            return LuceneIndex(Path(out), part, k1=options.get("k1", 0.9), b=options.get("b", 0.4),
                               threads=threads, _tmp=tmp)
        if part == "pretokenized":
            build_pretokenized(payload, Path(out), threads=threads)
            return LuceneIndex(Path(out), part, k1=options.get("k1", 0.9), b=options.get("b", 0.4),
                               threads=threads, _tmp=tmp)
        build_impact(payload, Path(out), threads=threads)
        return LuceneIndex(Path(out), part, threads=threads, _tmp=tmp)

    @staticmethod
    def load(folder: Path, part: str, **options: Any) -> LuceneIndex:
        """The Lucene index in ``folder/lucene``; options: k1, b (bm25, pretokenized), threads."""
        LuceneBackend.check_spec(part)
        LuceneBackend._options(part, {k: v for k, v in options.items() if k != "out"})
        path = Path(folder) / LUCENE_DIR
        if not path.is_dir():
            raise DataError(f"{path} does not exist", fix="rebuild the index (its folder is incomplete)")
        return LuceneIndex(path, part, k1=options.get("k1", 0.9), b=options.get("b", 0.4),
                           threads=int(options.get("threads") or search_threads()))
