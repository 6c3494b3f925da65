"""Strict, streaming readers for the raw files of the dataset families.

Every reader yields records one at a time (a 21M-passage file is never held in memory) and
names ``file:line`` in its errors. Malformed input (invalid JSON, a wrong number of columns,
bytes that are not UTF-8, a repeated id, qrels naming unknown documents) raises `DataError`,
unless the dataset's card (configs/datasets.yaml ``known_issues``) says the dataset contains
that kind of malformation: then `Issues` counts it, keeps the first examples, and the family
writes the counts into meta.json.

Formats (``format`` of a file in the registry) map to parsers in `QUERY_FORMATS`,
`DOC_FORMATS` and `QRELS_FORMATS`.
"""
from __future__ import annotations

import ast
import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from harness.datasets import Doc, Query
from harness.errors import DataError

# kinds of malformation, as named in configs/datasets.yaml known_issues
DUPLICATE_IDS = "duplicate-ids"
UNJUDGED = "unjudged-topics"
RELEVANCE_CODE = "relevance-code"
QUERY_NUMBERING = "query-numbering"
BLANK_LINE = "blank-line"
UNKNOWN_DOCS = "unknown-docs"


class Issues:
    """Malformations seen while reading: raised, or counted when the dataset is known to contain them."""

    def __init__(self, tolerate: Iterable[str] = (), examples: int = 3) -> None:
        self.tolerate = set(tolerate)
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}
        self._keep = examples

    def report(self, kind: str, where: str, message: str, *, fix: str | None = None) -> None:
        """Raise DataError(``where: message``) unless ``kind`` is tolerated; then count it."""
        if kind not in self.tolerate:
            raise DataError(f"{where}: {message}", fix=fix)
        self.note(kind, f"{where}: {message}")

    def note(self, kind: str, example: str) -> None:
        """Count a harmless or expected oddity (e.g. a blank line) without raising."""
        self.counts[kind] += 1
        ex = self.examples.setdefault(kind, [])
        if len(ex) < self._keep:
            ex.append(example)

    def as_dict(self) -> dict[str, Any]:
        return {k: {"count": n, "examples": self.examples.get(k, [])} for k, n in sorted(self.counts.items())}


class IdGuard:
    """Rejects (or counts) a repeated id; remembers where each id was first seen."""

    def __init__(self, what: str, issues: Issues) -> None:
        self.what = what
        self.issues = issues
        self.first: dict[str, str] = {}

    def fresh(self, id_: str, where: str) -> bool:
        """True for a new id; a repeat is reported (DataError unless tolerated) and returns False."""
        if id_ in self.first:
            self.issues.report(DUPLICATE_IDS, where, f"duplicate {self.what} id {id_!r} (first at {self.first[id_]})",
                               fix="ids must be unique within a file; the file may be damaged or concatenated twice")
            return False
        self.first[id_] = where
        return True


# ----------------------------------------------------------------------------------------- lines


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently gunzipping ``*.gz``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without the newline) for every line; a non-UTF-8 line raises DataError."""
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not UTF-8 ({exc.reason} at byte {exc.start})",
                                fix="the file is damaged or in another encoding; fetch it again") from None
            yield lineno, text.rstrip("\r\n")


def iter_tsv(path: Path, columns: int | tuple[int, int], issues: Issues, *, sep: str | None = "\t") -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) per non-blank line; ``columns`` is a count or a (min, max) range.

    ``sep=None`` splits on runs of whitespace.
    """
    lo, hi = (columns, columns) if isinstance(columns, int) else columns
    for lineno, line in iter_lines(path):
        if not line.strip():
            issues.note(BLANK_LINE, f"{path}:{lineno}")
            continue
        parts = line.split(sep) if sep else line.split()
        if not lo <= len(parts) <= hi:
            want = str(lo) if lo == hi else f"{lo}-{hi}"
            raise DataError(f"{path}:{lineno}: expected {want} columns, got {len(parts)}",
                            fix="the file is truncated or not in the expected format")
        yield lineno, parts


def iter_jsonl(path: Path, issues: Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; invalid JSON or a non-object raises DataError."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            issues.note(BLANK_LINE, f"{path}:{lineno}")
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})",
                            fix="the file is truncated or damaged; fetch it again") from None
        if not isinstance(rec, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        yield lineno, rec


def load_json(path: Path) -> Any:
    """A whole JSON document (small files only); errors name file:line."""
    with open_binary(path) as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 ({exc.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})", fix="fetch the file again") from None


def iter_json_array(path: Path, chunk: int = 1 << 20, max_element: int = 1 << 28) -> Iterator[tuple[int, Any]]:
    """Stream the elements of a top-level JSON array: (line where the element starts, element).

    Reads ``chunk`` characters at a time, so a multi-GB array (DPR's biencoder files) is never
    held whole; one element may not exceed ``max_element`` characters.
    """
    decoder = json.JSONDecoder()
    with open_binary(path) as raw_fh:
        fh = io.TextIOWrapper(raw_fh, encoding="utf-8", errors="strict")
        state = {"buf": "", "pos": 0, "line": 1, "eof": False}

        def more() -> bool:
            if state["eof"]:
                return False
            try:
                data = fh.read(chunk)
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{state['line']}: not UTF-8 ({exc.reason})") from None
            if not data:
                state["eof"] = True
                return False
            state["buf"] = state["buf"][state["pos"]:] + data
            state["pos"] = 0
            return True

        def peek() -> str:
            """The next non-blank character ('' at the end of the file), counting lines."""
            while True:
                buf, pos = state["buf"], state["pos"]
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    state["line"] += buf[pos] == "\n"
                    pos += 1
                state["pos"] = pos
                if pos < len(buf):
                    return buf[pos]
                if not more():
                    return ""

        if peek() != "[":
            raise DataError(f"{path}:{state['line']}: expected a JSON array ('[')")
        state["pos"] += 1
        first = True
        while True:
            ch = peek()
            if ch == "]":
                state["pos"] += 1
                break
            if not first:
                if ch != ",":
                    raise DataError(f"{path}:{state['line']}: expected ',' or ']' after an array element"
                                    + (" (the file ends here: truncated?)" if ch == "" else ""))
                state["pos"] += 1
                ch = peek()
            if ch == "":
                raise DataError(f"{path}:{state['line']}: the JSON array is not closed (truncated file?)")
            while True:
                buf, pos = state["buf"], state["pos"]
                try:
                    value, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError as exc:
                    if len(buf) - pos < max_element and more():
                        continue
                    line = state["line"] + buf.count("\n", pos, exc.pos)
                    raise DataError(f"{path}:{line}: invalid JSON ({exc.msg})", fix="the file is damaged; fetch it again") from None
                if end >= len(buf) - 1 and more():  # a value ending at the buffer's end may continue
                    continue
                break
            yield state["line"], value
            state["line"] += buf.count("\n", pos, end)
            state["pos"] = end
            first = False
        if peek() != "":
            raise DataError(f"{path}:{state['line']}: unexpected data after the JSON array")


# ---------------------------------------------------------------------------------------- queries


def _answers_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(a, str) for a in value):
        return list(dict.fromkeys(value))
    raise DataError(f"{where}: answers must be a string or a list of strings, got {type(value).__name__}")


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: field {field!r} must be a string, got {type(value).__name__}")
    return value.strip()


def read_dpr_qa_tsv(path: Path, issues: Issues) -> Iterator[Query]:
    """DPR's ``*.qa.csv`` / Anserini's ``topics.dpr.*.txt``: question<TAB>Python list of answers.

    Read as DPR reads it (``csv.reader`` with a tab delimiter: fields may be quoted with ``"``,
    quotes doubled inside; TriviaQA's lists use this). Ids are 0-based record positions (as
    pyserini numbers these topics).
    """
    import csv

    def lines() -> Iterator[str]:
        for _, line in iter_lines(path):
            yield line + "\n"

    reader = csv.reader(lines(), delimiter="\t")
    i = 0
    try:
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not row or (len(row) == 1 and not row[0].strip()):
                issues.note(BLANK_LINE, where)
                continue
            if len(row) != 2:
                raise DataError(f"{where}: expected 2 columns (question, answers), got {len(row)}",
                                fix="the file is truncated or not a DPR QA list")
            question, answers = row
            try:
                parsed = ast.literal_eval(answers)
            except (ValueError, SyntaxError):
                raise DataError(f"{where}: answers {answers[:60]!r} are not a Python list literal") from None
            yield Query(str(i), question.strip(), _answers_list(parsed, where))
            i += 1
    except csv.Error as exc:
        raise DataError(f"{path}:{reader.line_num}: malformed quoting ({exc})") from None


def read_qa_jsonl(path: Path, issues: Issues) -> Iterator[Query]:
    """DrQA / NQ-open / Anserini JSONL: {"question": ..., "answer": [...]}; ids: "id" or 0-based position."""
    guard = IdGuard("question", issues)
    for i, (lineno, rec) in enumerate(iter_jsonl(path, issues)):
        where = f"{path}:{lineno}"
        for field in ("question", "answer"):
            if field not in rec:
                raise DataError(f"{where}: record has no {field!r} field")
        qid = str(rec.get("id", i))
        if guard.fresh(qid, where):
            yield Query(qid, _text(rec["question"], where, "question"), _answers_list(rec["answer"], where))


def read_brmson_json(path: Path, issues: Issues) -> Iterator[Query]:
    """brmson WebQuestions ``main/*.json``: a JSON array of {"qId", "qText", "answers"}."""
    guard = IdGuard("question", issues)
    for lineno, rec in iter_json_array(path):
        where = f"{path}:{lineno}"
        if not isinstance(rec, dict) or not {"qId", "qText", "answers"} <= set(rec):
            raise DataError(f"{where}: expected an object with qId, qText and answers")
        qid = str(rec["qId"])
        if guard.fresh(qid, where):
            yield Query(qid, _text(rec["qText"], where, "qText"), _answers_list(rec["answers"], where))


def read_brmson_tsv(path: Path, issues: Issues) -> Iterator[Query]:
    """brmson CuratedTREC ``*.tsv``: id<TAB>type<TAB>question<TAB>answer regex."""
    guard = IdGuard("question", issues)
    for lineno, (qid, _type, question, answer) in iter_tsv(path, 4, issues):
        if guard.fresh(qid, f"{path}:{lineno}"):
            yield Query(qid, question.strip(), [answer])


def read_kilt_jsonl(path: Path, issues: Issues) -> Iterator[Query]:
    """KILT task files: {"id", "input", "output": [{"answer", "provenance": [{"wikipedia_id"}]}]}.

    Answers are the distinct answer strings; gold are the distinct Wikipedia page ids of the provenance.
    """
    guard = IdGuard("query", issues)
    for lineno, rec in iter_jsonl(path, issues):
        where = f"{path}:{lineno}"
        if "id" not in rec or "input" not in rec:
            raise DataError(f"{where}: a KILT record needs 'id' and 'input'")
        answers: list[str] = []
        gold: list[str] = []
        for out in rec.get("output", []) or []:
            if isinstance(out.get("answer"), str) and out["answer"] not in answers:
                answers.append(out["answer"])
            for prov in out.get("provenance", []) or []:
                wid = str(prov.get("wikipedia_id", ""))
                if wid and wid not in gold:
                    gold.append(wid)
        qid = str(rec["id"])
        if guard.fresh(qid, where):
            yield Query(qid, _text(rec["input"], where, "input"), answers or None, gold or None)


def read_tsv_topics(path: Path, issues: Issues) -> Iterator[Query]:
    """qid<TAB>text (MS MARCO, TREC DL and BEIR topics in Anserini's layout; gzip by extension)."""
    guard = IdGuard("query", issues)
    for lineno, (qid, text) in iter_tsv(path, 2, issues):
        if guard.fresh(qid, f"{path}:{lineno}"):
            yield Query(qid, text.strip())


_TOP_RE = re.compile(r"<top>\s*<num>\s*(?P<num>[^<\s]+)\s*</num>\s*<title>(?P<title>.*?)</title>\s*</top>", re.DOTALL)


def read_trec_topics_xml(path: Path, issues: Issues) -> Iterator[Query]:
    """Terrier-style topics: <top><num>N</num><title>TEXT</title></top> (Vaswani)."""
    text = "\n".join(line for _, line in iter_lines(path))
    guard = IdGuard("query", issues)
    end = 0
    for m in _TOP_RE.finditer(text):
        if text[end:m.start()].strip():
            line = text.count("\n", 0, m.start()) + 1
            raise DataError(f"{path}:{line}: unexpected text between topics")
        end = m.end()
        line = text.count("\n", 0, m.start()) + 1
        if guard.fresh(m["num"], f"{path}:{line}"):
            yield Query(m["num"], " ".join(m["title"].split()))
    if text[end:].strip():
        raise DataError(f"{path}:{text.count(chr(10), 0, end) + 1}: unexpected text after the last topic (truncated?)")


def iter_smart(path: Path) -> Iterator[tuple[int, str, dict[str, str]]]:
    """SMART-format records (Cranfield, CISI): ``.I id`` then fields ``.T .A .B .W .X ...``.

    Yields (line of .I, id, {field letter: text}).
    """
    rec_id, rec_line, fields, field = None, 0, {}, None
    for lineno, line in iter_lines(path):
        if line.startswith(".I"):
            if rec_id is not None:
                yield rec_line, rec_id, {k: " ".join(v.split()) for k, v in fields.items()}
            parts = line.split()
            if len(parts) != 2:
                raise DataError(f"{path}:{lineno}: expected '.I <id>'")
            rec_id, rec_line, fields, field = parts[1], lineno, {}, None
        elif len(line) >= 2 and line[0] == "." and line[1].isalpha() and line[2:].strip() == "":
            if rec_id is None:
                raise DataError(f"{path}:{lineno}: field {line.strip()} before the first '.I'")
            field = line[1]
            fields.setdefault(field, "")
        else:
            if rec_id is None:
                if line.strip():
                    raise DataError(f"{path}:{lineno}: text before the first '.I'")
                continue
            if field is None:
                raise DataError(f"{path}:{lineno}: text outside a field of record {rec_id}")
            fields[field] += " " + line
    if rec_id is not None:
        yield rec_line, rec_id, {k: " ".join(v.split()) for k, v in fields.items()}


def read_smart_queries(path: Path, issues: Issues, *, renumber: bool = False) -> Iterator[Query]:
    """SMART queries (.I/.W). ``renumber``: ids are 1-based positions (Cranfield's qrels numbering)."""
    guard = IdGuard("query", issues)
    for pos, (lineno, qid, fields) in enumerate(iter_smart(path), 1):
        where = f"{path}:{lineno}"
        if "W" not in fields:
            raise DataError(f"{where}: query {qid} has no .W text")
        if renumber:
            if str(int(qid)) != str(pos):
                issues.report(QUERY_NUMBERING, where, f"query .I {qid} is number {pos} in file order; renumbered to {pos}")
            qid = str(pos)
        else:
            qid = str(int(qid)) if qid.isdigit() else qid
        if guard.fresh(qid, where):
            yield Query(qid, fields["W"])


QUERY_FORMATS: dict[str, Callable[[Path, Issues], Iterator[Query]]] = {
    "dpr-qa-tsv": read_dpr_qa_tsv,
    "qa-jsonl": read_qa_jsonl,
    "brmson-json": read_brmson_json,
    "brmson-tsv": read_brmson_tsv,
    "kilt-jsonl": read_kilt_jsonl,
    "tsv-topics": read_tsv_topics,
    "tsv-topics-gz": read_tsv_topics,
    "trec-topics-xml": read_trec_topics_xml,
    "smart-queries": read_smart_queries,
}


def read_queries(path: Path, fmt: str | None, issues: Issues) -> Iterator[Query]:
    """Parse a query file in registry format ``fmt``."""
    if fmt not in QUERY_FORMATS:
        raise DataError(f"{path}: no query reader for format {fmt!r}; known: {', '.join(QUERY_FORMATS)}")
    return QUERY_FORMATS[fmt](Path(path), issues)


# ------------------------------------------------------------------------------------------- docs


_DOC_RE = re.compile(r"<DOC>\s*<DOCNO>\s*(?P<id>[^<\s]+)\s*</DOCNO>(?P<text>.*?)</DOC>", re.DOTALL)


def read_trec_docs(path: Path, issues: Issues) -> Iterator[Doc]:
    """TREC SGML documents: <DOC><DOCNO>id</DOCNO> text </DOC>, streamed document by document."""
    guard = IdGuard("document", issues)
    buf: list[str] = []
    start = 0
    for lineno, line in iter_lines(path):
        if not buf:
            if not line.strip():
                continue
            if line.strip() != "<DOC>":
                raise DataError(f"{path}:{lineno}: expected <DOC>")
            start = lineno
        buf.append(line)
        if line.strip() == "</DOC>":
            m = _DOC_RE.fullmatch("\n".join(buf).strip())
            if not m:
                raise DataError(f"{path}:{start}: malformed <DOC> record (no <DOCNO>?)")
            if guard.fresh(m["id"], f"{path}:{start}"):
                yield Doc(m["id"], "", " ".join(m["text"].split()))
            buf = []
    if buf:
        raise DataError(f"{path}:{start}: <DOC> not closed (truncated file?)")


def read_smart_docs(path: Path, issues: Issues) -> Iterator[Doc]:
    """SMART documents (.I/.T/.A/.B/.W[/.X]): title = .T, text = .W (title repeated when .W is empty)."""
    guard = IdGuard("document", issues)
    for lineno, did, fields in iter_smart(path):
        title, text = fields.get("T", ""), fields.get("W", "")
        if guard.fresh(did, f"{path}:{lineno}"):
            yield Doc(did, title, text or title)


def read_beir_corpus(path: Path, issues: Issues) -> Iterator[Doc]:
    """BEIR corpus.jsonl(.gz): {"_id", "title", "text"}."""
    guard = IdGuard("document", issues)
    for lineno, rec in iter_jsonl(path, issues):
        where = f"{path}:{lineno}"
        if "_id" not in rec or "text" not in rec:
            raise DataError(f"{where}: a BEIR document needs '_id' and 'text'")
        did = str(rec["_id"])
        if guard.fresh(did, where):
            yield Doc(did, rec.get("title") or "", _text(rec["text"], where, "text"))


DOC_FORMATS: dict[str, Callable[[Path, Issues], Iterator[Doc]]] = {
    "trec-docs": read_trec_docs,
    "smart-docs": read_smart_docs,
    "beir-corpus-jsonl-gz": read_beir_corpus,
}


def read_docs(path: Path, fmt: str | None, issues: Issues) -> Iterator[Doc]:
    if fmt not in DOC_FORMATS:
        raise DataError(f"{path}: no document reader for format {fmt!r}; known: {', '.join(DOC_FORMATS)}")
    return DOC_FORMATS[fmt](Path(path), issues)


# ------------------------------------------------------------------------------------------ qrels


Qrels = dict[str, dict[str, int]]


def _add_judgment(qrels: Qrels, qid: str, did: str, rel: int, where: str, issues: Issues) -> None:
    if did in qrels.setdefault(qid, {}):
        issues.report(DUPLICATE_IDS, where, f"document {did!r} judged twice for query {qid!r}")
        rel = max(rel, qrels[qid][did])
    qrels[qid][did] = rel


def read_trec_qrels(path: Path, issues: Issues) -> Qrels:
    """TREC qrels ``qid iter docid rel`` (whitespace-separated, 4 columns)."""
    qrels: Qrels = {}
    for lineno, (qid, _it, did, rel) in iter_tsv(path, 4, issues, sep=None):
        where = f"{path}:{lineno}"
        try:
            value = int(rel)
        except ValueError:
            raise DataError(f"{where}: relevance {rel!r} is not an integer") from None
        _add_judgment(qrels, qid, did, value, where, issues)
    return qrels


def read_cranfield_qrels(path: Path, issues: Issues) -> Qrels:
    """Cranfield ``qid docid code``: code 1 (complete answer) .. 4 (minimum interest) -> grade 4 .. 1.

    Code -1 (no documented meaning) is reported as a relevance-code issue and dropped.
    """
    qrels: Qrels = {}
    for lineno, (qid, did, code) in iter_tsv(path, 3, issues, sep=None):
        where = f"{path}:{lineno}"
        if code not in {"1", "2", "3", "4"}:
            issues.report(RELEVANCE_CODE, where, f"relevance code {code!r} is not one of Cleverdon's codes 1-4")
            continue
        _add_judgment(qrels, qid, did, 5 - int(code), where, issues)
    return qrels


def read_cisi_qrels(path: Path, issues: Issues) -> Qrels:
    """CISI.REL ``qid docid 0 0.000000``: every listed pair is relevant (grade 1)."""
    qrels: Qrels = {}
    for lineno, (qid, did, _a, _b) in iter_tsv(path, 4, issues, sep=None):
        _add_judgment(qrels, qid, did, 1, f"{path}:{lineno}", issues)
    return qrels


QRELS_FORMATS: dict[str, Callable[[Path, Issues], Qrels]] = {
    "trec-qrels": read_trec_qrels,
    "cranfield-qrels": read_cranfield_qrels,
    "cisi-qrels": read_cisi_qrels,
}


def read_qrels(path: Path, fmt: str | None, issues: Issues) -> Qrels:
    if fmt not in QRELS_FORMATS:
        raise DataError(f"{path}: no qrels reader for format {fmt!r}; known: {', '.join(QRELS_FORMATS)}")
    return QRELS_FORMATS[fmt](Path(path), issues)


def check_qrels_docs(qrels: Qrels, doc_ids: set[str] | frozenset[str], source: Path, issues: Issues) -> Qrels:
    """Judged documents must be in the corpus: raise (or count and drop, if tolerated) the others."""
    unknown = sorted({d for r in qrels.values() for d in r if d not in doc_ids})
    if not unknown:
        return qrels
    issues.report(UNKNOWN_DOCS, str(source), f"{len(unknown)} judged documents are not in the corpus (e.g. {unknown[:3]})",
                  fix="the qrels and the corpus come from different versions of the dataset")
    return {q: {d: r for d, r in docs.items() if d in doc_ids} for q, docs in qrels.items()}


def keep_judged(queries: Iterable[Query], qrels: Qrels, source: Path, issues: Issues) -> list[Query]:
    """Queries with at least one judgment; others are reported as unjudged topics (raised unless tolerated)."""
    out, missing = [], []
    for q in queries:
        (out if qrels.get(q.id) else missing).append(q)
    if missing:
        issues.report(UNJUDGED, str(source), f"{len(missing)} topics have no judgment (e.g. {[q.id for q in missing[:3]]})",
                      fix="pass the judged subset of the topics")
        issues.counts[UNJUDGED] += len(missing) - 1
    unknown = sorted(set(qrels) - {q.id for q in out})
    if unknown:
        raise DataError(f"{source}: qrels name {len(unknown)} queries that are not in the topics (e.g. {unknown[:3]})",
                        fix="the topics and qrels files do not belong together")
    return out
